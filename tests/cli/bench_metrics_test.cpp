// The statistics of `zmoe bench`: percentiles as numpy computes them, and a summary consistent with its records.

#include "cli/bench_metrics.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "cli/bench_plot.hpp"

using zmoe::cli::bench_request_record;

TEST(BenchMetrics, PercentileInterpolatesBetweenClosestRanks) {
    // numpy.percentile's default ("linear"): rank p/100 * (n-1), interpolated.
    std::mt19937 rng(3);
    for (int n : {1, 2, 5, 100}) {
        std::vector<double> v(n);
        for (auto& x : v) x = std::uniform_real_distribution<double>(0, 10)(rng);
        auto sorted = v;
        std::sort(sorted.begin(), sorted.end());
        EXPECT_DOUBLE_EQ(zmoe::cli::percentile(v, 0), sorted.front());
        EXPECT_DOUBLE_EQ(zmoe::cli::percentile(v, 100), sorted.back());
        for (double p : {25.0, 50.0, 90.0, 99.0}) {
            const double rank = p / 100.0 * (n - 1);
            const size_t lo = static_cast<size_t>(rank);
            const double expect =
                lo + 1 < sorted.size() ? sorted[lo] + (sorted[lo + 1] - sorted[lo]) * (rank - lo) : sorted[lo];
            EXPECT_NEAR(zmoe::cli::percentile(v, p), expect, 1e-12) << n << " " << p;
        }
    }
    EXPECT_DOUBLE_EQ(zmoe::cli::percentile({}, 50), 0.0);
    EXPECT_DOUBLE_EQ(zmoe::cli::percentile({4, 1, 3, 2}, 50), 2.5);
}

