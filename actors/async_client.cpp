#include "actors/async_client.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <zmq.hpp>

#include "actors/client_auth.hpp"
#include "actors/zmq_context.hpp"
#include "actors/zmq_poll.hpp"
#include "base/log.hpp"
#include "base/overloaded.hpp"
#include "messages/envelope.hpp"

namespace zmoe {

using clock_type = std::chrono::steady_clock;

struct async_client::impl {
    async_client_options options;
    zmq::socket_t sock;
    int wake_fd = -1;
    std::thread thread;
    std::atomic<bool> stopping{false};

    // Commands from other threads, run on the socket thread.
    std::mutex queue_mutex;
    std::deque<std::function<void()>> queue;

    // Socket thread only.
    struct live_request {
        event_sink sink;
        uint32_t num_open = 1;  // sequences whose finished delta has not come
    };
    std::unordered_map<std::string, live_request> live;
    struct pending_reply {
        clock_type::time_point deadline;
        std::function<void(client_tokens_reply)> tokens;
        std::function<void(std::optional<std::string>)> metrics;
    };
    std::map<std::string, pending_reply> replies;  // tag -> who waits
    std::string hello;
    clock_type::time_point last_received = clock_type::now();
    clock_type::time_point next_beat = clock_type::now();
    bool dead_reported = false;
    uint64_t next_tag = 0;

    // Read by health() from any thread.
    mutable std::mutex health_mutex;
    async_client_health state;
    std::atomic<uint64_t> next_id{0};

    void post(std::function<void()> f) {
        {
            std::lock_guard<std::mutex> lock(queue_mutex);
            queue.push_back(std::move(f));
        }
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof one);
    }

    // Sends one frame without blocking: the socket's send queue is unbounded (the gateway bounds what it asks for),
    // so a failure means ZeroMQ cannot take the frame at all.
    bool send(const std::string& bytes) {
        try {
            return sock.send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value();
        } catch (const zmq::error_t& e) {
            ZMOE_LOG(warn, "async_client: send failed: " << e.what());
            return false;
        }
    }
    bool send_authenticated(const std::string& bytes) {
        if (!hello.empty() && !send(hello)) return false;
        return send(bytes);
    }

    void update_state(const std::function<void(async_client_health&)>& f) {
        std::lock_guard<std::mutex> lock(health_mutex);
        f(state);
        state.num_inflight = live.size();
    }

    void deliver(const std::string& cid, event ev, bool terminal) {
        auto it = live.find(cid);
        if (it == live.end()) return;  // aborted by us, or a stray id
        if (terminal) {
            event_sink sink = std::move(it->second.sink);
            live.erase(it);
            update_state([](async_client_health&) {});
            sink(std::move(ev));
        } else {
            it->second.sink(std::move(ev));
        }
    }

    void on_frame(std::string_view bytes) {
        client_reply reply;
        try {
            reply = decode_client_reply(bytes);
        } catch (const error& e) {
            ZMOE_LOG(warn, "async_client: undecodable frame from the frontend: " << e.what());
            return;
        }
        visit_exhaustive(
            std::move(reply),
            [&](client_delta&& m) {
                auto it = live.find(m.client_request_id);
                if (it == live.end()) return;
                const bool terminal = m.finished && --it->second.num_open == 0;
                const std::string cid = m.client_request_id;
                deliver(cid, std::move(m), terminal);
            },
            [&](client_error&& m) {
                if (m.client_request_id.empty()) {
                    ZMOE_LOG(warn, "async_client: the frontend says: " << errc_name(m.code) << ": " << m.message);
                    if (m.code == errc::unauthenticated) fail_all(m.code, m.message);
                    return;
                }
                // duplicate_request leaves the live request of that id running; ids here are fresh, so this
                // cannot happen, but it would not be that request's end.
                if (m.code == errc::duplicate_request) return;
                const std::string cid = m.client_request_id;
                deliver(cid, std::move(m), true);
            },
            [&](client_health_reply&& m) {
                update_state([&](async_client_health& s) {
                    s.health = std::move(m);
                    s.health_at = clock_type::now();
                });
            },
            [&](client_metrics_reply&& m) {
                auto it = replies.find(m.tag);
                if (it == replies.end() || !it->second.metrics) return;
                auto done = std::move(it->second.metrics);
                replies.erase(it);
                done(std::move(m.json));
            },
            [&](client_tokens_reply&& m) {
                auto it = replies.find(m.tag);
                if (it == replies.end() || !it->second.tokens) return;
                auto done = std::move(it->second.tokens);
                replies.erase(it);
                done(std::move(m));
            },
            [](const client_heartbeat&) {});  // liveness only: every frame counts
    }

