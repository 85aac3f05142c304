#include "gateway/serving_metrics.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace zmoe::gateway {
namespace {

double sample(const std::string& text, const std::string& series) {
    const size_t p = text.find("\n" + series + " ");
    return p == std::string::npos ? -1.0 : std::atof(text.c_str() + p + series.size() + 2);
}

TEST(PromHistogram, BoundsAreInclusiveUpperEdges) {
    prom_histogram h({0.1, 1.0});
    h.observe(0.1);
    h.observe(0.5);
    h.observe(1.0);
    h.observe(7.0, 2);
    EXPECT_EQ(h.counts, (std::vector<uint64_t>{1, 2, 2}));
    EXPECT_EQ(h.count, 5u);
    EXPECT_DOUBLE_EQ(h.sum, 0.1 + 0.5 + 1.0 + 14.0);
}

TEST(ServingMetrics, QueueTimeComesFromTheEnginesHistogramOnItsBounds) {
    // The engine's JSON: sparse cumulative buckets in ms (1 at <= 2 ms, 3 at <= 50 ms), and one past 500 s.
    engine_gauges e;
    e.queue_time_buckets_ms = {{2.0, 1}, {50.0, 3}};
    e.queue_time_count = 4;
    e.queue_time_sum_ms = 1.5 + 20 + 40 + 600000;
    const prom_histogram h = queue_time_histogram(e);
    EXPECT_EQ(h.count, 4u);
    EXPECT_DOUBLE_EQ(h.sum, e.queue_time_sum_ms / 1000);
    EXPECT_EQ(h.counts.back(), 1u) << "past the last bound";
    const std::string t = serving_metrics().prometheus("demo", e);
    const std::string l = R"(model_name="demo")";
    EXPECT_EQ(sample(t, "vllm:request_queue_time_seconds_bucket{" + l + R"(,le="0.001"})"), 0);
    EXPECT_EQ(sample(t, "vllm:request_queue_time_seconds_bucket{" + l + R"(,le="0.002"})"), 1);
    EXPECT_EQ(sample(t, "vllm:request_queue_time_seconds_bucket{" + l + R"(,le="0.02"})"), 1);
    EXPECT_EQ(sample(t, "vllm:request_queue_time_seconds_bucket{" + l + R"(,le="0.05"})"), 3);
    EXPECT_EQ(sample(t, "vllm:request_queue_time_seconds_bucket{" + l + R"(,le="500"})"), 3);
    EXPECT_EQ(sample(t, "vllm:request_queue_time_seconds_bucket{" + l + R"(,le="+Inf"})"), 4);
    EXPECT_EQ(sample(t, "vllm:request_queue_time_seconds_count{" + l + "}"), 4);
    // No queue time observed yet: the family is left out.
    EXPECT_EQ(serving_metrics().prometheus("demo", {}).find("vllm:request_queue_time_seconds"), std::string::npos);
}

TEST(ServingMetrics, ExportsVllmFamiliesWithCumulativeBuckets) {
    serving_metrics m;
    m.observe_ttft(0.03);
    m.observe_ttft(3.0);
    m.observe_inter_token(0.09, 3);  // three gaps of 0.03 s
    m.observe_finished(1.2, 10, 4);
    m.observe_finished(0.2, 5, 1);
    m.count_finished_choice(finish_reason::stop);
    m.count_finished_choice(finish_reason::length);
    m.count_finished_choice(finish_reason::length);
    const std::string t = m.prometheus("demo", {.num_running = 2, .num_waiting = 1, .kv_cache_usage = 0.5});
    const std::string l = R"(model_name="demo")";
    EXPECT_NE(t.find("# TYPE vllm:time_to_first_token_seconds histogram\n"), std::string::npos);
    EXPECT_EQ(sample(t, "vllm:time_to_first_token_seconds_bucket{" + l + R"(,le="0.04"})"), 1);
    EXPECT_EQ(sample(t, "vllm:time_to_first_token_seconds_bucket{" + l + R"(,le="5"})"), 2);
    EXPECT_EQ(sample(t, "vllm:time_to_first_token_seconds_bucket{" + l + R"(,le="+Inf"})"), 2);
    EXPECT_EQ(sample(t, "vllm:time_to_first_token_seconds_count{" + l + "}"), 2);
    EXPECT_EQ(sample(t, "vllm:inter_token_latency_seconds_count{" + l + "}"), 3);
    EXPECT_EQ(sample(t, "vllm:inter_token_latency_seconds_bucket{" + l + R"(,le="0.025"})"), 0);
    EXPECT_EQ(sample(t, "vllm:inter_token_latency_seconds_bucket{" + l + R"(,le="0.05"})"), 3);
    EXPECT_EQ(sample(t, "vllm:e2e_request_latency_seconds_bucket{" + l + R"(,le="0.3"})"), 1);
    EXPECT_EQ(sample(t, "vllm:e2e_request_latency_seconds_bucket{" + l + R"(,le="1.5"})"), 2);
    EXPECT_EQ(sample(t, "vllm:request_prompt_tokens_sum{" + l + "}"), 15);
    EXPECT_EQ(sample(t, "vllm:request_generation_tokens_bucket{" + l + R"(,le="1"})"), 1);
    EXPECT_EQ(sample(t, "vllm:request_generation_tokens_bucket{" + l + R"(,le="5"})"), 2);
    EXPECT_EQ(sample(t, "vllm:prompt_tokens_total{" + l + "}"), 15);
    EXPECT_EQ(sample(t, "vllm:generation_tokens_total{" + l + "}"), 5);
    EXPECT_EQ(sample(t, "vllm:request_success_total{" + l + R"(,finished_reason="length"})"), 2);
    EXPECT_EQ(sample(t, "vllm:request_success_total{" + l + R"(,finished_reason="stop"})"), 1);
    EXPECT_EQ(sample(t, "vllm:request_success_total{" + l + R"(,finished_reason="abort"})"), 0);
    EXPECT_EQ(sample(t, "vllm:num_requests_running{" + l + "}"), 2);
    EXPECT_EQ(sample(t, "vllm:num_requests_waiting{" + l + "}"), 1);
    EXPECT_EQ(sample(t, "vllm:kv_cache_usage_perc{" + l + "}"), 0.5);
    // Unknown engine gauges are left out rather than reported as 0.
    const std::string none = m.prometheus("demo", {});
    EXPECT_EQ(none.find("vllm:kv_cache_usage_perc"), std::string::npos);
    EXPECT_EQ(none.find("vllm:num_requests_running"), std::string::npos);
    // A model name with a quote is escaped.
    EXPECT_NE(m.prometheus("a\"b", {}).find(R"(model_name="a\"b")"), std::string::npos);
}

}  // namespace
}  // namespace zmoe::gateway
