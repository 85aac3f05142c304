#include "actors/actor.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <mutex>
#include <vector>
#include <zmq.hpp>

#include "actors/stop_signals.hpp"
#include "actors/zmq_context.hpp"
#include "messages/client_protocol.hpp"
#include "tests/actors/test_actors.hpp"

namespace zmoe {
namespace {

using namespace std::chrono_literals;
using test::eventually;

TEST(Actor, PingPongOverInproc) {
    test::echo_server server("inproc://actor-test-pingpong");
    test::pinger client(server.endpoint(), 200);
    server.start();
    client.start();
    ASSERT_TRUE(eventually([&] { return client.finished(); }));
    EXPECT_EQ(client.num_round_trips.load(), 200);
    EXPECT_FALSE(client.out_of_order.load());
    EXPECT_EQ(server.num_echoed.load(), 200);
}

TEST(Actor, PingPongOverTcpLoopbackWithEphemeralPort) {
    test::echo_server server("tcp://127.0.0.1:*");
    ASSERT_NE(server.endpoint().find("tcp://127.0.0.1:"), std::string::npos);
    EXPECT_EQ(server.endpoint().find('*'), std::string::npos) << server.endpoint();
    test::pinger client(server.endpoint(), 100);
    server.start();
    client.start();
    ASSERT_TRUE(eventually([&] { return client.finished(); }));
    EXPECT_EQ(client.num_round_trips.load(), 100);
}

class timer_actor : public actor {
  public:
    timer_actor() : actor("timers") {}
    ~timer_actor() override {
        request_stop();
        join();
    }
    std::vector<std::string> fired;  // read after join
    int num_periodic = 0;

  protected:
    void on_start() override {
        add_timer(30ms, [this] { fired.push_back("30"); });
        add_timer(10ms, [this] { fired.push_back("10"); });
        timer_id cancelled = add_timer(15ms, [this] { fired.push_back("cancelled"); });
        add_timer(20ms, [this] { fired.push_back("20"); });
        add_timer(0ms, [this] { fired.push_back("a"); });
        add_timer(0ms, [this] { fired.push_back("b"); });
        add_timer(
            5ms, [this] { ++num_periodic; }, true);
        add_timer(2ms, [this] { throw std::runtime_error("a failing timer must not stop the actor"); });
        cancel_timer(cancelled);
        add_timer(60ms, [this] { stop_now(); });
    }
};

TEST(Actor, TimersFireInDueOrderAndPeriodically) {
    timer_actor a;
    auto t0 = std::chrono::steady_clock::now();
    a.start();
    ASSERT_TRUE(eventually([&] { return a.finished(); }));
    a.join();
    auto elapsed = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(a.fired, (std::vector<std::string>{"a", "b", "10", "20", "30"}));
    EXPECT_GE(elapsed, 60ms);
    // 60 ms of a 5 ms period: 12 ideally; allow for a slow machine but not for a stuck or bursting timer.
    EXPECT_GE(a.num_periodic, 5);
    EXPECT_LE(a.num_periodic, 12);
}

TEST(Actor, PostedFunctionsRunOnTheActorThreadInOrder) {
    class idle : public actor {
      public:
        idle() : actor("idle") {}
        ~idle() override {
            request_stop();
            join();
        }
    } a;
    a.start();
    constexpr int kThreads = 4;
    constexpr int kPerThread = 500;
    std::vector<int> last(kThreads, -1);  // touched only on the actor's thread
    std::atomic<int> num_run{0};
    std::atomic<bool> disorder{false};
    std::atomic<bool> wrong_thread{false};
    std::thread::id actor_thread;
    std::atomic<bool> ready{false};
    a.post([&] {
        actor_thread = std::this_thread::get_id();
        ready = true;
    });
    ASSERT_TRUE(eventually([&] { return ready.load(); }));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < kPerThread; ++i) {
                a.post([&, t, i] {
                    if (last[t] != i - 1) disorder = true;
                    if (std::this_thread::get_id() != actor_thread) wrong_thread = true;
                    last[t] = i;
                    num_run.fetch_add(1);
                });
            }
        });
    }
    for (auto& th : threads) th.join();
    ASSERT_TRUE(eventually([&] { return num_run.load() == kThreads * kPerThread; }));
    EXPECT_FALSE(disorder.load());
    EXPECT_FALSE(wrong_thread.load());
}

