#pragma once
// The JSONL request/response files of `zmoe generate` and `zmoe client` (contract in docs/architecture.md):
// each input line an object with "prompt" (text) or "prompt_token_ids", and optional "max_tokens" (16),
// "temperature" (0 = greedy; unset = the server's default), "top_p", "top_k", "seed", "stop" (string or list),
// "ignore_eos", and vLLM's "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias",
// "min_tokens", "stop_token_ids", "logprobs" (docs/sampling.md), "n" (sequences from the prompt, seeded seed + i),
// "cache_salt" (prefix-cache isolation, docs/scheduler.md); each output line {"index", "token_ids", "text",
// "finish_reason", "usage"} in input order (with n > 1: "choices"); usage holds prompt_tokens, completion_tokens and
// prompt_tokens_details.cached_tokens.

#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "actors/zmoe_client.hpp"
#include "messages/client_protocol.hpp"

namespace zmoe::cli {

/// One input line: its request, or why it cannot be sent (its output line is then an error; the other lines are
/// still served).
struct request_line {
    client_generate request;
    bool invalid = false;
    std::string error;
};
/// Every non-blank line of `path` ("-" = stdin), bad ones included. Throws only when the file cannot be read.
std::vector<request_line> read_request_lines(const std::string& path);

struct request_result {
    std::vector<client_completion> choices;  ///< one per sequence (the request's n), by index
    /// Per sequence: one entry per output token when the request asked for logprobs.
    std::vector<std::vector<token_logprobs>> logprobs;
    bool failed = false;
    errc code = errc::ok;
    std::string message;
};

/// Writes results in input order as they finish: result i is written as soon as results 0..i all are. The output
/// is opened (so a bad path fails) before any request is sent. Failed requests get {"index", "finish_reason":
/// "error", "error": {"code", "message"}}; a request with n > 1 gets {"index", "choices": [{"index", "token_ids",
/// "text", "finish_reason", "logprobs"?}], "usage"} (usage: the prompt once, the tokens of every sequence).
class result_writer {
  public:
    /// Throws errc::io when path cannot be written.
    result_writer(const std::string& path, size_t num_results);
    void add(size_t index, request_result result);
    /// Throws errc::io on a short write.
    void finish();

  private:
    std::string path_;
    std::ofstream file_;
    std::ostream* out_;
    std::vector<std::optional<request_result>> pending_;
    size_t next_ = 0;
};

/// run_requests over request lines: invalid lines become error results at once, the rest are sent; each result
/// goes to `writer` as it finishes; `progress` draws a progress bar on stderr (for a terminal).
size_t run_request_lines(zmoe_client& client, const std::vector<request_line>& lines,
                         std::chrono::milliseconds idle_timeout, result_writer& writer, bool progress);

}  // namespace zmoe::cli
