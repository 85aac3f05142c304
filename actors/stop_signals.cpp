#include "actors/stop_signals.hpp"

#include <atomic>
#include <csignal>

namespace zmoe {

namespace {
// A lock-free atomic is async-signal-safe to store from a handler.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_stop_signal(int) { g_stop.store(true, std::memory_order_relaxed); }
}  // namespace

void install_stop_signal_handlers() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

bool stop_signal_received() { return g_stop.load(std::memory_order_relaxed); }
void request_process_stop() { g_stop.store(true, std::memory_order_relaxed); }
void clear_stop_signal() { g_stop.store(false, std::memory_order_relaxed); }

}  // namespace zmoe
