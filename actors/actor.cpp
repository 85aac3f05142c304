#include "actors/actor.hpp"

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "actors/stop_signals.hpp"
#include "actors/zmq_context.hpp"
#include "actors/zmq_poll.hpp"
#include "base/check.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "messages/envelope.hpp"

namespace zmoe {

using clock_type = std::chrono::steady_clock;

namespace {
// Messages taken from one socket per poll round, so one busy peer cannot starve the other sockets and timers.
constexpr int kMaxMessagesPerRound = 64;

zmq::socket_type to_zmq(socket_kind k) {
    switch (k) {
        case socket_kind::router:
            return zmq::socket_type::router;
        case socket_kind::dealer:
            return zmq::socket_type::dealer;
        case socket_kind::pair:
            return zmq::socket_type::pair;
        case socket_kind::push:
            return zmq::socket_type::push;
        case socket_kind::pull:
            return zmq::socket_type::pull;
    }
    return zmq::socket_type::pair;
}

std::string unique_mailbox_endpoint(const void* self) {
    static std::atomic<uint64_t> counter{0};
    char buf[96];
    std::snprintf(buf, sizeof(buf), "inproc://zmoe-mailbox-%p-%llu", self,
                  static_cast<unsigned long long>(counter.fetch_add(1)));
    return buf;
}
}  // namespace

struct actor::impl {
    struct socket_entry {
        socket_kind kind;
        zmq::socket_t sock;
        message_handler handler;
        bool closed = false;  // close_socket from a handler: erased once the handler returns
    };
    struct timer_entry {
        clock_type::time_point due;
        std::chrono::milliseconds interval;
        std::function<void()> fn;
        bool periodic;
    };
    struct watched_peer {
        std::string ping;
        std::function<void()> on_dead;
        clock_type::time_point last_seen;
        clock_type::time_point last_sent;
    };

    std::map<socket_id, socket_entry> sockets;
    socket_id next_socket = 0;

    std::map<timer_id, timer_entry> timers;
    std::set<std::pair<clock_type::time_point, timer_id>> timer_queue;
    timer_id next_timer = 1;

    std::map<std::pair<socket_id, std::string>, watched_peer, std::less<>> watched;
    timer_id heartbeat_timer = 0;

    // The mailbox: functions queued under the mutex, and one wake-up frame pushed only when the queue goes from
    // empty to non-empty (the loop takes the whole queue per wake-up).
    std::mutex mailbox_mutex;
    std::deque<std::function<void()>> mailbox;
    zmq::socket_t mailbox_push;  // used by any thread, under mailbox_mutex
    zmq::socket_t mailbox_pull;  // the actor's thread only

    std::vector<socket_id> closing;

    // Messages waiting for room, per (socket, ROUTER peer or "").
    std::map<std::pair<socket_id, std::string>, std::deque<std::string>, std::less<>> queued;

    std::atomic<bool> stop_requested{false};
    bool stop_seen = false;  // on_stop_requested already called
    bool stop_now = false;
    std::atomic<bool> finished{false};
    std::thread thread;

    /// Leave the current round now: the loop either exits or must call on_stop_requested first.
    bool should_break() const { return stop_now || (stop_requested.load(std::memory_order_relaxed) && !stop_seen); }
};

actor::actor(std::string name, actor_options options)
    : name_(std::move(name)), options_(options), impl_(std::make_unique<impl>()) {
    ZMOE_CHECK(options_.heartbeat_interval.count() > 0, "heartbeat_interval must be positive");
    ZMOE_CHECK(options_.heartbeat_max_missed > 0, "heartbeat_max_missed must be positive");
    auto& ctx = process_zmq_context();
    std::string endpoint = unique_mailbox_endpoint(this);
    impl_->mailbox_pull = zmq::socket_t(ctx, zmq::socket_type::pull);
    impl_->mailbox_pull.set(zmq::sockopt::linger, 0);
    impl_->mailbox_pull.bind(endpoint);
    impl_->mailbox_push = zmq::socket_t(ctx, zmq::socket_type::push);
    impl_->mailbox_push.set(zmq::sockopt::linger, 0);
    impl_->mailbox_push.connect(endpoint);
}

actor::~actor() {
    if (impl_->thread.joinable()) {
        request_stop();
        impl_->thread.join();
    }
}

bool actor::finished() const { return impl_->finished.load(); }
bool actor::stop_requested() const { return impl_->stop_requested.load(); }

void actor::start() {
    ZMOE_CHECK(!impl_->thread.joinable(), "actor " << name_ << " started twice");
    impl_->thread = std::thread([this] { run(); });
}

void actor::join() {
    if (impl_->thread.joinable()) impl_->thread.join();
}

void actor::request_stop() {
    impl_->stop_requested.store(true);
    post([] {});  // wakes the poll so the flag is seen now rather than at the next poll timeout
}

void actor::post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(impl_->mailbox_mutex);
    bool was_empty = impl_->mailbox.empty();
    impl_->mailbox.push_back(std::move(fn));
    if (was_empty) {
        // Cannot fail for want of room: at most one wake-up frame is ever queued.
        (void)impl_->mailbox_push.send(zmq::const_buffer("", 0), zmq::send_flags::dontwait);
    }
}