TEST(BenchMetrics, SummaryCountsOnlyCompletedRequests) {
    std::vector<bench_request_record> rs(3);
    rs[0] = {.input_len = 10,
             .output_len = 4,
             .success = true,
             .error = {},
             .prompt_tokens = 10,
             .output_tokens = 4,
             .ttft_s = 0.1,
             .latency_s = 0.4,
             .itl_s = {0.1, 0.1, 0.1}};
    rs[1] = {.input_len = 20,
             .output_len = 2,
             .success = true,
             .error = {},
             .prompt_tokens = 20,
             .output_tokens = 2,
             .ttft_s = 0.3,
             .latency_s = 0.5,
             .itl_s = {0.2}};
    rs[2] = {.input_len = 30,
             .output_len = 5,
             .success = false,
             .error = "boom",
             .prompt_tokens = 0,
             .output_tokens = 0,
             .ttft_s = 0,
             .latency_s = 0,
             .itl_s = {}};
    const auto s = zmoe::cli::bench_summary(rs, 2.0, {90, 99.5});
    EXPECT_EQ(s["completed"].get<int>(), 2);
    EXPECT_EQ(s["failed"].get<int>(), 1);
    EXPECT_EQ(s["total_input_tokens"].get<int>(), 30);
    EXPECT_EQ(s["total_output_tokens"].get<int>(), 6);
    EXPECT_DOUBLE_EQ(s["request_throughput"].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ(s["output_throughput"].get<double>(), 3.0);
    EXPECT_DOUBLE_EQ(s["total_token_throughput"].get<double>(), 18.0);
    EXPECT_NEAR(s["mean_ttft_ms"].get<double>(), 200.0, 1e-9);
    // TPOT: (0.4 - 0.1) / 3 and (0.5 - 0.3) / 1.
    EXPECT_NEAR(s["mean_tpot_ms"].get<double>(), (100.0 + 200.0) / 2, 1e-9);
    EXPECT_NEAR(s["mean_itl_ms"].get<double>(), 125.0, 1e-9);
    EXPECT_NEAR(s["median_e2el_ms"].get<double>(), 450.0, 1e-9);
    EXPECT_TRUE(s.contains("p99.5_itl_ms"));
    EXPECT_TRUE(s.contains("p90_tpot_ms"));
    EXPECT_EQ(s["errors"][2].get<std::string>(), "boom");
    EXPECT_EQ(s["output_lens"][2].get<int>(), 0);
    const auto table = zmoe::cli::bench_summary_table(s, {90, 99.5});
    EXPECT_NE(table.find("Successful requests:"), std::string::npos);
    EXPECT_NE(table.find("P99.5 ITL (ms):"), std::string::npos);
}

TEST(BenchPlot, TickStepsAreOneTwoOrFiveTimesAPowerOfTen) {
    for (double max : {0.37, 7.0, 13.0, 980.0, 12345.0}) {
        const double step = zmoe::cli::nice_tick_step(max, 6);
        const double mantissa = step / std::pow(10.0, std::floor(std::log10(step)));
        EXPECT_TRUE(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 || std::abs(mantissa - 5) < 1e-9)
            << max;
        EXPECT_GE(step * 6, max);        // six steps reach the maximum ...
        EXPECT_LT(step * 6, max * 5.1);  // ... without overshooting it by more than one mantissa jump
    }
}

// The engine core's served-step counters, before and after a run: the summary is their difference.
TEST(BenchMetrics, ServedStepsSummaryIsTheRunsDifference) {
    auto metrics = [](double steps, double tokens, double served_ms, double floor_ms, double wait_ms, double sched_n,
                      double sched_sum) {
        nlohmann::json m;
        m["engine_core"]["counters"] = {{"decode_steps", steps},
                                        {"decode_tokens", tokens},
                                        {"decode_served_step_ms", served_ms},
                                        {"decode_floor_step_ms", floor_ms},
                                        {"decode_worker_wait_ms", wait_ms},
                                        {"served_step_ms", served_ms + 100},
                                        {"floor_step_ms", floor_ms + 10}};
        m["engine_core"]["gauges"] = {{"copy_bandwidth_bytes_per_second{rank=\"0\"}", 4e12},
                                      {"copy_bandwidth_bytes_per_second{rank=\"1\"}", 3e12}};
        m["engine_core"]["histograms"] = {{"schedule_ms", {{"count", sched_n}, {"sum", sched_sum}}},
                                          {"step_message_bytes", {{"count", sched_n}, {"sum", 1000 * sched_n}}}};
        return m;
    };
    const auto before = metrics(10, 640, 200, 100, 1, 12, 6);
    // 100 more decode steps of 64 tokens in 2 000 ms, floor 1 000 ms; 110 more steps scheduled in 11 ms.
    const auto after = metrics(110, 7040, 2200, 1100, 6, 122, 17);
    const auto s = zmoe::cli::served_steps_summary(before, after);
    EXPECT_DOUBLE_EQ(s["decode_steps"].get<double>(), 100);
    EXPECT_DOUBLE_EQ(s["decode_tokens"].get<double>(), 6400);
    EXPECT_DOUBLE_EQ(s["mean_decode_step_ms"].get<double>(), 20);
    EXPECT_DOUBLE_EQ(s["decode_output_throughput"].get<double>(), 3200);
    EXPECT_DOUBLE_EQ(s["mean_floor_decode_step_ms"].get<double>(), 10);
    EXPECT_DOUBLE_EQ(s["floor_decode_output_throughput"].get<double>(), 6400);
    EXPECT_DOUBLE_EQ(s["decode_floor_fraction"].get<double>(), 0.5);
    EXPECT_DOUBLE_EQ(s["copy_bandwidth_bytes_per_s"].get<double>(), 3e12);  // the slowest worker
    EXPECT_DOUBLE_EQ(s["mean_decode_worker_wait_ms"].get<double>(), 0.05);
    EXPECT_DOUBLE_EQ(s["served_step_s"].get<double>(), 2.0);
    EXPECT_DOUBLE_EQ(s["floor_step_s"].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ(s["mean_schedule_ms"].get<double>(), 0.1);
    EXPECT_DOUBLE_EQ(s["mean_step_message_bytes"].get<double>(), 1000);
    // The table shows the floor beside the served figure.
    nlohmann::ordered_json summary = zmoe::cli::bench_summary({}, 1.0, {});
    for (const auto& [k, v] : s.items()) summary[k] = v;
    const std::string table = zmoe::cli::bench_summary_table(summary, {});
    EXPECT_NE(table.find("Decode output throughput (tok/s):"), std::string::npos) << table;
    EXPECT_NE(table.find("Floor decode throughput (tok/s):"), std::string::npos) << table;

    // No decode step in the run (or no metrics at all): nothing to report.
    EXPECT_TRUE(zmoe::cli::served_steps_summary(after, after).empty());
    EXPECT_TRUE(zmoe::cli::served_steps_summary(nlohmann::json(), nlohmann::json::object()).empty());
    // No bandwidth reported: the served figures without a floor.
    auto no_bw = after;
    no_bw["engine_core"]["gauges"] = nlohmann::json::object();
    const auto t = zmoe::cli::served_steps_summary(before, no_bw);
    EXPECT_DOUBLE_EQ(t["decode_output_throughput"].get<double>(), 3200);
    EXPECT_FALSE(t.contains("floor_decode_output_throughput"));
}

// Expert-parallel runs report throughput per GPU: the engine core's ranks are its "workers" gauge.
TEST(BenchMetrics, PerGpuThroughputsDivideByTheEngineRanks) {
    nlohmann::json m;
    m["engine_core"]["gauges"] = {{"workers", 4}, {"workers_alive", 3}, {"requests_running{rank=\"0\"}", 5}};
    EXPECT_EQ(zmoe::cli::engine_num_ranks(m), 4);
    EXPECT_EQ(zmoe::cli::engine_num_ranks(nlohmann::json::object()), 0);

    nlohmann::ordered_json r;
    r["output_throughput"] = 8000.0;
    r["total_token_throughput"] = 16000.0;
    r["decode_output_throughput"] = 10000.0;
    const auto p = zmoe::cli::per_gpu_throughputs(r, 4);
    EXPECT_EQ(p["num_gpus"].get<int32_t>(), 4);
    EXPECT_DOUBLE_EQ(p["output_throughput_per_gpu"].get<double>(), 2000);
    EXPECT_DOUBLE_EQ(p["total_token_throughput_per_gpu"].get<double>(), 4000);
    EXPECT_DOUBLE_EQ(p["decode_output_throughput_per_gpu"].get<double>(), 2500);
    EXPECT_FALSE(p.contains("floor_decode_output_throughput_per_gpu"));  // not in the result: not made up
    EXPECT_TRUE(zmoe::cli::per_gpu_throughputs(r, 0).empty());

    // The summary table shows them.
    nlohmann::ordered_json summary = zmoe::cli::bench_summary({}, 1.0, {});
    for (const auto& [k, v] : p.items()) summary[k] = v;
    const std::string table = zmoe::cli::bench_summary_table(summary, {});
    EXPECT_NE(table.find("Output token throughput per GPU (tok/s):"), std::string::npos) << table;
}
