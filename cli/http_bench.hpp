#pragma once
// The load generator of `zmoe bench serve --base-url`: the prompts and arrivals of the ZeroMQ path
// (make_bench_prompts, bench_arrival_times) sent to an OpenAI-compatible HTTP server (zmoe's gateway, vLLM,
// SGLang, llama-server) as streamed POST /v1/completions or /v1/chat/completions requests, every Server-Sent
// Events stream read and timed as `vllm bench serve` does.
//
// One process holds thousands of streams: Boost.Beast over Boost.Asio, a few I/O threads sharing one
// io_context, one strand per connection, no thread per request. Connections are kept alive and reused by the
// next request (as vLLM's aiohttp connector does), unless keep_alive is off (a new connection per request).

#include <cstdint>
#include <string>

#include "cli/bench_serve.hpp"

namespace zmoe::cli {

/// An http:// base URL taken apart: http://HOST[:PORT][/PREFIX] (PORT defaults to 80; PREFIX, without its
/// trailing slash, goes before /v1/...). Throws errc::invalid_argument for another scheme (https is not
/// supported) or a malformed URL. An IPv6 host is written in brackets: http://[::1]:8000.
struct http_url {
    std::string host;
    uint16_t port = 80;
    std::string prefix;  ///< "" or "/something"
};
http_url parse_http_url(const std::string& url);

enum class openai_endpoint_type { completions, chat };

struct http_bench_target {
    std::string base_url{};  ///< http://HOST:PORT
    openai_endpoint_type endpoint_type = openai_endpoint_type::completions;
    /// The requests' "model"; empty: the first model GET /v1/models lists.
    std::string model_name{};
    std::string api_key{};  ///< non-empty: sent as "Authorization: Bearer <key>"
    /// Chat prompts are text: random token ids decoded by this tokenizer (a tokenizer.json or a directory holding
    /// one). Unused for completions, whose prompts are the token ids themselves.
    std::string tokenizer{};
    /// Non-empty: the server's ZeroMQ endpoint, read for its metrics before and after the run (served decode
    /// steps, as the ZeroMQ path reports them).
    std::string metrics_endpoint{};
    unsigned num_threads = 0;  ///< I/O threads; 0: half the cores, between 1 and 8
    bool keep_alive = true;    ///< reuse connections; false: one connection per request
};

/// The body of one streamed request: {"model", "prompt" (the token ids) | "messages" ([{"role": "user",
/// "content": text}]), "max_tokens", "temperature", "ignore_eos": true, "stream": true, "stream_options":
/// {"include_usage": true}}.
std::string openai_request_body(openai_endpoint_type type, const std::string& model, const bench_prompt& prompt,
                                const std::string& text, float temperature);

/// Waits until GET /health answers 2xx (or 404: a server without that route) for at most ready_timeout_s
/// (errc::peer_dead after), then runs the benchmark. Records are in prompt order; failed requests carry the
/// HTTP status and body, the stream's error event, or the transport error. Raises this process's limit on open
/// files to its hard limit first.
serve_bench_run run_http_bench(const serve_bench_params& params, const http_bench_target& target,
                               double ready_timeout_s = 60.0);

}  // namespace zmoe::cli
