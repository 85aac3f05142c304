#include "actors/zmoe_client.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <zmq.hpp>

#include "actors/client_auth.hpp"
#include "actors/zmq_context.hpp"
#include "actors/zmq_poll.hpp"
#include "base/log.hpp"
#include "base/overloaded.hpp"
#include "messages/envelope.hpp"

namespace zmoe {

using clock_type = std::chrono::steady_clock;

namespace {
// Built by appending: GCC 12 warns (-Wrestrict, a false positive) on "literal" + std::to_string(...).
std::string numbered(const char* prefix, uint64_t n) {
    std::string s(prefix);
    s += std::to_string(n);
    return s;
}
}  // namespace

struct zmoe_client::impl {
    zmoe_client_options options;
    zmq::socket_t sock;
    clock_type::time_point last_received = clock_type::now();
    clock_type::time_point last_heartbeat{};
    std::optional<clock_type::time_point> unanswered_since;  // the first heartbeat sent since the last frame came
    uint64_t next_id = 0;
    uint64_t next_tag = 0;
    std::map<std::string, uint32_t> live;  // client_request_id -> its sequences not yet finished (n at first)
    std::deque<client_event> events;       // arrival order
    std::map<std::string, client_health_reply> health_replies;
    std::map<std::string, client_metrics_reply> metrics_replies;
    std::map<std::string, client_tokens_reply> tokens_replies;

    std::string hello;                    // the encoded hello with the API key; empty when there is no key
    std::optional<client_error> refused;  // an `unauthenticated` error not tied to a request (a wrong key)

    void send(const std::string& bytes) { sock.send(zmq::buffer(bytes), zmq::send_flags::none); }
    /// A request that may need the key: the hello goes first, every time (a reconnected socket is a new client).
    void send_authenticated(const std::string& bytes) {
        if (!hello.empty()) send(hello);
        send(bytes);
    }
    void throw_if_refused() {
        if (!refused) return;
        const std::string why = refused->message;
        refused.reset();
        throw error(errc::unauthenticated, "zmoe_client: " + why);
    }

    client_tokens_reply wait_tokens(const std::string& tag, std::chrono::milliseconds timeout) {
        const auto deadline = clock_type::now() + timeout;
        for (;;) {
            auto it = tokens_replies.find(tag);
            if (it != tokens_replies.end()) {
                client_tokens_reply r = std::move(it->second);
                tokens_replies.erase(it);
                if (r.code != errc::ok) throw error(r.code, r.message);
                return r;
            }
            throw_if_refused();
            if (!receive_one(deadline) && clock_type::now() >= deadline)
                throw error(errc::peer_dead, "zmoe_client: no tokens reply within the timeout");
        }
    }

    /// Heartbeats the frontend while waiting; throws peer_dead when they go unanswered too long.
    void keep_alive(clock_type::time_point now) {
        if (options.heartbeat_max_missed <= 0) return;
        if (unanswered_since && now - *unanswered_since >= options.heartbeat_interval * options.heartbeat_max_missed) {
            // Reported once; a later call starts a fresh count (the frontend may be back by then).
            unanswered_since.reset();
            last_received = now;
            throw error(errc::peer_dead,
                        "zmoe_client: the frontend stopped answering (no reply to heartbeats for " +
                            std::to_string((options.heartbeat_interval * options.heartbeat_max_missed).count()) +
                            " ms)");
        }
        heartbeat_if_due(now);
    }

    /// Heartbeats flow on schedule, one per interval, whatever else is arriving: the frontend judges this client
    /// by what it *sends*, so a client busy reading a long stream must still speak (issue: a listening client was
    /// declared dead after 3 intervals). Any frame from the frontend answers them (unanswered_since resets).
    void heartbeat_if_due(clock_type::time_point now) {
        if (options.heartbeat_max_missed <= 0 || now - last_heartbeat < options.heartbeat_interval) return;
        sock.send(zmq::buffer(encode(client_heartbeat{})), zmq::send_flags::dontwait);
        last_heartbeat = now;
        if (!unanswered_since) unanswered_since = now;
    }

