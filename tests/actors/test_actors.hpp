#pragma once
// Small actors and helpers shared by the actor tests.

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "actors/actor.hpp"

namespace zmoe::test {

/// Polls pred until it holds or timeout passes; returns its last value.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
        if (std::chrono::steady_clock::now() >= deadline) return pred();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

/// ROUTER that sends every message back to its sender.
class echo_server : public actor {
  public:
    explicit echo_server(const std::string& endpoint, actor_options o = {}) : actor("echo_server", o) {
        sock_ = add_socket(socket_kind::router, [this](const inbound_message& m) {
            send_to(sock_, m.peer, m.payload);
            num_echoed.fetch_add(1);
        });
        endpoint_ = bind(sock_, endpoint);
    }
    ~echo_server() override {
        request_stop();
        join();
    }
    const std::string& endpoint() const { return endpoint_; }
    std::atomic<int> num_echoed{0};

  private:
    socket_id sock_;
    std::string endpoint_;
};

/// DEALER that bounces a counter off a server `rounds` times, then stops.
class pinger : public actor {
  public:
    pinger(const std::string& endpoint, int rounds) : actor("pinger"), rounds_(rounds) {
        sock_ = add_socket(socket_kind::dealer, [this](const inbound_message& m) {
            int n = std::stoi(std::string(m.payload));
            if (n != last_ + 1) out_of_order.store(true);
            last_ = n;
            if (n + 1 == rounds_) {
                num_round_trips.store(n + 1);
                stop_now();
            } else {
                send(sock_, std::to_string(n + 1));
            }
        });
        connect(sock_, endpoint);
    }
    ~pinger() override {
        request_stop();
        join();
    }
    std::atomic<int> num_round_trips{0};
    std::atomic<bool> out_of_order{false};

  protected:
    void on_start() override { send(sock_, "0"); }

  private:
    socket_id sock_;
    int rounds_;
    int last_ = -1;
};

}  // namespace zmoe::test
