#pragma once
// The C++ client of a zmoe frontend (see docs/protocol.md): one DEALER socket, any number of concurrent request
// streams, synchronous calls with timeouts. Not thread-safe: one thread per client object.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "messages/client_protocol.hpp"

namespace zmoe {

/// One event of a request's stream: a delta, or the error that ended the request.
using client_event = std::variant<client_delta, client_error>;

/// Every waiting call below may also throw errc::peer_dead when the frontend stops answering heartbeats (see
/// zmoe_client_options): a dead frontend is noticed within seconds, whatever the call's timeout.

/// A whole request's output (one of its sequences, when n > 1), the deltas concatenated.
struct client_completion {
    std::string client_request_id;
    uint32_t index = 0;  ///< which of the request's n sequences
    std::vector<int32_t> token_ids;
    std::string text;
    finish_reason reason = finish_reason::none;
    uint32_t prompt_tokens = 0;
    uint32_t completion_tokens = 0;
    uint32_t cached_tokens = 0;  ///< prompt tokens the prefix cache served
};

struct zmoe_client_options {
    /// While the client is in any call, it sends a heartbeat every interval, whether or not frames are arriving
    /// (the frontend echoes it; any frame from the frontend counts as its answer). The frontend ends the requests
    /// of a heartbeating client that then sends nothing for 3 of its intervals, so an application must call into
    /// the client (next, next_any, collect, ...) at least that often while it has live requests.
    std::chrono::milliseconds heartbeat_interval{1000};
    /// A heartbeat unanswered for this many intervals means the frontend is dead: the waiting call throws
    /// errc::peer_dead. 0 = never (wait for the call's own timeout).
    int heartbeat_max_missed = 3;
    /// The server's API key, sent in a hello before each request (needed when this client is not on the server's
    /// loopback; see docs/protocol.md). Empty: ZMOE_API_KEY from the environment, if set.
    std::string api_key{};
};

class zmoe_client {
  public:
    /// Connects to a frontend ROUTER endpoint (e.g. "tcp://127.0.0.1:5555"); the connection is made lazily by
    /// ZeroMQ, so this does not fail when the frontend is not up yet.
    explicit zmoe_client(const std::string& endpoint, zmoe_client_options options = {});
    ~zmoe_client();
    zmoe_client(const zmoe_client&) = delete;
    zmoe_client& operator=(const zmoe_client&) = delete;

    /// Sends a generate request and returns its client_request_id (assigned when empty). Throws
    /// errc::invalid_argument when the id is already in use by a live request of this client.
    std::string generate(client_generate request);
    /// The next event of one request, waiting at most timeout (nullopt when none came). Throws
    /// errc::invalid_argument for an id that is neither live nor has buffered events.
    std::optional<client_event> next(const std::string& client_request_id, std::chrono::milliseconds timeout);
    /// The next event of any request, in arrival order (errors not tied to a request included).
    std::optional<client_event> next_any(std::chrono::milliseconds timeout);
    /// Waits for a request (n = 1) to finish and returns its concatenated output. Throws the server's error as a
    /// zmoe::error with its code, or errc::peer_dead when timeout passes first.
    client_completion collect(const std::string& client_request_id, std::chrono::milliseconds timeout);
    /// collect for a request of n sequences: one completion per sequence, by index (all n finished).
    std::vector<client_completion> collect_all(const std::string& client_request_id, std::chrono::milliseconds timeout);
    /// Asks the frontend to abort a request; its stream then ends with finish_reason abort.
    void abort(const std::string& client_request_id);
    /// Throw errc::peer_dead on timeout.
    client_health_reply health(std::chrono::milliseconds timeout);
    std::string metrics(std::chrono::milliseconds timeout);
    /// The frontend's tokenization of a text or chat conversation (tag assigned here). Throws the frontend's
    /// refusal as a zmoe::error with its code, or errc::peer_dead on timeout.
    client_tokens_reply tokenize(client_tokenize request, std::chrono::milliseconds timeout);
    /// The frontend's decoding of token ids, together and one by one; throws as tokenize.
    client_tokens_reply detokenize(std::vector<int32_t> token_ids, std::chrono::milliseconds timeout);
    /// Requests sent whose terminal event has not arrived yet.
    size_t num_live() const;

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace zmoe
