// What `zmoe bench serve --base-url` records of one streamed OpenAI response: TTFT at the first chunk with a
// choice, one ITL per later such chunk, output tokens from usage (else those chunks), and every failure with its
// reason. Then the summary arithmetic of such records.

#include "cli/openai_stream.hpp"

#include <gtest/gtest.h>

#include <string>

#include "cli/bench_metrics.hpp"

using zmoe::cli::bench_request_record;
using zmoe::cli::openai_stream_recorder;
using zmoe::cli::sse_event;

namespace {

sse_event data(const std::string& d) { return {.type = "message", .data = d}; }

std::string text_chunk(const std::string& text) {
    return R"({"id":"c","object":"text_completion","choices":[{"index":0,"text":")" + text +
           R"(","finish_reason":null}]})";
}

std::string chat_chunk(const std::string& field, const std::string& text) {
    return R"({"object":"chat.completion.chunk","choices":[{"index":0,"delta":{")" + field + R"(":")" + text +
           R"("},"finish_reason":null}]})";
}

bench_request_record asked(uint32_t in, uint32_t out) {
    bench_request_record r;
    r.input_len = in;
    r.output_len = out;
    return r;
}

TEST(OpenaiStream, CompletionChunksGiveTtftItlAndUsage) {
    auto rec = asked(12, 5);
    openai_stream_recorder s(rec);
    s.on_event(data(R"({"choices":[]})"), 0.05);  // no choice: not a token
    s.on_event(data(text_chunk("")), 0.10);       // a token whose text is held back still arrived (vLLM's rule)
    s.on_event(data(text_chunk("a")), 0.13);
    s.on_event(data(text_chunk("bc")), 0.20);  // two tokens in one chunk: one ITL, as vLLM counts
    s.on_event(data(R"({"choices":[{"index":0,"text":"d","finish_reason":"length"}]})"), 0.21);
    s.on_event(data(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}})"), 0.21);
    s.on_event(data("[DONE]"), 0.22);
    s.finish(0.23, "");
    EXPECT_TRUE(rec.success) << rec.error;
    EXPECT_EQ(rec.error, "");
    EXPECT_DOUBLE_EQ(rec.ttft_s, 0.10);
    ASSERT_EQ(rec.itl_s.size(), 3u);
    EXPECT_NEAR(rec.itl_s[0], 0.03, 1e-12);
    EXPECT_NEAR(rec.itl_s[1], 0.07, 1e-12);
    EXPECT_NEAR(rec.itl_s[2], 0.01, 1e-12);
    EXPECT_DOUBLE_EQ(rec.latency_s, 0.23);
    EXPECT_EQ(rec.output_tokens, 5u);  // from usage, not the 4 token chunks
    EXPECT_EQ(rec.prompt_tokens, 12u);
    EXPECT_EQ(s.token_chunks(), 4u);
}

TEST(OpenaiStream, ChatDeltasCountWithoutUsage) {
    auto rec = asked(5, 4);
    openai_stream_recorder s(rec);
    s.on_event(data(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})"), 0.01);
    s.on_event(data(chat_chunk("reasoning_content", "hm")), 0.02);
    s.on_event(data(chat_chunk("content", "x")), 0.04);
    s.on_event(data(chat_chunk("content", "y")), 0.07);
    s.on_event(data("[DONE]"), 0.08);
    s.finish(0.08, "");
    // No usage: the token chunks are the output tokens.
    EXPECT_TRUE(rec.success) << rec.error;
    EXPECT_EQ(rec.output_tokens, 4u);
    EXPECT_DOUBLE_EQ(rec.ttft_s, 0.01);
    ASSERT_EQ(rec.itl_s.size(), 3u);
    EXPECT_NEAR(rec.itl_s[2], 0.03, 1e-12);
}

