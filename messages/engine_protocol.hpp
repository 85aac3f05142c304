#pragma once
// Frontend <-> engine core protocol. The frontend connects a DEALER to the engine core's ROUTER, sends hello and
// waits for welcome before anything else; requests are then identified by request_id, chosen by the frontend and
// unique for the engine core's lifetime. Token ids only: text never reaches the engine core.
//
//   frontend -> engine core: hello, add_request, abort, metrics, heartbeat, shutdown
//   engine core -> frontend: welcome, outputs, metrics_reply, heartbeat, error

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/error.hpp"
#include "messages/finish_reason.hpp"
#include "messages/step_types.hpp"

namespace zmoe {

constexpr uint32_t kEngineProtocolVersion = 1;

enum class engine_kind : uint8_t {
    hello = 1,
    welcome = 2,
    add_request = 3,
    abort = 4,
    outputs = 5,
    metrics = 6,
    metrics_reply = 7,
    heartbeat = 8,  ///< both directions
    shutdown = 9,
    error = 10,
};

struct engine_hello {
    std::string name;  ///< the frontend's name, for logs
    int64_t pid = 0;
    std::string auth;  ///< appended: the run's secret (ZMOE_RUN_SECRET); a hello without it is refused
    bool operator==(const engine_hello&) const = default;
};

/// The engine core's answer to hello: what the frontend must know to validate requests.
struct engine_welcome {
    uint32_t num_workers = 0;
    uint32_t max_num_seqs = 0;
    uint32_t max_model_len = 0;  ///< prompt + generated tokens of one request
    uint32_t block_size = 0;
    uint64_t num_kv_blocks = 0;  ///< per data-parallel rank
    uint32_t heartbeat_interval_ms = 0;
    bool operator==(const engine_welcome&) const = default;
};

struct engine_add_request {
    uint64_t request_id = 0;
    std::vector<int32_t> prompt_token_ids;
    sampling_params sampling;
    uint32_t max_tokens = 0;
    std::vector<int32_t> stop_token_ids;  ///< besides the model's EOS ids (which ignore_eos disables)
    bool ignore_eos = false;
    /// Appended: prefix caching shares blocks only among requests with the same salt (empty: the unsalted cache).
    std::string cache_salt{};
    /// Appended: the structured-output constraint (kind none: unconstrained). The frontend has compiled it.
    structured_output structured{};
};

struct engine_abort {
    uint64_t request_id = 0;
    bool operator==(const engine_abort&) const = default;
};

/// New tokens of one request. When finished, reason says why; for finish_reason::error, code/message say what.
struct engine_request_output {
    uint64_t request_id = 0;
    std::vector<int32_t> new_token_ids;
    bool finished = false;
    finish_reason reason = finish_reason::none;
    errc error_code = errc::ok;
    std::string error_message;
    uint32_t num_prompt_tokens = 0;
    /// One per new token when the request asked for logprobs (sampling.logprobs >= 0); empty otherwise.
    std::vector<token_logprobs> new_logprobs{};
    /// Appended: prompt tokens whose KV came from the prefix cache (known once the request was first scheduled).
    uint32_t num_cached_tokens = 0;
    bool operator==(const engine_request_output&) const = default;
};

/// Everything one engine step produced, for every request that produced something: one message per step.
struct engine_outputs {
    uint64_t step_id = 0;
    std::vector<engine_request_output> outputs;
    bool operator==(const engine_outputs&) const = default;
};

struct engine_metrics {
    std::string tag;
    bool operator==(const engine_metrics&) const = default;
};

struct engine_metrics_reply {
    std::string tag;
    std::string json;  ///< JSON object: the engine core's and the workers' metrics
    bool operator==(const engine_metrics_reply&) const = default;
};

struct engine_heartbeat {
    bool operator==(const engine_heartbeat&) const = default;
};
/// Drain: stop accepting requests, finish the running ones, then stop the workers and exit.
struct engine_shutdown {
    bool operator==(const engine_shutdown&) const = default;
};

/// A failure not tied to one request (e.g. hello refused).
struct engine_error {
    errc code = errc::internal;
    std::string message;
    bool operator==(const engine_error&) const = default;
};

using frontend_to_engine =
    std::variant<engine_hello, engine_add_request, engine_abort, engine_metrics, engine_heartbeat, engine_shutdown>;
using engine_to_frontend =
    std::variant<engine_welcome, engine_outputs, engine_metrics_reply, engine_heartbeat, engine_error>;

std::string encode(const engine_hello& m);
std::string encode(const engine_welcome& m);
std::string encode(const engine_add_request& m);
std::string encode(const engine_abort& m);
std::string encode(const engine_outputs& m);
std::string encode(const engine_metrics& m);
std::string encode(const engine_metrics_reply& m);
std::string encode(const engine_heartbeat& m);
std::string encode(const engine_shutdown& m);
std::string encode(const engine_error& m);

/// Throw zmoe::error(errc::protocol) on anything malformed.
frontend_to_engine decode_frontend_to_engine(std::string_view bytes);
engine_to_frontend decode_engine_to_frontend(std::string_view bytes);

}  // namespace zmoe
