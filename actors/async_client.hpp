#pragma once
// An asynchronous client of a zmoe frontend: one ZeroMQ DEALER (messages/client_protocol.hpp) owned by a thread of its
// own, carrying any number of concurrent requests, multiplexed by client_request_id. It is what the HTTP gateway
// speaks through: every HTTP request of the gateway goes over this one connection. Other threads never touch the
// socket: calls queue a command (the socket thread is woken through an eventfd) and each request's events come back
// through the callback given with it, called on the socket thread (callers hand them on to their own executor).
//
// Liveness (docs/reliability.md): the client heartbeats the frontend every heartbeat interval whatever else flows,
// and asks for its health as often (the answer is cached: health()). Any frame from the frontend counts as a sign of
// life; none for heartbeat_max_missed intervals means the frontend is dead: every open request ends with
// errc::peer_dead and health() says so until a frame comes again.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "messages/client_protocol.hpp"

namespace zmoe {

struct async_client_options {
    std::string endpoint;  ///< the frontend's client endpoint, e.g. tcp://127.0.0.1:5555
    std::chrono::milliseconds heartbeat_interval{1000};
    /// Intervals without any frame from the frontend after which it is taken for dead (>= 1).
    int heartbeat_max_missed = 3;
    std::string api_key{};  ///< sent in a hello before each request when non-empty
    /// Longest wait for a tokens or metrics reply before the caller is told errc::peer_dead.
    std::chrono::milliseconds reply_timeout{30000};
};

/// What the client knows of the frontend, as of its last frames.
struct async_client_health {
    bool alive = false;                                 ///< a frame came within the liveness bound
    std::optional<client_health_reply> health;          ///< the latest health reply (none before the first)
    std::chrono::steady_clock::time_point health_at{};  ///< when it came
    std::string why_not;                                ///< when not alive: why
    size_t num_inflight = 0;                            ///< generate requests whose terminal event has not come
    uint64_t num_frames_received = 0;
    uint64_t num_heartbeats_sent = 0;
};

class async_client {
  public:
    /// One event of a request: a delta or the error that ended it.
    using event = std::variant<client_delta, client_error>;
    /// Called on the socket thread with each event of one request; the last call carries its terminal event.
    using event_sink = std::function<void(event)>;

    /// Connects (lazily, as ZeroMQ does) and starts the socket thread. Throws errc::invalid_argument for a malformed
    /// endpoint.
    explicit async_client(async_client_options options);
    ~async_client();  ///< stops the thread; open requests get no further events
    async_client(const async_client&) = delete;
    async_client& operator=(const async_client&) = delete;

    /// Sends a generate request under a fresh client_request_id (returned); its events go to sink until its terminal
    /// one (n finished deltas, or one error).
    std::string generate(client_generate request, event_sink sink);
    /// Aborts a request at the frontend; no more events reach its sink.
    void abort(const std::string& client_request_id);
    /// The frontend's tokenization (tag assigned here); failures come back as a reply with code != ok.
    void tokenize(client_tokenize request, std::function<void(client_tokens_reply)> done);
    void detokenize(std::vector<int32_t> token_ids, std::function<void(client_tokens_reply)> done);
    /// Every actor's metrics JSON, or nullopt when the frontend did not answer within the reply timeout.
    void metrics(std::function<void(std::optional<std::string>)> done);
    async_client_health health() const;

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace zmoe