TEST(Actor, StopIsPrompt) {
    actor_options o;
    o.max_poll_wait = 20000ms;  // the stop must not wait for a poll timeout
    class idle : public actor {
      public:
        explicit idle(actor_options o) : actor("idle", o) {}
        ~idle() override {
            request_stop();
            join();
        }
    } a(o);
    a.start();
    std::this_thread::sleep_for(20ms);
    auto t0 = std::chrono::steady_clock::now();
    a.request_stop();
    a.join();
    EXPECT_TRUE(a.finished());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5000ms);  // a bound (loaded CI), far below the poll wait
}

TEST(Actor, SignalStopsTheLoopWithinTheBoundedPollWait) {
    install_stop_signal_handlers();
    clear_stop_signal();
    actor_options o;
    o.max_poll_wait = 20ms;
    class idle : public actor {
      public:
        explicit idle(actor_options o) : actor("idle", o) {}
        ~idle() override {
            request_stop();
            join();
        }
    } a(o);
    a.start();
    std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(a.finished());
    auto t0 = std::chrono::steady_clock::now();
    std::raise(SIGTERM);
    ASSERT_TRUE(eventually([&] { return a.finished(); }, 10000ms));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5000ms);  // a liveness bound, generous for a loaded CI machine
    clear_stop_signal();
}

class draining_actor : public actor {
  public:
    draining_actor() : actor("draining") {}
    ~draining_actor() override {
        request_stop();
        join();
    }
    std::atomic<bool> draining{false};

  protected:
    bool on_stop_requested() override {
        draining = true;
        add_timer(50ms, [this] { stop_now(); });
        return false;
    }
};

TEST(Actor, StopCanBeDeferredToDrain) {
    draining_actor a;
    a.start();
    a.request_stop();
    ASSERT_TRUE(eventually([&] { return a.draining.load(); }));
    std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(a.finished());
    ASSERT_TRUE(eventually([&] { return a.finished(); }));
}

/// Two actors watching each other; the server also watches every peer that says hello.
class watcher : public actor {
  public:
    watcher(const char* name, actor_options o) : actor(name, o) {}
    ~watcher() override {
        request_stop();
        join();
    }
    std::string serve(const std::string& endpoint) {
        sock_ = add_socket(socket_kind::router, [this](const inbound_message& m) {
            if (m.payload == "hello") {
                watch_peer(sock_, std::string(m.peer), "ping", [this] {
                    dead_at = std::chrono::steady_clock::now();
                    num_dead.fetch_add(1);
                });
            }
        });
        return bind(sock_, endpoint);
    }
    void dial(const std::string& endpoint) {
        sock_ = add_socket(socket_kind::dealer, [](const inbound_message&) {});
        set_routing_id(sock_, "worker-0");
        connect(sock_, endpoint);
        dialing_ = true;
    }
    std::atomic<int> num_dead{0};
    std::chrono::steady_clock::time_point dead_at;

  protected:
    void on_start() override {
        if (!dialing_) return;
        send(sock_, "hello");
        watch_peer(sock_, "", "ping", [this] { num_dead.fetch_add(1); });
    }

  private:
    socket_id sock_ = -1;
    bool dialing_ = false;
};

TEST(Actor, HeartbeatLossIsDetectedWithinThreeIntervals) {
    actor_options o;
    o.heartbeat_interval = 150ms;  // 3 missed = 450 ms: a loaded 2-core CI machine does not stall that long
    watcher server("server", o);
    watcher worker("worker", o);
    std::string endpoint = server.serve("inproc://actor-test-heartbeat");
    worker.dial(endpoint);
    server.start();
    worker.start();
    // Ten intervals of healthy heartbeats: nobody is declared dead.
    std::this_thread::sleep_for(1500ms);
    EXPECT_EQ(server.num_dead.load(), 0);
    EXPECT_EQ(worker.num_dead.load(), 0);

    worker.request_stop();
    worker.join();
    auto stopped_at = std::chrono::steady_clock::now();
    ASSERT_TRUE(eventually([&] { return server.num_dead.load() > 0; }, 10000ms));
    server.request_stop();
    server.join();
    EXPECT_EQ(server.num_dead.load(), 1);  // reported once
    auto detection = server.dead_at - stopped_at;
    // The worker's last ping left at most one interval before it stopped, so silence is declared after 2..3
    // intervals from the stop, plus the quarter-interval check granularity and scheduling slack.
    EXPECT_GE(detection, 2 * o.heartbeat_interval - 5ms);
    EXPECT_LE(detection, 3 * o.heartbeat_interval + o.heartbeat_interval / 4 + 1000ms);
}

