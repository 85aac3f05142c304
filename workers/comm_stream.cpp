#include "workers/comm_stream.hpp"

#include <memory>

namespace zmoe {

comm_stream::comm_stream(expert_comm& comm) : comm_(comm), thread_([this] { loop(); }) {}

comm_stream::~comm_stream() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

std::future<std::vector<std::vector<float>>> comm_stream::all_to_all(std::vector<std::vector<float>> send) {
    auto task = std::make_shared<std::packaged_task<std::vector<std::vector<float>>()>>(
        [this, s = std::move(send)]() mutable { return comm_.all_to_all(std::move(s)); });
    auto result = task->get_future();
    {
        std::lock_guard lock(mu_);
        queue_.emplace_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return result;
}

void comm_stream::loop() {
    for (;;) {
        std::function<void()> next;
        {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
            // Queued exchanges run even when stopping: a peer rank may be waiting on them.
            if (queue_.empty()) return;
            next = std::move(queue_.front());
            queue_.pop_front();
        }
        next();
    }
}

}  // namespace zmoe
