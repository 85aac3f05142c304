#pragma once
// A few threads that run submitted jobs in submission order per thread, FIFO overall: the frontend tokenizes
// prompts here so that its socket thread keeps answering heartbeats and other clients while a large prompt is
// encoded. A job posts its result back to the actor (actor::post); the pool never touches actor state.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace zmoe {

class work_pool {
  public:
    /// The name every pool thread carries (/proc/self/task/*/comm).
    static constexpr const char* kThreadName = "zmoe-work-pool";
    /// num_threads >= 1.
    explicit work_pool(size_t num_threads);
    /// Runs the jobs already queued, then joins the threads.
    ~work_pool();
    work_pool(const work_pool&) = delete;
    work_pool& operator=(const work_pool&) = delete;

    /// Thread-safe. A job must not throw (an exception is swallowed and logged).
    void submit(std::function<void()> job);
    /// Jobs queued or running.
    size_t num_pending() const;

  private:
    void run();

    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    size_t running_ = 0;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace zmoe
