#pragma once
// What `zmoe bench serve --base-url` makes of one streamed OpenAI response (POST /v1/completions or
// /v1/chat/completions with "stream": true): the events of its Server-Sent Events body, with the time each
// arrived, become the request's bench_request_record (TTFT, inter-token latencies, output tokens, errors) by the
// same rules as `vllm bench serve` and as the ZeroMQ path.

#include <cstdint>
#include <string>

#include "cli/bench_metrics.hpp"
#include "cli/sse_parser.hpp"

namespace zmoe::cli {

class openai_stream_recorder {
  public:
    /// Fills `record` (whose input_len and output_len are set; they stay), which must outlive this object.
    explicit openai_stream_recorder(bench_request_record& record) : rec_(record) {}

    /// One event of the stream, arrived t seconds after the request was sent. A chunk with a choice (its text
    /// empty or not, as `vllm bench serve` counts: a token whose text the server holds back still arrived) is a
    /// token chunk: the first one sets TTFT, each later one adds the gap since the previous one to the ITLs. A
    /// `usage` object gives the token counts the server reports (and the prompt tokens it found cached, from
    /// usage.prompt_tokens_details.cached_tokens). `data: [DONE]` ends the stream. An event of type
    /// "error", a chunk with an "error" object, or data that is not JSON makes the request fail with that text
    /// (the first error is kept).
    void on_event(const sse_event& event, double t);

    /// The response ended at t seconds (transport_error: why it was cut, empty when it ended cleanly). Sets the
    /// latency, the output tokens (usage.completion_tokens when the server sent usage, else the number of
    /// token chunks) and success: no error, `data: [DONE]` seen, at least one token chunk, and, where usage
    /// was reported, exactly the output_len tokens asked for (ignore_eos).
    void finish(double t, const std::string& transport_error);

    bool done() const { return done_; }
    /// The text of the first choice so far (completions: "text"; chat: "delta"."content").
    const std::string& text() const { return text_; }
    uint32_t token_chunks() const { return token_chunks_; }

  private:
    void fail(std::string why) {
        if (error_.empty()) error_ = std::move(why);
    }

    bench_request_record& rec_;
    std::string error_;
    bool done_ = false;
    bool has_usage_ = false;
    uint32_t usage_completion_tokens_ = 0;
    uint32_t token_chunks_ = 0;
    double last_token_s_ = 0.0;
    std::string text_;
};

}  // namespace zmoe::cli
