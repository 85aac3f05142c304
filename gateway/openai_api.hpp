#pragma once
// OpenAI's HTTP API in terms of the zmoe client protocol: request bodies of /v1/completions and
// /v1/chat/completions to client_generate, deltas to response objects and Server-Sent-Event chunks, failures to
// OpenAI error objects. Pure functions: no sockets, unit-tested on their own.

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "messages/client_protocol.hpp"
#include "tool_calls/parse_event.hpp"
#include "tool_calls/reasoning_parser.hpp"
#include "tool_calls/tool_call_parser.hpp"

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

/// tool_choice: "none", "auto", "required", or {"type": "function", "function": {"name"}} (named).
enum class tool_choice_mode : uint8_t { none, automatic, required, named };

/// A parsed request: what to send to the frontend and how to answer.
struct openai_request {
    endpoint_kind kind = endpoint_kind::completion;
    client_generate generate;
    std::string model;  ///< echoed in responses (the served model's name when absent)
    bool stream = false;
    bool include_usage = false;  ///< stream_options.include_usage
    bool logprobs = false;       ///< answer with logprobs (completions: logprobs >= 0; chat: logprobs true)
    // Chat only.
    ojson tools = nullptr;  ///< the request's tools (checked: a list of {"type": "function", "function": {...}})
    tool_choice_mode tool_choice = tool_choice_mode::none;  ///< default: auto with tools, else none
    std::string tool_choice_name{};                         ///< named: the function
    bool parallel_tool_calls = true;
    bool enable_thinking = true;  ///< chat_template_kwargs.enable_thinking; false turns the reasoning split off
};

/// Parses a /v1/completions (kind completion) or /v1/chat/completions (kind chat) body: every sampling field of
/// OpenAI's API and vLLM's extras (docs/openai_api.md). Throws api_error (400) naming the field for malformed
/// JSON, missing, mistyped or out-of-range fields and unsupported values (echo, suffix, best_of other than n; a
/// tool_choice without tools; a named function not among the tools; tool_choice required or named beside a
/// structured-output field).
openai_request parse_openai_request(const std::string& body, endpoint_kind kind);

/// tool_choice "required" or named: constrains the output (generate.structured) by the grammar of calls in `format`
/// (tool_calls/tool_call_grammar.hpp): one call of a listed function, or one or more with parallel_tool_calls
/// (required only), arguments valid against its parameters; thinking first with a reasoning format. Does nothing
/// for none and auto. Throws api_error (param "tools") for a parameters schema the grammar cannot express.
void constrain_tool_choice(openai_request& r, tool_calls::tool_call_format format,
                           std::optional<tool_calls::reasoning_format> reasoning);

/// One choice's output so far (or in one chunk).
struct choice_output {
    uint32_t index = 0;
    std::string text{};
    finish_reason reason = finish_reason::none;
    ojson logprobs = nullptr;  ///< logprobs_json's object, or null
    /// Chat with an output parser (tool calls, reasoning): non-streamed, the whole message (parsed_message);
    /// streamed, the chunk's delta (one of parsed_deltas). Null: the message or delta is the text.
    ojson parsed = nullptr;
    bool tool_called = false;  ///< the choice made tool calls: finish_reason "tool_calls" where it would be "stop"
};

/// The assistant message of a parsed choice: content (null when empty beside tool calls), reasoning_content and
/// reasoning (vLLM's two names; with a reasoning parser: null when there was none), and tool_calls
/// [{id, type: "function", function: {name, arguments}}] when any.
ojson parsed_message(const tool_calls::parsed_output& p, bool with_reasoning);
/// The deltas of parsed events, one per event, as OpenAI streams them: {content}, {reasoning_content, reasoning},
/// a call's start {tool_calls: [{index, id, type, function: {name, arguments: ""}}]}, then its argument fragments
/// {tool_calls: [{index, function: {arguments}}]}.
std::vector<ojson> parsed_deltas(const std::vector<tool_calls::parse_event>& events);

/// OpenAI's logprobs object for generated tokens: completions {tokens, token_logprobs, top_logprobs, text_offset}
/// (text offsets from text_offset on), chat {content: [{token, logprob, bytes, top_logprobs}]}. `piece` gives
/// each id's text (the frontend's detokenize pieces); lps has one entry per id.
ojson logprobs_json(endpoint_kind kind, const std::vector<int32_t>& ids, const std::vector<token_logprobs>& lps,
                    const std::function<std::string(int32_t)>& piece, size_t text_offset = 0);

/// /tokenize's body (vLLM): {"prompt": str} or {"messages": [...], "add_generation_prompt"?, "tools"?,
/// "chat_template_kwargs"?}, "add_special_tokens"? (default true; a chat rendering never adds them). Throws api_error.
client_tokenize parse_tokenize_request(const std::string& body);
/// /detokenize's body (vLLM): {"tokens": [int...]}. Throws api_error.
std::vector<int32_t> parse_detokenize_request(const std::string& body);

/// The finish_reason string OpenAI uses ("stop", "length"; abort as "abort"; "tool_calls" for a stop after tool
/// calls), null while running.
ojson finish_reason_json(finish_reason r, bool finished, bool tool_called = false);

/// The non-streamed response object, its choices in the order given. usage carries
/// prompt_tokens_details.cached_tokens: the prompt tokens the prefix cache served.
ojson response_object(const openai_request& req, const std::string& id, int64_t created,
                      const std::vector<choice_output>& choices, uint32_t prompt_tokens, uint32_t completion_tokens,
                      uint32_t cached_tokens);
/// One streamed chunk object for a delta of one choice (its text and logprobs, and c.reason on its last chunk).
/// first: a chat stream's first chunk of that choice carries delta.role = "assistant". finished: the choice's last.
ojson chunk_object(const openai_request& req, const std::string& id, int64_t created, const choice_output& c,
                   bool first, bool finished);
/// The final usage-only chunk of a stream with stream_options.include_usage.
ojson usage_chunk(const openai_request& req, const std::string& id, int64_t created, uint32_t prompt_tokens,
                  uint32_t completion_tokens, uint32_t cached_tokens);
/// "data: <json>\n\n"
std::string sse_event(const ojson& j);

}  // namespace zmoe::gateway
