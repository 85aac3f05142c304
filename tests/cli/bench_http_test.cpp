// `zmoe bench serve --base-url` end to end against `zmoe serve --http-port` on the demo model (CPU, loopback): both
// endpoint types, the ZeroMQ and HTTP passes side by side on the same prompts, a connection per request, the API
// key, and failed requests counted with their HTTP status and body. The JSON is parsed and checked for the
// contract's keys and for values that agree with each other; nothing here asserts a time.

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;
using namespace std::chrono_literals;

namespace {

double num(const nlohmann::json& j, const std::string& key) {
    EXPECT_TRUE(j.contains(key)) << key;
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

/// One pass's result against the run it describes: n requests of in_len prompt tokens (0: not checked per
/// request) and out_len output tokens, none failed.
void check_pass(const nlohmann::json& r, size_t n, int in_len, int out_len) {
    EXPECT_EQ(r["completed"].get<size_t>(), n) << r["errors"].dump();
    EXPECT_EQ(r["failed"].get<size_t>(), 0u);
    EXPECT_EQ(r["total_output_tokens"].get<size_t>(), n * out_len);
    ASSERT_EQ(r["input_lens"].size(), n);
    ASSERT_EQ(r["ttfts"].size(), n);
    ASSERT_EQ(r["itls"].size(), n);
    size_t in_sum = 0;
    for (size_t i = 0; i < n; ++i) {
        if (in_len) {
            EXPECT_EQ(r["input_lens"][i].get<int>(), in_len);
        }
        in_sum += r["input_lens"][i].get<size_t>();
        EXPECT_EQ(r["output_lens"][i].get<int>(), out_len);
        EXPECT_EQ(r["errors"][i].get<std::string>(), "");
        EXPECT_GT(r["ttfts"][i].get<double>(), 0.0);
        // One ITL per chunk after the first: at most one per token.
        EXPECT_LE(r["itls"][i].size(), static_cast<size_t>(out_len - 1));
    }
    EXPECT_EQ(r["total_input_tokens"].get<size_t>(), in_sum);
    const double duration = num(r, "duration");
    ASSERT_GT(duration, 0.0);
    EXPECT_NEAR(num(r, "request_throughput") * duration, static_cast<double>(n), 1e-6 * n);
    EXPECT_NEAR(num(r, "output_throughput") * duration, static_cast<double>(n * out_len), 1e-6 * n * out_len);
    EXPECT_NEAR(num(r, "total_token_throughput") * duration, static_cast<double>(in_sum + n * out_len),
                1e-6 * (in_sum + n * out_len));
    for (const std::string m : {"ttft", "tpot", "itl", "e2el"}) {
        EXPECT_GE(num(r, "mean_" + m + "_ms"), 0.0) << m;
        EXPECT_GE(num(r, "std_" + m + "_ms"), 0.0) << m;
        EXPECT_LE(num(r, "median_" + m + "_ms"), num(r, "p90_" + m + "_ms")) << m;
        EXPECT_LE(num(r, "p90_" + m + "_ms"), num(r, "p99_" + m + "_ms")) << m;
    }
    EXPECT_GT(num(r, "mean_ttft_ms"), 0.0);
    // The first token comes before the end; the mean latency is TTFT plus (out_len - 1) TPOTs on average; the
    // slowest request ends within the run.
    EXPECT_LE(num(r, "p99_ttft_ms"), num(r, "p99_e2el_ms"));
    EXPECT_LT(num(r, "mean_ttft_ms"), num(r, "mean_e2el_ms"));
    EXPECT_NEAR(num(r, "mean_e2el_ms"), num(r, "mean_ttft_ms") + (out_len - 1) * num(r, "mean_tpot_ms"),
                1e-6 * num(r, "mean_e2el_ms"));
    EXPECT_LE(num(r, "p99_e2el_ms"), duration * 1000.0);
}

std::vector<std::string> bench_args(const demo_http_server& s, int prompts, int in, int out) {
    return {"bench",
            "serve",
            "--model",
            s.model(),
            "--num-prompts",
            std::to_string(prompts),
            "--random-input-len",
            std::to_string(in),
            "--random-output-len",
            std::to_string(out),
            "--max-concurrency",
            "3",
            "--seed",
            "11",
            "--no-progress"};
}

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

TEST(BenchHttp, BothEndpointTypesAndSideBySideWithZeroMq) {
    demo_http_server s({"--api-key", "k3y"});
    ASSERT_TRUE(s.proc.running());
    constexpr int kPrompts = 5, kIn = 12, kOut = 6;
    const auto base = bench_args(s, kPrompts, kIn, kOut);

    // /v1/completions: the prompts are the token ids, so their lengths are exact.
    const std::string completions = s.dir / "completions.json";
    ASSERT_EQ(run_zmoe(base +
                       std::vector<std::string>{"--base-url", s.base_url(), "--api-key", "k3y", "--json", completions}),
              0);
    const auto c = read_json(completions);
    check_pass(c, kPrompts, kIn, kOut);
    EXPECT_EQ(c["backend"].get<std::string>(), "openai");
    EXPECT_EQ(c["base_url"].get<std::string>(), s.base_url());
    EXPECT_EQ(c["endpoint_type"].get<std::string>(), "completions");
    EXPECT_TRUE(c["http_keep_alive"].get<bool>());
    EXPECT_EQ(c["served_model_name"].get<std::string>(), "demo");  // the first of GET /v1/models
    EXPECT_FALSE(c.contains("endpoint"));
    EXPECT_FALSE(c.contains("zmq"));
    EXPECT_FALSE(c.contains("decode_steps"));  // no ZeroMQ endpoint given: the server's metrics were not read

    // /v1/chat/completions: text prompts, random ids decoded by the model's tokenizer to kIn tokens of content.
    const std::string chat = s.dir / "chat.json";
    ASSERT_EQ(run_zmoe(base + std::vector<std::string>{"--base-url", s.base_url(), "--endpoint-type", "chat",
                                                       "--api-key", "k3y", "--json", chat}),
              0);
    const auto h = read_json(chat);
    check_pass(h, kPrompts, kIn, kOut);
    EXPECT_EQ(h["backend"].get<std::string>(), "openai-chat");
    EXPECT_EQ(h["endpoint_type"].get<std::string>(), "chat");

    // Both doors in one run, on the same prompts: a "zmq" and an "http" object, each a full result, the served
    // decode steps read over ZeroMQ for both; a connection per request this time.
    const std::string both = s.dir / "both.json";
    ASSERT_EQ(run_zmoe(base + std::vector<std::string>{"--endpoint", s.endpoint(), "--base-url", s.base_url(),
                                                       "--api-key", "k3y", "--no-http-keep-alive", "--json", both}),
              0);
    const auto b = read_json(both);
    ASSERT_TRUE(b.contains("zmq") && b.contains("http")) << b.dump();
    EXPECT_EQ(b["backend"].get<std::string>(), "zmoe");
    EXPECT_EQ(b["endpoint"].get<std::string>(), s.endpoint());
    EXPECT_FALSE(b["http_keep_alive"].get<bool>());
    EXPECT_FALSE(b.contains("completed"));  // per pass, not at the top
    check_pass(b["zmq"], kPrompts, kIn, kOut);
    check_pass(b["http"], kPrompts, kIn, kOut);
    EXPECT_EQ(b["zmq"]["input_lens"], b["http"]["input_lens"]);
    for (const char* path : {"zmq", "http"}) {
        EXPECT_GT(num(b[path], "decode_steps"), 0.0) << path;
        EXPECT_LE(num(b[path], "decode_tokens"), static_cast<double>(kPrompts * kOut)) << path;
    }

    // The same over a sweep of concurrency caps (bench sweep): one result per cap, each with both passes.
    const std::string sweep = s.dir / "sweep.json";
    ASSERT_EQ(run_zmoe({"bench",
                        "sweep",
                        "--model",
                        s.model(),
                        "--endpoint",
                        s.endpoint(),
                        "--base-url",
                        s.base_url(),
                        "--api-key",
                        "k3y",
                        "--num-prompts",
                        "3",
                        "--random-input-len",
                        "8",
                        "--random-output-len",
                        "4",
                        "--concurrency",
                        "1,3",
                        "--no-progress",
                        "--json",
                        sweep}),
              0);
    // bench serve --max-concurrency as a list: the same sweep, --num-prompts requests at each cap.
    const std::string listed = s.dir / "listed.json";
    ASSERT_EQ(run_zmoe({"bench",
                        "serve",
                        "--model",
                        s.model(),
                        "--endpoint",
                        s.endpoint(),
                        "--base-url",
                        s.base_url(),
                        "--api-key",
                        "k3y",
                        "--num-prompts",
                        "3",
                        "--random-input-len",
                        "8",
                        "--random-output-len",
                        "4",
                        "--max-concurrency",
                        "1,3",
                        "--no-progress",
                        "--json",
                        listed}),
              0);
    for (const std::string& file : {sweep, listed}) {
        const auto w = read_json(file);
        ASSERT_EQ(w["results"].size(), 2u) << file;
        EXPECT_EQ(w["concurrency"], nlohmann::json::array({1, 3})) << file;
        EXPECT_EQ(w["results"][0]["max_concurrency"].get<int>(), 1);
        EXPECT_EQ(w["results"][1]["max_concurrency"].get<int>(), 3);
        for (const auto& r : w["results"]) {
            check_pass(r["zmq"], 3, 8, 4);
            check_pass(r["http"], 3, 8, 4);
        }
    }
}

TEST(BenchHttp, FailedRequestsAreCountedWithTheirStatusAndBody) {
    demo_http_server s({"--api-key", "k3y"});
    ASSERT_TRUE(s.proc.running());
    // A wrong key: every request is answered 401; the run fails (exit 1) and says why for each request.
    const std::string json = s.dir / "unauthorized.json";
    EXPECT_EQ(
        run_zmoe(bench_args(s, 4, 8, 3) + std::vector<std::string>{"--base-url", s.base_url(), "--api-key", "wrong",
                                                                   "--served-model-name", "demo", "--json", json}),
        1);
    const auto r = read_json(json);
    EXPECT_EQ(r["completed"].get<int>(), 0);
    EXPECT_EQ(r["failed"].get<int>(), 4);
    EXPECT_EQ(r["total_output_tokens"].get<int>(), 0);
    ASSERT_EQ(r["errors"].size(), 4u);
    for (const auto& e : r["errors"]) {
        const std::string text = e.get<std::string>();
        EXPECT_EQ(text.rfind("HTTP 401: ", 0), 0u) << text;
        EXPECT_NE(text.find("\"error\""), std::string::npos) << text;  // the OpenAI error object the server sent
    }
}

TEST(BenchHttp, BadOptionsAreRefusedBeforeSending) {
    // No server needed: the options are checked first.
    EXPECT_NE(run_zmoe({"bench", "serve", "--vocab-size", "100", "--base-url", "https://127.0.0.1:1"}), 0);
    EXPECT_NE(run_zmoe({"bench", "serve", "--vocab-size", "100", "--base-url", "127.0.0.1:1"}), 0);
    EXPECT_NE(run_zmoe({"bench", "serve", "--vocab-size", "100", "--base-url", "http://127.0.0.1:99999"}), 0);
    EXPECT_NE(run_zmoe({"bench", "serve", "--vocab-size", "100", "--base-url", "http://127.0.0.1:1", "--endpoint-type",
                        "embeddings"}),
              0);
    // Chat prompts are text: without a tokenizer there is none to write them with.
    EXPECT_NE(run_zmoe({"bench", "serve", "--vocab-size", "100", "--base-url", "http://127.0.0.1:1", "--endpoint-type",
                        "chat", "--ready-timeout", "0"}),
              0);
    // An option of the HTTP pass without --base-url would be ignored: refused.
    EXPECT_NE(run_zmoe({"bench", "serve", "--vocab-size", "100", "--endpoint-type", "chat"}), 0);
    EXPECT_NE(run_zmoe({"bench", "serve", "--vocab-size", "100", "--no-http-keep-alive"}), 0);
    // Two passes cannot share one plot.
    EXPECT_NE(run_zmoe({"bench", "sweep", "--vocab-size", "100", "--endpoint", "tcp://127.0.0.1:1", "--base-url",
                        "http://127.0.0.1:1", "--plot", "/tmp/never.png"}),
              0);
}

}  // namespace
