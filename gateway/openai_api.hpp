#pragma once
// OpenAI's HTTP API in terms of the zmoe client protocol: request bodies of /v1/completions and
// /v1/chat/completions to client_generate, deltas to response objects and Server-Sent-Event chunks, failures to
// OpenAI error objects. Pure functions: no sockets, unit-tested on their own.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "messages/client_protocol.hpp"

namespace zmoe::gateway {

using ojson = nlohmann::ordered_json;

/// A request the gateway refuses before it reaches the frontend: HTTP status + OpenAI error object.
struct api_error {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";  ///< OpenAI's error type
    std::string param;                           ///< the offending field, when there is one
};

/// {"error": {"message", "type", "param", "code"}} as OpenAI sends it.
std::string error_body(const api_error& e);
/// The HTTP status and OpenAI error for a zmoe error code carried back by the frontend.
api_error error_from_errc(errc code, const std::string& message);

enum class endpoint_kind : uint8_t { completion, chat };

/// A parsed request: what to send to the frontend and how to answer.
struct openai_request {
    endpoint_kind kind = endpoint_kind::completion;
    client_generate generate;
    std::string model;  ///< echoed in responses (the served model's name when absent)
    bool stream = false;
    bool include_usage = false;  ///< stream_options.include_usage
};

/// Parses a /v1/completions (kind completion) or /v1/chat/completions (kind chat) body. Throws api_error (400)
/// naming the field for malformed JSON, missing or mistyped fields and unsupported values (n > 1, echo, best_of).
openai_request parse_openai_request(const std::string& body, endpoint_kind kind);

/// The finish_reason string OpenAI uses ("stop", "length"; abort as "abort"), null while running.
ojson finish_reason_json(finish_reason r, bool finished);

/// The non-streamed response object.
ojson response_object(const openai_request& req, const std::string& id, int64_t created, const std::string& text,
                      finish_reason reason, uint32_t prompt_tokens, uint32_t completion_tokens);
/// One streamed chunk object for a delta (text, and finish_reason on the last one). first: a chat stream's first
/// chunk carries delta.role = "assistant".
/// finished: this is the last chunk, with `reason`.
ojson chunk_object(const openai_request& req, const std::string& id, int64_t created, const std::string& text,
                   bool first, bool finished, finish_reason reason);
/// The final usage-only chunk of a stream with stream_options.include_usage.
ojson usage_chunk(const openai_request& req, const std::string& id, int64_t created, uint32_t prompt_tokens,
                  uint32_t completion_tokens);
/// "data: <json>\n\n"
std::string sse_event(const ojson& j);

}  // namespace zmoe::gateway