TEST(OpenaiStream, FailuresKeepTheFirstReason) {
    {  // an error object in the stream (vLLM and zmoe send one when a request fails after the 200)
        auto rec = asked(5, 3);
        openai_stream_recorder s(rec);
        s.on_event(data(text_chunk("a")), 0.1);
        s.on_event(data(R"({"error":{"message":"the engine died","type":"service_unavailable","code":503}})"), 0.2);
        s.on_event(data("[DONE]"), 0.2);
        s.finish(0.2, "");
        EXPECT_FALSE(rec.success);
        EXPECT_EQ(rec.error, "error in the stream: the engine died");
    }
    {  // an event of type error
        auto rec = asked(5, 3);
        openai_stream_recorder s(rec);
        s.on_event({.type = "error", .data = "overloaded"}, 0.1);
        s.finish(0.1, "");
        EXPECT_EQ(rec.error, "error event: overloaded");
    }
    {  // data that is not JSON
        auto rec = asked(5, 3);
        openai_stream_recorder s(rec);
        s.on_event(data("{not json"), 0.1);
        s.on_event(data("[DONE]"), 0.1);
        s.finish(0.1, "");
        EXPECT_EQ(rec.error, "an event that is not a JSON object: {not json");
    }
    {  // cut before [DONE]: the transport's reason first
        auto rec = asked(5, 3);
        openai_stream_recorder s(rec);
        s.on_event(data(text_chunk("a")), 0.1);
        s.finish(0.3, "reading the response: end of stream");
        EXPECT_FALSE(rec.success);
        EXPECT_EQ(rec.error, "reading the response: end of stream");
        EXPECT_DOUBLE_EQ(rec.latency_s, 0.3);
    }
    {  // ended cleanly but without [DONE]
        auto rec = asked(5, 1);
        openai_stream_recorder s(rec);
        s.on_event(data(text_chunk("a")), 0.1);
        s.finish(0.1, "");
        EXPECT_EQ(rec.error, "the stream ended without data: [DONE]");
    }
    {  // nothing generated
        auto rec = asked(5, 3);
        openai_stream_recorder s(rec);
        s.on_event(data("[DONE]"), 0.1);
        s.finish(0.1, "");
        EXPECT_EQ(rec.error, "no choice in the stream");
    }
    {  // the server stopped early although ignore_eos asked for every token
        auto rec = asked(5, 3);
        openai_stream_recorder s(rec);
        s.on_event(data(text_chunk("a")), 0.1);
        s.on_event(data(R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}})"), 0.1);
        s.on_event(data("[DONE]"), 0.1);
        s.finish(0.1, "");
        EXPECT_EQ(rec.error, "asked for 3 tokens, got 1");
        EXPECT_EQ(rec.output_tokens, 1u);
    }
}

TEST(OpenaiStream, SummaryOfRecordedStreams) {
    // Two requests recorded from streams, one failed: the summary counts only the completed one, and its TPOT is
    // (latency - TTFT) / (tokens - 1) with tokens from usage.
    auto ok = asked(10, 5);
    {
        openai_stream_recorder s(ok);
        s.on_event(data(text_chunk("a")), 0.2);
        s.on_event(data(text_chunk("bc")), 0.3);
        s.on_event(data(text_chunk("de")), 0.5);
        s.on_event(data(R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5}})"), 0.5);
        s.on_event(data("[DONE]"), 0.6);
        s.finish(0.6, "");
    }
    auto bad = asked(10, 5);
    {
        openai_stream_recorder s(bad);
        s.finish(0.1, "connect: Connection refused");
    }
    const auto sum = zmoe::cli::bench_summary({ok, bad}, 2.0, {50.0});
    EXPECT_EQ(sum["completed"].get<int>(), 1);
    EXPECT_EQ(sum["failed"].get<int>(), 1);
    EXPECT_EQ(sum["total_output_tokens"].get<int>(), 5);
    EXPECT_EQ(sum["total_input_tokens"].get<int>(), 10);
    EXPECT_DOUBLE_EQ(sum["output_throughput"].get<double>(), 2.5);
    EXPECT_NEAR(sum["mean_ttft_ms"].get<double>(), 200.0, 1e-9);
    EXPECT_NEAR(sum["mean_tpot_ms"].get<double>(), (600.0 - 200.0) / 4.0, 1e-9);
    EXPECT_NEAR(sum["mean_itl_ms"].get<double>(), (100.0 + 200.0) / 2.0, 1e-9);
    EXPECT_NEAR(sum["mean_e2el_ms"].get<double>(), 600.0, 1e-9);
    EXPECT_EQ(sum["errors"][1].get<std::string>(), "connect: Connection refused");
}

}  // namespace
