#pragma once
// zmq::poll that treats a signal's interruption (EINTR) as "nothing ready": a SIGTERM arriving while a loop waits
// must reach the loop's stop check, not escape as an exception.

#include <cerrno>
#include <chrono>
#include <zmq.hpp>

namespace zmoe {

inline void poll_interruptible(zmq_pollitem_t* items, size_t n, std::chrono::milliseconds timeout) {
    if (zmq_poll(items, static_cast<int>(n), static_cast<long>(timeout.count())) < 0) {
        if (zmq_errno() == EINTR) {
            for (size_t i = 0; i < n; ++i) items[i].revents = 0;
            return;
        }
        throw zmq::error_t();
    }
}

}  // namespace zmoe