    /// Receives at most one frame, waiting until deadline; false when nothing arrived.
    bool receive_one(clock_type::time_point deadline) {
        zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
        for (;;) {
            const auto now = clock_type::now();
            keep_alive(now);
            auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
            if (left.count() < 0) left = std::chrono::milliseconds(0);
            // Wake at least every heartbeat interval to heartbeat (and to notice a dead frontend).
            const bool capped = options.heartbeat_max_missed > 0 && left > options.heartbeat_interval;
            poll_interruptible(&item, 1, capped ? options.heartbeat_interval : left);
            if (item.revents & ZMQ_POLLIN) break;
            if (!capped) return false;
        }
        zmq::message_t msg;
        if (!sock.recv(msg, zmq::recv_flags::dontwait)) return false;
        last_received = clock_type::now();
        unanswered_since.reset();
        bool more = msg.more();
        while (more) {  // a reply is one frame; drop any extra ones
            zmq::message_t extra;
            (void)sock.recv(extra, zmq::recv_flags::none);
            more = extra.more();
        }
        try {
            client_reply reply = decode_client_reply({msg.data<char>(), msg.size()});
            visit_exhaustive(
                std::move(reply),
                [&](client_delta&& m) {
                    if (m.finished) {  // the request ends with the last of its n sequences
                        auto it = live.find(m.client_request_id);
                        if (it != live.end() && --it->second == 0) live.erase(it);
                    }
                    events.emplace_back(std::move(m));
                },
                [&](client_error&& m) {
                    if (m.code == errc::unauthenticated && m.client_request_id.empty()) {
                        refused = m;  // a wrong key: the waiting call throws it
                        return;
                    }
                    // duplicate_request leaves the live request of that id running: not its end.
                    if (m.code != errc::duplicate_request) live.erase(m.client_request_id);
                    events.emplace_back(std::move(m));
                },
                [&](client_health_reply&& m) { health_replies[m.tag] = std::move(m); },
                [&](client_metrics_reply&& m) { metrics_replies[m.tag] = std::move(m); },
                [&](client_tokens_reply&& m) { tokens_replies[m.tag] = std::move(m); },
                [](const client_heartbeat&) {});  // a sign of life: last_received is already set
        } catch (const error& e) {
            ZMOE_LOG(warn, "zmoe_client: dropped an undecodable reply: " << e.what());
        }
        return true;
    }

    static const std::string& id_of(const client_event& e) {
        return std::visit([](const auto& m) -> const std::string& { return m.client_request_id; }, e);
    }
};

zmoe_client::zmoe_client(const std::string& endpoint, zmoe_client_options options) : impl_(std::make_unique<impl>()) {
    impl_->options = options;
    if (impl_->options.api_key.empty()) impl_->options.api_key = api_key_from_env();
    if (!impl_->options.api_key.empty()) impl_->hello = encode(client_hello{impl_->options.api_key});
    impl_->sock = zmq::socket_t(process_zmq_context(), zmq::socket_type::dealer);
    impl_->sock.set(zmq::sockopt::linger, 0);
    impl_->sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxFrameBytes));
    try {
        impl_->sock.connect(endpoint);
    } catch (const zmq::error_t& e) {
        throw error(errc::invalid_argument, "zmoe_client: cannot connect to '" + endpoint + "': " + e.what());
    }
}

zmoe_client::~zmoe_client() = default;

std::string zmoe_client::generate(client_generate request) {
    if (request.client_request_id.empty()) request.client_request_id = numbered("c", impl_->next_id++);
    if (impl_->live.count(request.client_request_id)) {
        throw error(errc::invalid_argument, "zmoe_client: request id '" + request.client_request_id + "' is in use");
    }
    impl_->send_authenticated(encode(request));
    impl_->live[request.client_request_id] = std::max<uint32_t>(1, request.n);
    return request.client_request_id;
}

std::optional<client_event> zmoe_client::next(const std::string& id, std::chrono::milliseconds timeout) {
    auto deadline = clock_type::now() + timeout;
    impl_->heartbeat_if_due(clock_type::now());  // also while buffered events are handed out without a receive
    size_t scanned = 0;
    for (;;) {
        for (auto it = impl_->events.begin() + static_cast<std::ptrdiff_t>(scanned); it != impl_->events.end(); ++it) {
            if (impl::id_of(*it) == id) {
                client_event e = std::move(*it);
                impl_->events.erase(it);
                return e;
            }
        }
        scanned = impl_->events.size();
        if (!impl_->live.count(id)) {
            throw error(errc::invalid_argument, "zmoe_client: no live request '" + id + "'");
        }
        if (!impl_->receive_one(deadline) && clock_type::now() >= deadline) return std::nullopt;
    }
}