void actor::stop_now() { impl_->stop_now = true; }

void actor::on_handler_error(const inbound_message* msg, const std::exception& e) {
    if (msg) {
        ZMOE_LOG(warn, name_ << ": dropped a message on socket " << msg->socket << ": " << e.what());
    } else {
        ZMOE_LOG(warn, name_ << ": timer or posted function failed: " << e.what());
    }
}

template <typename Fn>
void actor::guarded(const inbound_message* msg, Fn&& fn) {
    try {
        fn();
    } catch (const std::exception& e) {
        try {
            on_handler_error(msg, e);
        } catch (const std::exception& again) {
            ZMOE_LOG(error, name_ << ": on_handler_error threw: " << again.what());
        }
    }
}

socket_id actor::add_socket(socket_kind kind, message_handler handler) {
    zmq::socket_t sock(process_zmq_context(), to_zmq(kind));
    sock.set(zmq::sockopt::linger, static_cast<int>(options_.linger.count()));
    sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxFrameBytes));
    if (kind == socket_kind::router) sock.set(zmq::sockopt::router_mandatory, 1);
    socket_id id = impl_->next_socket++;
    impl_->sockets.emplace(id, impl::socket_entry{kind, std::move(sock), std::move(handler)});
    return id;
}

void actor::set_routing_id(socket_id s, std::string_view id) {
    auto it = impl_->sockets.find(s);
    ZMOE_CHECK(it != impl_->sockets.end(), name_ << ": no socket " << s);
    it->second.sock.set(zmq::sockopt::routing_id, zmq::const_buffer(id.data(), id.size()));
}

std::string actor::bind(socket_id s, const std::string& endpoint) {
    auto it = impl_->sockets.find(s);
    ZMOE_CHECK(it != impl_->sockets.end(), name_ << ": no socket " << s);
    try {
        it->second.sock.bind(endpoint);
    } catch (const zmq::error_t& e) {
        throw error(errc::io, name_ + ": cannot bind " + endpoint + ": " + e.what());
    }
    return it->second.sock.get(zmq::sockopt::last_endpoint);
}

void actor::connect(socket_id s, const std::string& endpoint) {
    auto it = impl_->sockets.find(s);
    ZMOE_CHECK(it != impl_->sockets.end(), name_ << ": no socket " << s);
    try {
        it->second.sock.connect(endpoint);
    } catch (const zmq::error_t& e) {
        throw error(errc::io, name_ + ": cannot connect to " + endpoint + ": " + e.what());
    }
}

void actor::close_socket(socket_id s) {
    auto it = impl_->sockets.find(s);
    if (it == impl_->sockets.end() || it->second.closed) return;
    it->second.closed = true;
    impl_->closing.push_back(s);
    for (auto it = impl_->watched.begin(); it != impl_->watched.end();) {
        it = it->first.first == s ? impl_->watched.erase(it) : std::next(it);
    }
}

