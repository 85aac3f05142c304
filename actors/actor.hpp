#pragma once
// The actor runtime. An actor owns ZeroMQ sockets and one poll loop; everything it does happens on that loop's
// thread, one handler at a time: socket messages, timers, heartbeat checks and functions posted from other threads
// (its "mailbox", an inproc PULL socket). Subclasses register sockets with a handler each and declare in their own
// header which messages they take and send. No ZeroMQ type appears here, so subclasses need not include cppzmq.
//
// Framing (decided here for every link): a message is one frame of msgpack bytes. A ROUTER receives
// [peer identity][payload] and sends the same; DEALER, PAIR, PUSH and PULL carry [payload] alone. There is no empty
// delimiter frame, so REQ/REP peers are not supported. A message with any other frame count is dropped and logged.
//
// Failure containment: an exception thrown by a handler is caught by the loop and passed to on_handler_error; it
// never stops the actor and never disturbs other peers. Sockets cap incoming frames at kMaxFrameBytes (ZeroMQ
// disconnects a peer that sends a larger one).

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace zmoe {

enum class socket_kind { router, dealer, pair, push, pull };

/// What became of one non-blocking send.
enum class send_status {
    sent,     ///< handed to ZeroMQ
    full,     ///< the peer's pipe is at its high-water mark (or not connected yet): nothing was queued
    no_peer,  ///< a ROUTER has no peer of that identity (it disconnected or never was)
};

using socket_id = int;
using timer_id = uint64_t;

/// One received message. peer is the sender's routing identity on a ROUTER socket and empty otherwise. The views
/// are valid only during the handler call.
struct inbound_message {
    socket_id socket = -1;
    std::string_view peer;
    std::string_view payload;
    /// On a ROUTER socket over TCP: the sender's IP address as ZeroMQ reports it ("192.0.2.7", "::1"); empty for
    /// other transports and socket kinds.
    std::string_view peer_address;
};

using message_handler = std::function<void(const inbound_message&)>;

struct actor_options {
    /// Heartbeats go out on every watched link this often; a watched peer silent for max_missed intervals is dead.
    std::chrono::milliseconds heartbeat_interval{1000};
    int heartbeat_max_missed = 3;
    /// How long close waits to flush unsent messages when the actor exits.
    std::chrono::milliseconds linger{200};
    /// Upper bound of one poll wait: how quickly a signal (see stop_signals.hpp) is noticed.
    std::chrono::milliseconds max_poll_wait{50};
    /// Stop when SIGINT/SIGTERM arrive (after install_stop_signal_handlers).
    bool stop_on_signal = true;
};

class actor {
  public:
    explicit actor(std::string name, actor_options options = {});
    /// Stops and joins a thread started by start(). A subclass whose handlers touch its own members must call
    /// request_stop() and join() in its own destructor, before those members are gone.
    virtual ~actor();
    actor(const actor&) = delete;
    actor& operator=(const actor&) = delete;

    const std::string& name() const { return name_; }
    const actor_options& options() const { return options_; }

    /// Runs the loop on the calling thread (e.g. a process's main loop) until the actor stops.
    void run();
    /// Runs the loop on a new thread.
    void start();
    /// Waits for the thread started by start(); no-op if none.
    void join();
    /// Thread-safe. The loop calls on_stop_requested() after the current handler; unless that returns false (to
    /// drain), the loop exits.
    void request_stop();
    /// Thread-safe: runs fn on the actor's thread, after the current handler, in posting order.
    void post(std::function<void()> fn);
    /// True once the loop has exited.
    bool finished() const;

  protected:
    // Everything below must be called on the actor's thread, or before run()/start().

    /// Creates a socket owned by this actor; every message arriving on it goes to handler.
    socket_id add_socket(socket_kind kind, message_handler handler);
    /// Sets the routing identity a ROUTER peer will see (DEALER sockets); before connect.
    void set_routing_id(socket_id s, std::string_view id);
    /// Binds and returns the resolved endpoint (e.g. "tcp://127.0.0.1:*" comes back with its port).
    std::string bind(socket_id s, const std::string& endpoint);
    void connect(socket_id s, const std::string& endpoint);
    void close_socket(socket_id s);
    /// Sends payload on a non-ROUTER socket. Never blocks: false when the message could not be queued.
    bool send(socket_id s, std::string_view payload);
    /// Sends payload to one peer of a ROUTER socket. Never blocks: false for an unknown peer or a full queue.
    bool send_to(socket_id s, std::string_view peer, std::string_view payload);
    /// send_to that says why a message did not leave.
    send_status try_send_to(socket_id s, std::string_view peer, std::string_view payload);

    /// Checked sends for links that must never lose a message (engine core <-> frontend, engine core <->
    /// workers). The message leaves now, or is queued behind what already waits for the same (socket, peer) and
    /// leaves, in order, as soon as the pipe has room (the loop retries every few milliseconds while anything
    /// waits). Returns false only when a ROUTER peer is unknown: it is gone, so the message and everything queued
    /// for it are discarded. The caller bounds the queue (num_queued) by refusing new work: backpressure.
    bool send_reliable(socket_id s, std::string_view payload);
    bool send_reliable_to(socket_id s, std::string_view peer, std::string_view payload);
    /// Messages queued by send_reliable(_to) for (s, peer) and not yet handed to ZeroMQ.
    size_t num_queued(socket_id s, std::string_view peer = {}) const;

    /// Calls fn on this thread after delay, and then every delay if periodic (delay > 0). Timers due at the same
    /// time fire in the order they were added.
    timer_id add_timer(std::chrono::milliseconds delay, std::function<void()> fn, bool periodic = false);
    void cancel_timer(timer_id t);

    /// Starts heartbeating one link: sends ping (an encoded heartbeat message of the link's protocol) every
    /// heartbeat_interval on socket s (to peer, on a ROUTER; peer empty otherwise). Any message from the peer counts
    /// as a sign of life; after heartbeat_max_missed intervals of silence, on_dead is called once and the peer is
    /// no longer watched.
    void watch_peer(socket_id s, std::string peer, std::string ping, std::function<void()> on_dead);
    void unwatch_peer(socket_id s, std::string_view peer);

    /// From a handler: the loop exits after this handler, whatever on_stop_requested would say.
    void stop_now();
    bool stop_requested() const;

    /// On the actor's thread, before the first poll.
    virtual void on_start() {}
    /// On the actor's thread, once, when a stop is requested (request_stop or a signal). Return false to keep
    /// running (e.g. to drain requests), then call stop_now() when done.
    virtual bool on_stop_requested() { return true; }
    /// On the actor's thread after the loop, before the sockets close (last chance to send goodbyes).
    virtual void on_exit() {}
    /// A handler threw. Default: log it. msg is null for timers and posted functions.
    virtual void on_handler_error(const inbound_message* msg, const std::exception& e);

  private:
    struct impl;
    void loop_once(std::chrono::milliseconds max_wait);
    void dispatch(socket_id s);
    void fire_due_timers();
    void heartbeat_tick();
    void drain_mailbox();
    void flush_queued();
    template <typename Fn>
    void guarded(const inbound_message* msg, Fn&& fn);

    std::string name_;
    actor_options options_;
    std::unique_ptr<impl> impl_;
};

}  // namespace zmoe