std::optional<client_event> zmoe_client::next_any(std::chrono::milliseconds timeout) {
    auto deadline = clock_type::now() + timeout;
    impl_->heartbeat_if_due(clock_type::now());
    while (impl_->events.empty()) {
        if (!impl_->receive_one(deadline) && clock_type::now() >= deadline) return std::nullopt;
    }
    client_event e = std::move(impl_->events.front());
    impl_->events.pop_front();
    return e;
}

std::vector<client_completion> zmoe_client::collect_all(const std::string& id, std::chrono::milliseconds timeout) {
    auto deadline = clock_type::now() + timeout;
    std::vector<client_completion> out;
    auto buffered = [&] {
        return std::any_of(impl_->events.begin(), impl_->events.end(),
                           [&](const client_event& e) { return impl::id_of(e) == id; });
    };
    while (out.empty() || impl_->live.count(id) || buffered()) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock_type::now());
        auto e = next(id, std::max(left, std::chrono::milliseconds(0)));
        if (!e) throw error(errc::peer_dead, "zmoe_client: request '" + id + "' timed out");
        if (const auto* err = std::get_if<client_error>(&*e)) throw error(err->code, err->message);
        auto& d = std::get<client_delta>(*e);
        if (d.index >= out.size()) {
            client_completion fresh;
            fresh.client_request_id = id;
            out.resize(d.index + 1, fresh);
        }
        client_completion& c = out[d.index];
        c.index = d.index;
        c.token_ids.insert(c.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
        c.text += d.text;
        c.prompt_tokens = d.prompt_tokens;
        c.completion_tokens = d.completion_tokens;
        c.cached_tokens = d.cached_tokens;
        if (d.finished) c.reason = d.reason;
    }
    return out;
}

client_completion zmoe_client::collect(const std::string& id, std::chrono::milliseconds timeout) {
    return collect_all(id, timeout).front();
}

void zmoe_client::abort(const std::string& id) { impl_->send_authenticated(encode(client_abort{id})); }

client_health_reply zmoe_client::health(std::chrono::milliseconds timeout) {
    std::string tag = numbered("h", impl_->next_tag++);
    impl_->send(encode(client_health{tag}));
    auto deadline = clock_type::now() + timeout;
    for (;;) {
        auto it = impl_->health_replies.find(tag);
        if (it != impl_->health_replies.end()) {
            client_health_reply r = std::move(it->second);
            impl_->health_replies.erase(it);
            return r;
        }
        if (!impl_->receive_one(deadline) && clock_type::now() >= deadline) {
            throw error(errc::peer_dead, "zmoe_client: no health reply within the timeout");
        }
    }
}

client_tokens_reply zmoe_client::tokenize(client_tokenize request, std::chrono::milliseconds timeout) {
    request.tag = numbered("t", impl_->next_tag++);
    impl_->send_authenticated(encode(request));
    return impl_->wait_tokens(request.tag, timeout);
}

client_tokens_reply zmoe_client::detokenize(std::vector<int32_t> token_ids, std::chrono::milliseconds timeout) {
    client_detokenize request{numbered("d", impl_->next_tag++), std::move(token_ids)};
    impl_->send_authenticated(encode(request));
    return impl_->wait_tokens(request.tag, timeout);
}

std::string zmoe_client::metrics(std::chrono::milliseconds timeout) {
    std::string tag = numbered("m", impl_->next_tag++);
    impl_->send_authenticated(encode(client_metrics{tag}));
    auto deadline = clock_type::now() + timeout;
    for (;;) {
        impl_->throw_if_refused();
        auto it = impl_->metrics_replies.find(tag);
        if (it != impl_->metrics_replies.end()) {
            std::string json = std::move(it->second.json);
            impl_->metrics_replies.erase(it);
            return json;
        }
        if (!impl_->receive_one(deadline) && clock_type::now() >= deadline) {
            throw error(errc::peer_dead, "zmoe_client: no metrics reply within the timeout");
        }
    }
}

size_t zmoe_client::num_live() const { return impl_->live.size(); }

}  // namespace zmoe