/// Decodes client-protocol requests; answers health; a frame that fails to decode gets an error reply.
class strict_server : public actor {
  public:
    strict_server() : actor("strict") {
        sock_ = add_socket(socket_kind::router, [this](const inbound_message& m) {
            auto req = decode_client_request(m.payload);
            if (auto* h = std::get_if<client_health>(&req)) {
                send_to(sock_, m.peer,
                        encode(client_health_reply{h->tag, "ok", "fake", 1, 1, 0, 0, 0.0, "test", "", ""}));
            }
        });
        endpoint_ = bind(sock_, "inproc://actor-test-strict");
    }
    ~strict_server() override {
        request_stop();
        join();
    }
    const std::string& endpoint() const { return endpoint_; }
    std::atomic<int> num_errors{0};

  protected:
    void on_handler_error(const inbound_message* msg, const std::exception& e) override {
        num_errors.fetch_add(1);
        if (msg) send_to(sock_, msg->peer, encode(client_error{"", errc::protocol, e.what()}));
    }

  private:
    socket_id sock_;
    std::string endpoint_;
};

TEST(Actor, MalformedFramesFromOnePeerDoNotDisturbAnother) {
    strict_server server;
    server.start();
    zmq::socket_t bad(process_zmq_context(), zmq::socket_type::dealer);
    zmq::socket_t good(process_zmq_context(), zmq::socket_type::dealer);
    bad.set(zmq::sockopt::linger, 0);
    good.set(zmq::sockopt::linger, 0);
    bad.connect(server.endpoint());
    good.connect(server.endpoint());

    bad.send(zmq::str_buffer("not msgpack at all"), zmq::send_flags::none);
    std::string truncated = encode(client_health{"x"});
    truncated.pop_back();
    bad.send(zmq::buffer(truncated), zmq::send_flags::none);
    // Three frames where one is expected: dropped without reaching the handler.
    bad.send(zmq::str_buffer("a"), zmq::send_flags::sndmore);
    bad.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
    bad.send(zmq::buffer(encode(client_health{"y"})), zmq::send_flags::none);
    good.send(zmq::buffer(encode(client_health{"good"})), zmq::send_flags::none);

    good.set(zmq::sockopt::rcvtimeo, 5000);
    zmq::message_t reply;
    ASSERT_TRUE(good.recv(reply));
    auto decoded = decode_client_reply({reply.data<char>(), reply.size()});
    ASSERT_TRUE(std::holds_alternative<client_health_reply>(decoded));
    EXPECT_EQ(std::get<client_health_reply>(decoded).tag, "good");

    bad.set(zmq::sockopt::rcvtimeo, 5000);
    for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(bad.recv(reply));
        auto err = decode_client_reply({reply.data<char>(), reply.size()});
        ASSERT_TRUE(std::holds_alternative<client_error>(err));
        EXPECT_EQ(std::get<client_error>(err).code, errc::protocol);
    }
    bad.set(zmq::sockopt::rcvtimeo, 100);
    EXPECT_FALSE(bad.recv(reply)) << "the three-frame message must be dropped, not answered";
    EXPECT_EQ(server.num_errors.load(), 2);
    EXPECT_FALSE(server.finished());
}

TEST(Actor, SendToAnUnknownPeerFailsWithoutBlocking) {
    class router_actor : public actor {
      public:
        router_actor() : actor("router") {
            sock_ = add_socket(socket_kind::router, [](const inbound_message&) {});
            bind(sock_, "inproc://actor-test-unknown-peer");
        }
        ~router_actor() override {
            request_stop();
            join();
        }
        std::atomic<int> result{-1};

      protected:
        void on_start() override { result = send_to(sock_, "nobody", "hi") ? 1 : 0; }

      private:
        socket_id sock_;
    } a;
    a.start();
    ASSERT_TRUE(eventually([&] { return a.result.load() != -1; }));
    EXPECT_EQ(a.result.load(), 0);
}

}  // namespace
}  // namespace zmoe