    // Ends every open request and pending reply with `code`.
    void fail_all(errc code, const std::string& why) {
        auto open = std::move(live);
        live.clear();
        for (auto& [cid, r] : open) r.sink(client_error{cid, code, why});
        auto waiting = std::move(replies);
        replies.clear();
        for (auto& [tag, w] : waiting) fail_reply(tag, w, code, why);
        update_state([](async_client_health&) {});
    }

    /// Sends a tagged request and registers who waits for its reply; fails it at once when the frontend is taken for
    /// dead or the frame cannot be queued.
    void ask(const std::string& tag, const std::string& bytes, pending_reply w) {
        if (dead_reported) return fail_reply(tag, w, errc::peer_dead, state.why_not);
        if (!send_authenticated(bytes))
            return fail_reply(tag, w, errc::overloaded, "the frontend connection takes no more messages");
        replies.emplace(tag, std::move(w));
    }

    static void fail_reply(const std::string& tag, pending_reply& w, errc code, const std::string& why) {
        if (w.tokens) {
            client_tokens_reply r;
            r.tag = tag;
            r.code = code;
            r.message = why;
            w.tokens(std::move(r));
        }
        if (w.metrics) w.metrics(std::nullopt);
    }

    void timers(clock_type::time_point now) {
        if (now >= next_beat) {
            // On schedule, whatever else flows: the frontend takes a client that heartbeated and then fell silent
            // for 3 intervals for gone.
            send(encode(client_heartbeat{}));
            send(encode(client_health{"health"}));
            // On the schedule rather than after the last beat: a late wake-up does not push every later beat back.
            next_beat += options.heartbeat_interval;
            if (next_beat <= now) next_beat = now + options.heartbeat_interval;
            update_state([](async_client_health& s) { ++s.num_heartbeats_sent; });
        }
        const auto bound = options.heartbeat_interval * options.heartbeat_max_missed;
        if (now - last_received >= bound && !dead_reported) {
            dead_reported = true;
            const std::string why =
                "the frontend stopped answering (nothing received for " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_received).count()) +
                " ms)";
            ZMOE_LOG(warn, "async_client: " << why);
            update_state([&](async_client_health& s) {
                s.alive = false;
                s.why_not = why;
            });
            fail_all(errc::peer_dead, why);
        }
        for (auto it = replies.begin(); it != replies.end();) {
            if (now < it->second.deadline) {
                ++it;
                continue;
            }
            pending_reply w = std::move(it->second);
            const std::string tag = it->first;
            it = replies.erase(it);
            fail_reply(tag, w, errc::peer_dead, "no reply from the frontend within the timeout");
        }
    }

    void run() {
        zmq::pollitem_t items[2] = {{sock.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_fd, ZMQ_POLLIN, 0}};
        while (!stopping.load(std::memory_order_relaxed)) {
            auto now = clock_type::now();
            timers(now);
            auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_beat - now);
            wait = std::clamp(wait, std::chrono::milliseconds(0), std::chrono::milliseconds(100));
            try {
                poll_interruptible(items, 2, wait);
            } catch (const zmq::error_t& e) {
                ZMOE_LOG(error, "async_client: poll failed: " << e.what());
                return;
            }
            if (items[1].revents & ZMQ_POLLIN) {
                uint64_t n = 0;
                [[maybe_unused]] const ssize_t r = ::read(wake_fd, &n, sizeof n);
            }
            std::deque<std::function<void()>> commands;
            {
                std::lock_guard<std::mutex> lock(queue_mutex);
                commands.swap(queue);
            }
            for (auto& c : commands) c();
            // Everything that has arrived, in a bounded batch so that commands and timers keep their turn.
            for (int i = 0; i < 4096; ++i) {
                zmq::message_t msg;
                if (!sock.recv(msg, zmq::recv_flags::dontwait)) break;
                while (msg.more()) {  // a reply is one frame; drop any extra ones
                    zmq::message_t extra;
                    if (!sock.recv(extra, zmq::recv_flags::dontwait)) break;
                    if (!extra.more()) break;
                }
                last_received = clock_type::now();
                if (dead_reported || !state.alive) {
                    dead_reported = false;
                    update_state([](async_client_health& s) {
                        s.alive = true;
                        s.why_not.clear();
                    });
                }
                update_state([](async_client_health& s) { ++s.num_frames_received; });
                on_frame({msg.data<char>(), msg.size()});
            }
        }
    }
};

