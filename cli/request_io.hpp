#pragma once
// The JSONL request/response files of `zmoe generate` and `zmoe client` (contract in docs/architecture.md):
// each input line an object with "prompt" (text) or "prompt_token_ids", and optional "max_tokens" (16),
// "temperature" (0 = greedy; unset = the server's default), "top_p", "top_k", "seed", "stop" (string or list),
// "ignore_eos", and vLLM's "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias",
// "min_tokens", "stop_token_ids", "logprobs" (docs/sampling.md);
// each output line {"index", "token_ids", "text", "finish_reason"} in input order.

#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "actors/zmoe_client.hpp"
#include "messages/client_protocol.hpp"

namespace zmoe::cli {

/// Reads and validates every line of `path` ("-" = stdin). Throws zmoe::error(invalid_argument) naming the line.
std::vector<client_generate> read_requests(const std::string& path);

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
    client_completion completion;
    bool failed = false;
    errc code = errc::ok;
    std::string message;
    std::vector<token_logprobs> logprobs;  ///< one per output token when the request asked for logprobs
};

/// Sends every request at once over `client`, consumes the streams, returns the results in input order. Gives up
/// (errc::peer_dead) when no event arrives for `idle_timeout`.
std::vector<request_result> run_requests(zmoe_client& client, std::vector<client_generate> requests,
                                         std::chrono::milliseconds idle_timeout);

/// Writes one output line per result ("-" = stdout). Failed requests get {"index", "finish_reason": "error",
/// "error": {"code", "message"}}.
void write_results(const std::string& path, const std::vector<request_result>& results);

/// Writes results in input order as they finish: result i is written as soon as results 0..i all are. The output
/// is opened (so a bad path fails) before any request is sent.
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
