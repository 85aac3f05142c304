#pragma once
// The JSONL request/response files of `zmoe generate` and `zmoe client` (contract in docs/architecture.md):
// each input line an object with "prompt" (text) or "prompt_token_ids", and optional "max_tokens" (16),
// "temperature" (0 = greedy, the default), "top_p", "top_k", "seed", "stop" (string or list), "ignore_eos";
// each output line {"index", "token_ids", "text", "finish_reason"} in input order.

#include <chrono>
#include <string>
#include <vector>

#include "actors/zmoe_client.hpp"
#include "messages/client_protocol.hpp"

namespace zmoe::cli {

/// Reads and validates every line of `path` ("-" = stdin). Throws zmoe::error(invalid_argument) naming the line.
std::vector<client_generate> read_requests(const std::string& path);

struct request_result {
    client_completion completion;
    bool failed = false;
    errc code = errc::ok;
    std::string message;
};

/// Sends every request at once over `client`, consumes the streams, returns the results in input order. Gives up
/// (errc::peer_dead) when no event arrives for `idle_timeout`.
std::vector<request_result> run_requests(zmoe_client& client, std::vector<client_generate> requests,
                                         std::chrono::milliseconds idle_timeout);

/// Writes one output line per result ("-" = stdout). Failed requests get {"index", "finish_reason": "error",
/// "error": {"code", "message"}}.
void write_results(const std::string& path, const std::vector<request_result>& results);

}  // namespace zmoe::cli
