#include "frontend/work_pool.hpp"

#include <pthread.h>

#include <exception>

#include "base/check.hpp"
#include "base/log.hpp"

namespace zmoe {

work_pool::work_pool(size_t num_threads) {
    ZMOE_CHECK(num_threads >= 1, "a work pool needs a thread");
    for (size_t i = 0; i < num_threads; ++i) {
        threads_.emplace_back([this] { run(); });
        pthread_setname_np(threads_.back().native_handle(), kThreadName);  // visible in top -H, gdb, /proc
    }
}

work_pool::~work_pool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

void work_pool::submit(std::function<void()> job) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
}

size_t work_pool::num_pending() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return jobs_.size() + running_;
}

void work_pool::run() {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
            if (jobs_.empty()) return;  // stopping, and nothing left
            job = std::move(jobs_.front());
            jobs_.pop_front();
            ++running_;
        }
        try {
            job();
        } catch (const std::exception& e) {
            ZMOE_LOG(error, "work pool: a job threw: " << e.what());
        }
        std::lock_guard<std::mutex> lock(mutex_);
        --running_;
    }
}

}  // namespace zmoe
