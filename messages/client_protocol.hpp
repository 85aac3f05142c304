#pragma once
// Client <-> frontend protocol (docs/protocol.md is the reference for client writers). A client connects a
// DEALER socket to the frontend's ROUTER and sends one-frame messages; every reply is one frame too.
//
//   client -> frontend: generate, abort, health, metrics, heartbeat, hello, tokenize, detokenize
//   frontend -> client: delta, error, health_reply, metrics_reply, heartbeat, tokens_reply
//
// A generate request's stream is the deltas carrying its client_request_id; it ends with exactly one terminal
// message: a delta with finished = true, or an error naming the request.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/error.hpp"
#include "messages/finish_reason.hpp"
#include "messages/step_types.hpp"

namespace zmoe {

constexpr uint32_t kClientProtocolVersion = 1;
constexpr uint32_t kMaxStopStrings = 64;
/// Most sequences one generate request may ask for (client_generate.n).
constexpr uint32_t kMaxChoices = 16;

enum class client_kind : uint8_t {
    generate = 1,
    abort = 2,
    health = 3,
    metrics = 4,
    heartbeat = 5,  ///< both directions
    hello = 6,      ///< appended: the client's API key (docs/protocol.md, "Authentication")
    tokenize = 7,
    detokenize = 8,
    delta = 16,
    error = 17,
    health_reply = 18,
    metrics_reply = 19,
    tokens_reply = 20,  ///< answers tokenize and detokenize
};

/// Starts a request. The client chooses client_request_id (unique among its own live requests); the frontend
/// keys the stream on (client identity, client_request_id).
struct client_generate {
    std::string client_request_id;
    /// Text to tokenize, or token ids to use as they are. Wire: one field, str or array of int.
    std::variant<std::string, std::vector<int32_t>> prompt;
    uint32_t max_tokens = 16;
    // Sampling (docs/sampling.md). nil = the model's generation_config.json value, else vLLM's default (temperature
    // 1, top_p 1, top_k off): the one definition of defaults, in the frontend (frontend/sampling_defaults.hpp).
    std::optional<float> temperature;  ///< 0 = greedy
    std::optional<float> top_p;        ///< (0, 1]
    std::optional<int32_t> top_k;      ///< 0 or -1 = off
    std::optional<uint64_t> seed;      ///< nil = the frontend draws one
    std::vector<std::string> stop;
    bool ignore_eos = false;
    /// true: a delta as tokens are produced; false: one final delta with everything.
    bool stream = true;
    /// Appended. Non-empty: a chat request, the JSON text of {"messages": [...], "add_generation_prompt"?: bool,
    /// "tools"?: [...], "chat_template_kwargs"?: {...}}; the frontend renders it with the model's chat template and
    /// tokenizes the rendering without adding special tokens (as apply_chat_template(tokenize=True)); `prompt`
    /// must then be an empty string.
    std::string chat;
    // Appended fields: vLLM's sampling parameters.
    std::vector<int32_t> stop_token_ids{};      ///< end the request, as EOS does (the id is kept in the output)
    std::optional<uint32_t> logprobs{};         ///< nil = none; k <= 20: the sampled token's logprob and the top k
    float presence_penalty = 0.f;               ///< [-2, 2]
    float frequency_penalty = 0.f;              ///< [-2, 2]
    std::optional<float> repetition_penalty{};  ///< > 0; nil = default (else 1 = off)
    std::optional<float> min_p{};               ///< [0, 1]; nil = default (else 0 = off)
    std::vector<std::pair<int32_t, float>> logit_bias{};  ///< (token id, bias in [-100, 100]); wire: [[id, bias]]
    uint32_t min_tokens = 0;  ///< EOS and stop_token_ids cannot end the request (nor be sampled) before this
    /// Appended: sequences to generate from the prompt, in [1, kMaxChoices]. Sequence i is seeded seed + i when a
    /// seed is given (each one reproducible on its own); its deltas carry index i and it ends with its own finished
    /// delta, so the request's stream ends after n finished deltas (or one error, which ends every sequence).
    uint32_t n = 1;
    /// Appended: prefix caching shares cached KV blocks only among requests with the same salt (vLLM's cache_salt;
    /// empty = the unsalted cache), so that one tenant cannot learn from timing what another's prompts were.
    std::string cache_salt{};
    /// Appended: constrain the output to a JSON Schema, any JSON object, a regex, one of a list of choices or an EBNF
    /// grammar (structured_output.hpp). The frontend refuses with invalid_argument, before queueing, a constraint
    /// that does not compile, naming the problem.
    structured_output structured{};
    bool operator==(const client_generate&) const = default;
};

struct client_abort {
    std::string client_request_id;
    bool operator==(const client_abort&) const = default;
};

/// tag is echoed in the reply so a client can match replies to requests.
struct client_health {
    std::string tag;
    bool operator==(const client_health&) const = default;
};

struct client_metrics {
    std::string tag;
    bool operator==(const client_metrics&) const = default;
};

struct client_heartbeat {
    bool operator==(const client_heartbeat&) const = default;
};

/// Presents the server's API key (--api-key / ZMOE_API_KEY). A client connected over TCP from an address that is not
/// loopback must send it before generate, abort or metrics; a wrong key is refused (error `unauthenticated`, no
/// request id) and so is everything but health and heartbeat after it. No reply when the key is right. Clients send
/// it before each request, so a reconnected socket is authenticated again.
struct client_hello {
    std::string api_key;
    bool operator==(const client_hello&) const = default;
};

/// Tokenizes a text, or a chat conversation rendered with the model's chat template. Answered by a tokens_reply
/// with the same tag.
struct client_tokenize {
    std::string tag;
    std::string text;                ///< used when chat is empty
    std::string chat;                ///< non-empty: a conversation's JSON, as client_generate.chat
    bool add_special_tokens = true;  ///< text only (a chat rendering is tokenized without them)
    bool operator==(const client_tokenize&) const = default;
};

/// Decodes token ids. Answered by a tokens_reply with the same tag.
struct client_detokenize {
    std::string tag;
    std::vector<int32_t> token_ids;
    bool operator==(const client_detokenize&) const = default;
};

struct client_tokens_reply {
    std::string tag;
    std::vector<int32_t> token_ids;   ///< tokenize: the ids; detokenize: the ids asked about
    std::string text;                 ///< detokenize: the ids decoded together
    std::vector<std::string> pieces;  ///< detokenize: the bytes each id adds to a decode (maybe partial UTF-8)
    uint32_t max_model_len = 0;       ///< the engine's context length (0 while it starts)
    errc code = errc::ok;             ///< not ok: the request failed, `message` says why
    std::string message;
    bool operator==(const client_tokens_reply&) const = default;
};

/// New output of one request (one of its sequences, when n > 1) since its previous delta.
struct client_delta {
    std::string client_request_id;
    std::vector<int32_t> token_ids;  ///< new token ids
    std::string text;                ///< new detokenized text (valid UTF-8; may lag token_ids by a few bytes)
    bool finished = false;
    finish_reason reason = finish_reason::none;  ///< wire: "" | "length" | "stop" | "abort" | "error"
    uint32_t prompt_tokens = 0;                  ///< prompt length in tokens
    uint32_t completion_tokens = 0;              ///< tokens generated so far, this delta's included
    /// Appended: one per token_ids entry when the request asked for logprobs; empty otherwise.
    std::vector<token_logprobs> logprobs{};
    /// Appended: which of the request's n sequences this delta belongs to (0 when n = 1). prompt_tokens is the shared
    /// prompt's length; completion_tokens counts this sequence's tokens only.
    uint32_t index = 0;
    /// Appended: prompt tokens served from the prefix cache (OpenAI usage.prompt_tokens_details.cached_tokens); set
    /// on every delta once the engine has scheduled the request.
    uint32_t cached_tokens = 0;
    bool operator==(const client_delta&) const = default;
};

struct client_error {
    std::string client_request_id;  ///< empty when the error is not about one request (e.g. an undecodable frame)
    errc code = errc::internal;
    std::string message;
    bool operator==(const client_error&) const = default;
};

struct client_health_reply {
    std::string tag;
    std::string status;  ///< "ok", "starting", "degraded" (a worker is dead) or "draining"
    std::string model;
    uint32_t num_workers = 0;
    uint32_t num_workers_alive = 0;
    uint32_t num_running = 0;  ///< requests being generated
    uint32_t num_waiting = 0;  ///< requests queued
    double uptime_s = 0.0;
    std::string version;  ///< zmoe version string
    std::string detail;   ///< why the status is not "ok" (e.g. which worker died); empty otherwise
    std::string run_id;   ///< appended: the id its launcher gave this run (empty when none)
    bool operator==(const client_health_reply&) const = default;
};

struct client_metrics_reply {
    std::string tag;
    std::string json;  ///< one JSON object: every actor's metrics
    bool operator==(const client_metrics_reply&) const = default;
};

using client_request = std::variant<client_generate, client_abort, client_health, client_metrics, client_heartbeat,
                                    client_hello, client_tokenize, client_detokenize>;
using client_reply = std::variant<client_delta, client_error, client_health_reply, client_metrics_reply,
                                  client_heartbeat, client_tokens_reply>;

std::string encode(const client_generate& m);
std::string encode(const client_abort& m);
std::string encode(const client_health& m);
std::string encode(const client_metrics& m);
std::string encode(const client_heartbeat& m);
std::string encode(const client_hello& m);
std::string encode(const client_delta& m);
std::string encode(const client_error& m);
std::string encode(const client_health_reply& m);
std::string encode(const client_metrics_reply& m);
std::string encode(const client_tokenize& m);
std::string encode(const client_detokenize& m);
std::string encode(const client_tokens_reply& m);

/// Decodes a client -> frontend frame; throws zmoe::error(errc::protocol) on anything malformed.
client_request decode_client_request(std::string_view bytes);
/// The client_request_id of a generate or abort frame that may be malformed elsewhere ("" when even that cannot be
/// read), so that the error about it names the request.
std::string peek_client_request_id(std::string_view bytes) noexcept;
/// Decodes a frontend -> client frame; throws zmoe::error(errc::protocol) on anything malformed.
client_reply decode_client_reply(std::string_view bytes);

}  // namespace zmoe