async_client::async_client(async_client_options options) : impl_(std::make_unique<impl>()) {
    if (options.heartbeat_max_missed < 1) options.heartbeat_max_missed = 1;
    if (options.api_key.empty()) options.api_key = api_key_from_env();
    impl_->options = options;
    if (!options.api_key.empty()) impl_->hello = encode(client_hello{options.api_key});
    impl_->state.why_not = "no answer from the frontend yet";
    impl_->sock = zmq::socket_t(process_zmq_context(), zmq::socket_type::dealer);
    impl_->sock.set(zmq::sockopt::linger, 0);
    impl_->sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxFrameBytes));
    // Unbounded queues both ways: the socket thread reads as fast as frames come, and what is sent is bounded by the
    // caller's own cap on requests in flight. A high-water mark here would block (or drop) a whole gateway's traffic.
    impl_->sock.set(zmq::sockopt::sndhwm, 0);
    impl_->sock.set(zmq::sockopt::rcvhwm, 0);
    try {
        impl_->sock.connect(options.endpoint);
    } catch (const zmq::error_t& e) {
        throw error(errc::invalid_argument, "async_client: cannot connect to '" + options.endpoint + "': " + e.what());
    }
    impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (impl_->wake_fd < 0) throw error(errc::io, "async_client: eventfd failed");
    impl_->last_received = clock_type::now();
    impl_->thread = std::thread([this] { impl_->run(); });
}

async_client::~async_client() {
    impl_->stopping = true;
    impl_->post([] {});
    if (impl_->thread.joinable()) impl_->thread.join();
    ::close(impl_->wake_fd);
}

std::string async_client::generate(client_generate request, event_sink sink) {
    std::string cid = "g";
    cid += std::to_string(impl_->next_id++);
    request.client_request_id = cid;
    impl_->post([im = impl_.get(), request = std::move(request), sink = std::move(sink)]() mutable {
        const std::string id = request.client_request_id;
        if (im->dead_reported) {
            sink(client_error{id, errc::peer_dead, im->state.why_not});
            return;
        }
        if (!im->send_authenticated(encode(request))) {
            sink(client_error{id, errc::overloaded, "the frontend connection takes no more messages"});
            return;
        }
        im->live[id] = {std::move(sink), std::max<uint32_t>(request.n, 1)};
        im->update_state([](async_client_health&) {});
    });
    return cid;
}

void async_client::abort(const std::string& client_request_id) {
    impl_->post([im = impl_.get(), cid = client_request_id] {
        if (!im->live.erase(cid)) return;  // already ended
        im->send_authenticated(encode(client_abort{cid}));
        im->update_state([](async_client_health&) {});
    });
}

void async_client::tokenize(client_tokenize request, std::function<void(client_tokens_reply)> done) {
    impl_->post([im = impl_.get(), request = std::move(request), done = std::move(done)]() mutable {
        request.tag = "t" + std::to_string(im->next_tag++);
        im->ask(request.tag, encode(request),
                {.deadline = clock_type::now() + im->options.reply_timeout, .tokens = std::move(done), .metrics = {}});
    });
}

void async_client::detokenize(std::vector<int32_t> token_ids, std::function<void(client_tokens_reply)> done) {
    impl_->post([im = impl_.get(), ids = std::move(token_ids), done = std::move(done)]() mutable {
        client_detokenize request{"d" + std::to_string(im->next_tag++), std::move(ids)};
        im->ask(request.tag, encode(request),
                {.deadline = clock_type::now() + im->options.reply_timeout, .tokens = std::move(done), .metrics = {}});
    });
}

void async_client::metrics(std::function<void(std::optional<std::string>)> done) {
    impl_->post([im = impl_.get(), done = std::move(done)]() mutable {
        const std::string tag = "m" + std::to_string(im->next_tag++);
        // The frontend answers within 3 s itself (with what it has when the engine core is slow).
        im->ask(tag, encode(client_metrics{tag}),
                {.deadline = clock_type::now() + std::min(im->options.reply_timeout, std::chrono::milliseconds(5000)),
                 .tokens = {},
                 .metrics = std::move(done)});
    });
}

async_client_health async_client::health() const {
    std::lock_guard<std::mutex> lock(impl_->health_mutex);
    return impl_->state;
}

}  // namespace zmoe
