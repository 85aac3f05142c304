#include "workers/thread_pool.hpp"

#include <algorithm>

namespace zmoe {

thread_pool::thread_pool(int num_threads) {
    if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

thread_pool::~thread_pool() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

void thread_pool::worker_loop(int index) {
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int64_t, int64_t)>* job;
        int64_t begin, end;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            job = job_;
            begin = std::min(job_n_, index * job_chunk_);
            end = std::min(job_n_, begin + job_chunk_);
        }
        std::exception_ptr err;
        if (begin < end) {
            try {
                (*job)(begin, end);
            } catch (...) {
                err = std::current_exception();
            }
        }
        {
            std::lock_guard lock(mutex_);
            if (err && !error_) error_ = err;
            if (--pending_ == 0) done_.notify_one();
        }
    }
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
    if (n <= 0) return;
    const int64_t threads = num_threads();
    const int64_t chunk = std::max<int64_t>(std::max<int64_t>(1, min_chunk), (n + threads - 1) / threads);
    if (workers_.empty() || chunk >= n) {
        fn(0, n);
        return;
    }
    {
        std::lock_guard lock(mutex_);
        job_ = &fn;
        job_n_ = n;
        job_chunk_ = chunk;
        pending_ = static_cast<int>(workers_.size());
        error_ = nullptr;
        ++generation_;
    }
    wake_.notify_all();
    std::exception_ptr err;
    try {
        fn(0, std::min(n, chunk));
    } catch (...) {
        err = std::current_exception();
    }
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    if (!err) err = error_;
    lock.unlock();
    if (err) std::rethrow_exception(err);
}

}  // namespace zmoe
