#pragma once
// A communication thread for an expert_comm: all_to_all calls queued on it run one after another, in queue order,
// while the caller computes — the CPU counterpart of a communication stream. Dual-batch overlap keeps one
// micro-batch's dispatch/combine in flight here while the other micro-batch computes.
//
// Ordering: every rank queues its exchanges in the same order, and this thread runs them in that order, so the
// collective stays matched. While exchanges are queued the comm must not be used from another thread; a caller
// waits for every future it started before it calls the comm directly again.

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "workers/expert_comm.hpp"

namespace zmoe {

class comm_stream {
  public:
    /// `comm` must outlive this.
    explicit comm_stream(expert_comm& comm);
    ~comm_stream();
    comm_stream(const comm_stream&) = delete;
    comm_stream& operator=(const comm_stream&) = delete;

    /// Queues comm.all_to_all(send); the future gives its result, or rethrows its error.
    std::future<std::vector<std::vector<float>>> all_to_all(std::vector<std::vector<float>> send);

  private:
    void loop();

    expert_comm& comm_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> queue_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace zmoe
