#pragma once
// A small fork-join pool for the CPU kernels. parallel_for splits an index range into contiguous chunks; the
// caller runs one chunk itself. Work partitioning never changes results: every kernel computes each output
// element wholly inside one chunk, with a summation order fixed by the element alone.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace zmoe {

class thread_pool {
  public:
    /// `num_threads` total threads including the caller; 0 = std::thread::hardware_concurrency().
    explicit thread_pool(int num_threads = 0);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

    /// Calls fn(begin, end) over disjoint chunks covering [0, n), at most one chunk per thread, and returns when
    /// all are done. Chunks are at least `min_chunk` long. Not reentrant: fn must not call parallel_for.
    /// An exception thrown by fn is rethrown here (the first one).
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1);

  private:
    void worker_loop(int index);

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable done_;
    const std::function<void(int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0;
    int64_t job_chunk_ = 0;
    uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
};

}  // namespace zmoe
