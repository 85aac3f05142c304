#include "engine_core/stats_line.hpp"

#include <gtest/gtest.h>

using namespace std::chrono_literals;

namespace {

zmoe::stats_sample sample(std::chrono::steady_clock::time_point at, double prompt, double generated, int64_t running,
                          int64_t waiting, int64_t kv_used) {
    return {.at = at,
            .prompt_tokens = prompt,
            .generation_tokens = generated,
            .preemptions = 0,
            .num_running = running,
            .num_waiting = waiting,
            .kv_blocks_used = kv_used,
            .kv_blocks_total = 200,
            .prefix_cache_queries = prompt,
            .prefix_cache_hits = prompt / 4};
}

}  // namespace

TEST(StatsLine, ThroughputsOverTheIntervalAndKvUsage) {
    zmoe::stats_line s;
    const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
    EXPECT_FALSE(s.next(sample(t0, 1000, 50, 0, 0, 0)));  // the first sample only starts the interval
    // 5 s later: 500 more prompt tokens, 2000 more generated -> 100 and 400 tok/s; 50 of 200 blocks = 25 %.
    const auto line = s.next(sample(t0 + 5s, 1500, 2050, 8, 3, 50));
    ASSERT_TRUE(line);
    EXPECT_NE(line->find("prompt throughput 100.0 tok/s"), std::string::npos) << *line;
    EXPECT_NE(line->find("generation throughput 400.0 tok/s"), std::string::npos) << *line;
    EXPECT_NE(line->find("running 8, waiting 3"), std::string::npos) << *line;
    EXPECT_NE(line->find("KV cache 25.0% (50 of 200 blocks)"), std::string::npos) << *line;
    // 500 prompt tokens looked up in the interval, 125 of them cached.
    EXPECT_NE(line->find("prefix cache hit rate 25.0%"), std::string::npos) << *line;
}

TEST(StatsLine, AnIdleServerLogsOneIdleLine) {
    zmoe::stats_line s;
    const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
    EXPECT_FALSE(s.next(sample(t0, 0, 0, 0, 0, 0)));
    EXPECT_FALSE(s.next(sample(t0 + 5s, 0, 0, 0, 0, 0)));  // idle from the start: nothing to say
    EXPECT_TRUE(s.next(sample(t0 + 10s, 10, 20, 1, 0, 2)));
    const auto idle = s.next(sample(t0 + 15s, 10, 20, 0, 0, 0));  // the first idle interval after work
    ASSERT_TRUE(idle);
    EXPECT_NE(idle->find("generation throughput 0.0 tok/s"), std::string::npos) << *idle;
    EXPECT_FALSE(s.next(sample(t0 + 20s, 10, 20, 0, 0, 0)));
    EXPECT_FALSE(s.next(sample(t0 + 25s, 10, 20, 0, 0, 0)));
    EXPECT_TRUE(s.next(sample(t0 + 30s, 10, 20, 0, 1, 0)));  // a waiting request is not idle
}
