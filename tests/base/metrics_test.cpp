#include "base/metrics.hpp"

#include <gtest/gtest.h>

TEST(Metrics, CountersGaugesHistogramsToJson) {
    zmoe::metrics_registry m;
    m.counter_add("requests");
    m.counter_add("requests", 2);
    m.gauge_set("kv_blocks_used{rank=\"1\"}", 7);
    for (int i = 1; i <= 100; ++i) m.observe("step_ms", i);
    const auto j = m.to_json();
    EXPECT_EQ(j["counters"]["requests"].get<double>(), 3);
    EXPECT_EQ(j["gauges"]["kv_blocks_used{rank=\"1\"}"].get<double>(), 7);
    const auto& h = j["histograms"]["step_ms"];
    EXPECT_EQ(h["count"].get<uint64_t>(), 100u);
    EXPECT_DOUBLE_EQ(h["sum"].get<double>(), 5050);
    EXPECT_DOUBLE_EQ(h["max"].get<double>(), 100);
    // p50 of 1..100 lies in the (20, 50] bucket, p99 in (50, 100].
    EXPECT_DOUBLE_EQ(h["p50"].get<double>(), 50);
    EXPECT_DOUBLE_EQ(h["p99"].get<double>(), 100);
}

TEST(Metrics, PrometheusKeepsLabelsAndAddsActor) {
    zmoe::metrics_registry m;
    m.counter_add("generation_tokens", 5);
    m.gauge_set("kv_blocks_used{rank=\"0\"}", 3);
    m.observe("ttft_ms", 12);
    const auto text = zmoe::metrics_to_prometheus({{"engine_core", m.to_json()}});
    EXPECT_NE(text.find("zmoe_generation_tokens_total{actor=\"engine_core\"} 5\n"), std::string::npos) << text;
    EXPECT_NE(text.find("zmoe_kv_blocks_used{actor=\"engine_core\",rank=\"0\"} 3\n"), std::string::npos) << text;
    EXPECT_NE(text.find("zmoe_ttft_ms_bucket{actor=\"engine_core\",le=\"20\"} 1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("zmoe_ttft_ms_count{actor=\"engine_core\"} 1\n"), std::string::npos) << text;
    const auto table = zmoe::metrics_to_table({{"engine_core", m.to_json()}});
    EXPECT_NE(table.find("generation_tokens"), std::string::npos);
}