bool actor::send(socket_id s, std::string_view payload) {
    auto it = impl_->sockets.find(s);
    ZMOE_CHECK(it != impl_->sockets.end(), name_ << ": no socket " << s);
    ZMOE_CHECK(it->second.kind != socket_kind::router, name_ << ": send on a ROUTER needs a peer (send_to)");
    try {
        return it->second.sock.send(zmq::const_buffer(payload.data(), payload.size()), zmq::send_flags::dontwait)
            .has_value();
    } catch (const zmq::error_t& e) {
        ZMOE_LOG(warn, name_ << ": send failed: " << e.what());
        return false;
    }
}

bool actor::send_to(socket_id s, std::string_view peer, std::string_view payload) {
    return try_send_to(s, peer, payload) == send_status::sent;
}

send_status actor::try_send_to(socket_id s, std::string_view peer, std::string_view payload) {
    auto it = impl_->sockets.find(s);
    ZMOE_CHECK(it != impl_->sockets.end(), name_ << ": no socket " << s);
    ZMOE_CHECK(it->second.kind == socket_kind::router, name_ << ": send_to needs a ROUTER socket");
    auto& sock = it->second.sock;
    try {
        // With ROUTER_MANDATORY the identity frame fails (EHOSTUNREACH) for an unknown peer; EAGAIN when the peer's
        // queue is full. Either way nothing has been queued, so the message is dropped whole.
        if (!sock.send(zmq::const_buffer(peer.data(), peer.size()),
                       zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
            return send_status::full;
        }
        return sock.send(zmq::const_buffer(payload.data(), payload.size()), zmq::send_flags::dontwait).has_value()
                   ? send_status::sent
                   : send_status::full;
    } catch (const zmq::error_t& e) {
        if (e.num() == EHOSTUNREACH) return send_status::no_peer;
        ZMOE_LOG(warn, name_ << ": send_to failed: " << e.what());
        return send_status::full;
    }
}

bool actor::send_reliable(socket_id s, std::string_view payload) { return send_reliable_to(s, {}, payload); }

bool actor::send_reliable_to(socket_id s, std::string_view peer, std::string_view payload) {
    auto sit = impl_->sockets.find(s);
    ZMOE_CHECK(sit != impl_->sockets.end(), name_ << ": no socket " << s);
    const bool router = sit->second.kind == socket_kind::router;
    auto q = impl_->queued.find(std::make_pair(s, std::string(peer)));
    if (q == impl_->queued.end() || q->second.empty()) {
        const send_status st =
            router ? try_send_to(s, peer, payload) : (send(s, payload) ? send_status::sent : send_status::full);
        if (st == send_status::sent) return true;
        if (st == send_status::no_peer) return false;
        if (q == impl_->queued.end())
            q = impl_->queued.emplace(std::make_pair(s, std::string(peer)), std::deque<std::string>{}).first;
    }
    q->second.emplace_back(payload);
    return true;
}

size_t actor::num_queued(socket_id s, std::string_view peer) const {
    auto q = impl_->queued.find(std::make_pair(s, std::string(peer)));
    return q == impl_->queued.end() ? 0 : q->second.size();
}

void actor::flush_queued() {
    for (auto q = impl_->queued.begin(); q != impl_->queued.end();) {
        const auto& [s, peer] = q->first;
        auto sit = impl_->sockets.find(s);
        if (sit == impl_->sockets.end() || sit->second.closed) {
            q = impl_->queued.erase(q);
            continue;
        }
        const bool router = sit->second.kind == socket_kind::router;
        auto& msgs = q->second;
        bool gone = false;
        while (!msgs.empty()) {
            const send_status st = router ? try_send_to(s, peer, msgs.front())
                                          : (send(s, msgs.front()) ? send_status::sent : send_status::full);
            if (st == send_status::full) break;
            if (st == send_status::no_peer) {
                gone = true;
                break;
            }
            msgs.pop_front();
        }
        if (gone) ZMOE_LOG(warn, name_ << ": " << msgs.size() << " queued message(s) for a departed peer dropped");
        q = (gone || msgs.empty()) ? impl_->queued.erase(q) : std::next(q);
    }
}

timer_id actor::add_timer(std::chrono::milliseconds delay, std::function<void()> fn, bool periodic) {
    ZMOE_CHECK(!periodic || delay.count() > 0, name_ << ": a periodic timer needs a positive interval");
    timer_id id = impl_->next_timer++;
    auto due = clock_type::now() + delay;
    impl_->timers.emplace(id, impl::timer_entry{due, delay, std::move(fn), periodic});
    impl_->timer_queue.emplace(due, id);
    return id;
}

void actor::cancel_timer(timer_id t) {
    auto it = impl_->timers.find(t);
    if (it == impl_->timers.end()) return;
    impl_->timer_queue.erase({it->second.due, t});
    impl_->timers.erase(it);
}

void actor::watch_peer(socket_id s, std::string peer, std::string ping, std::function<void()> on_dead) {
    auto now = clock_type::now();
    impl_->watched[{s, std::move(peer)}] =
        impl::watched_peer{std::move(ping), std::move(on_dead), now, now - options_.heartbeat_interval};
    if (impl_->heartbeat_timer == 0) {
        // Checking four times per interval bounds the detection delay to max_missed + 1/4 intervals.
        auto tick = std::max(std::chrono::milliseconds(1), options_.heartbeat_interval / 4);
        impl_->heartbeat_timer = add_timer(
            tick, [this] { heartbeat_tick(); }, true);
        heartbeat_tick();  // first ping now, so the peer learns of us without waiting an interval
    }
}

void actor::unwatch_peer(socket_id s, std::string_view peer) {
    auto it = impl_->watched.find(std::make_pair(s, std::string(peer)));
    if (it != impl_->watched.end()) impl_->watched.erase(it);
}

void actor::heartbeat_tick() {
    auto now = clock_type::now();
    const auto deadline = options_.heartbeat_interval * options_.heartbeat_max_missed;
    std::vector<std::function<void()>> dead;
    for (auto it = impl_->watched.begin(); it != impl_->watched.end();) {
        auto& [key, w] = *it;
        if (now - w.last_seen >= deadline) {
            dead.push_back(std::move(w.on_dead));
            it = impl_->watched.erase(it);
            continue;
        }
        if (now - w.last_sent >= options_.heartbeat_interval) {
            w.last_sent = now;
            auto sit = impl_->sockets.find(key.first);
            if (sit != impl_->sockets.end()) {
                if (sit->second.kind == socket_kind::router) {
                    send_to(key.first, key.second, w.ping);
                } else {
                    send(key.first, w.ping);
                }
            }
        }
        ++it;
    }
    for (auto& fn : dead) {
        if (fn) guarded(nullptr, fn);
    }
}

void actor::fire_due_timers() {
    auto now = clock_type::now();
    while (!impl_->timer_queue.empty() && !impl_->should_break()) {
        auto [due, id] = *impl_->timer_queue.begin();
        if (due > now) break;
        impl_->timer_queue.erase(impl_->timer_queue.begin());
        auto it = impl_->timers.find(id);
        std::function<void()> fn;
        if (it->second.periodic) {
            // Keep the period without drift, but never fire a burst to catch up after a stall.
            auto next = due + it->second.interval;
            if (next <= now) next = now + it->second.interval;
            it->second.due = next;
            impl_->timer_queue.emplace(next, id);
            fn = it->second.fn;
        } else {
            fn = std::move(it->second.fn);
            impl_->timers.erase(it);
        }
        guarded(nullptr, fn);
    }
}

void actor::drain_mailbox() {
    zmq::message_t wake;
    while (impl_->mailbox_pull.recv(wake, zmq::recv_flags::dontwait)) {
    }
    std::deque<std::function<void()>> batch;
    {
        std::lock_guard<std::mutex> lock(impl_->mailbox_mutex);
        batch.swap(impl_->mailbox);
    }
    while (!batch.empty()) {
        auto fn = std::move(batch.front());
        batch.pop_front();
        guarded(nullptr, fn);
        if (impl_->should_break() && !batch.empty()) {
            // Keep what was not run, ahead of anything posted since, for a later run().
            std::lock_guard<std::mutex> lock(impl_->mailbox_mutex);
            while (!batch.empty()) {
                impl_->mailbox.push_front(std::move(batch.back()));
                batch.pop_back();
            }
            return;
        }
    }
}

void actor::dispatch(socket_id s) {
    for (int n = 0; n < kMaxMessagesPerRound && !impl_->should_break(); ++n) {
        auto it = impl_->sockets.find(s);
        if (it == impl_->sockets.end() || it->second.closed) return;
        auto& entry = it->second;
        zmq::message_t frames[3];
        size_t num_frames = 0;
        bool more = true;
        bool got = false;
        while (more) {
            zmq::message_t part;
            if (!entry.sock.recv(part, num_frames == 0 ? zmq::recv_flags::dontwait : zmq::recv_flags::none)) break;
            got = true;
            more = part.more();
            if (num_frames < 3) frames[num_frames] = std::move(part);
            ++num_frames;
        }
        if (!got) return;
        size_t expected = entry.kind == socket_kind::router ? 2 : 1;
        inbound_message msg;
        msg.socket = s;
        if (entry.kind == socket_kind::router && num_frames >= 1) msg.peer = {frames[0].data<char>(), frames[0].size()};
        // Any message, well-formed or not, shows the peer is alive.
        if (!impl_->watched.empty()) {
            auto w = impl_->watched.find(std::make_pair(s, std::string(msg.peer)));
            if (w != impl_->watched.end()) w->second.last_seen = clock_type::now();
        }
        if (num_frames != expected) {
            ZMOE_LOG(warn, name_ << ": dropped a message of " << num_frames << " frames on socket " << s
                                 << " (expected " << expected << ")");
            continue;
        }
        const auto& payload = frames[expected - 1];
        msg.payload = {payload.data<char>(), payload.size()};
        if (entry.kind == socket_kind::router) {
            if (const char* a = zmq_msg_gets(frames[expected - 1].handle(), "Peer-Address")) msg.peer_address = a;
        }
        message_handler& handler = entry.handler;
        guarded(&msg, [&] { handler(msg); });
    }
}

void actor::loop_once(std::chrono::milliseconds max_wait) {
    std::vector<zmq::pollitem_t> items;
    std::vector<socket_id> ids;
    items.reserve(impl_->sockets.size() + 1);
    items.push_back({impl_->mailbox_pull.handle(), 0, ZMQ_POLLIN, 0});
    for (auto& [id, entry] : impl_->sockets) {
        if (entry.closed) continue;
        items.push_back({entry.sock.handle(), 0, ZMQ_POLLIN, 0});
        ids.push_back(id);
    }
    auto wait = max_wait;
    if (!impl_->timer_queue.empty()) {
        auto until =
            std::chrono::ceil<std::chrono::milliseconds>(impl_->timer_queue.begin()->first - clock_type::now());
        wait = std::clamp(until, std::chrono::milliseconds(0), max_wait);
    }
    // Queued sends are retried every few milliseconds (POLLOUT on a ROUTER says nothing about one peer's pipe).
    if (!impl_->queued.empty()) wait = std::min(wait, std::chrono::milliseconds(2));
    poll_interruptible(items.data(), items.size(), wait);

    if (items[0].revents & ZMQ_POLLIN) drain_mailbox();
    for (size_t i = 0; i < ids.size() && !impl_->should_break(); ++i) {
        if (items[i + 1].revents & ZMQ_POLLIN) dispatch(ids[i]);
    }
    fire_due_timers();
    if (!impl_->queued.empty()) flush_queued();
    for (socket_id s : impl_->closing) impl_->sockets.erase(s);
    impl_->closing.clear();
}

void actor::run() {
    impl_->finished = false;
    impl_->stop_now = false;
    guarded(nullptr, [this] { on_start(); });
    while (!impl_->stop_now) {
        bool signalled = options_.stop_on_signal && stop_signal_received();
        if ((impl_->stop_requested.load() || signalled) && !impl_->stop_seen) {
            impl_->stop_requested = true;
            impl_->stop_seen = true;
            bool stop = true;
            guarded(nullptr, [&] { stop = on_stop_requested(); });
            if (stop) break;
        }
        try {
            loop_once(options_.max_poll_wait);
        } catch (const zmq::error_t& e) {
            if (e.num() == EINTR) continue;  // a signal interrupted the poll
            throw;
        }
    }
    guarded(nullptr, [this] { on_exit(); });
    if (!impl_->queued.empty()) flush_queued();  // what still cannot leave is lost with the sockets
    impl_->sockets.clear();                      // closes them, each waiting at most its linger
    impl_->watched.clear();
    impl_->finished = true;
}

}  // namespace zmoe
