// The datasets of `zmoe bench serve` without a server: vLLM's prefix-repetition prompts, the order in which a
// multi-turn run's requests may go and what each turn's prompt carries, and the summaries read from the records and
// the server's metrics (TTFT per turn, the prefix cache, the per-rank load).

#include "cli/bench_workload.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "base/error.hpp"
#include "cli/bench_metrics.hpp"
#include "cli/bench_serve.hpp"
#include "cli/openai_stream.hpp"

namespace {

using zmoe::cli::bench_dataset;
using zmoe::cli::bench_workload;
using zmoe::cli::serve_bench_params;

serve_bench_params prefix_params(uint32_t num_prompts, uint32_t prefix_len, uint32_t suffix_len,
                                 uint32_t num_prefixes) {
    serve_bench_params p;
    p.dataset = bench_dataset::prefix_repetition;
    p.num_prompts = num_prompts;
    p.prefix_repetition = {
        .prefix_len = prefix_len, .suffix_len = suffix_len, .num_prefixes = num_prefixes, .output_len = 7};
    p.vocab_size = 500;
    p.excluded_ids = {0, 1, 2};
    p.seed = 11;
    return p;
}

TEST(BenchDataset, PrefixRepetitionHasRDistinctPrefixesEachFollowedBySRandomTokens) {
    constexpr uint32_t kP = 24, kS = 9, kR = 4, kN = 14;  // 14 = 4 x 3 + 2: the first two prefixes get one more
    const auto prompts = zmoe::cli::make_bench_prompts(prefix_params(kN, kP, kS, kR));
    ASSERT_EQ(prompts.size(), kN);
    std::map<std::vector<int32_t>, int> prefixes;
    std::set<std::vector<int32_t>> suffixes;
    for (const auto& pr : prompts) {
        ASSERT_EQ(pr.token_ids.size(), kP + kS);
        EXPECT_EQ(pr.output_len, 7u);
        for (int32_t t : pr.token_ids) {
            EXPECT_GE(t, 3);  // bos/eos-like ids are never drawn
            EXPECT_LT(t, 500);
        }
        ++prefixes[std::vector<int32_t>(pr.token_ids.begin(), pr.token_ids.begin() + kP)];
        suffixes.insert(std::vector<int32_t>(pr.token_ids.begin() + kP, pr.token_ids.end()));
    }
    ASSERT_EQ(prefixes.size(), kR);
    std::multiset<int> counts;
    for (const auto& [prefix, n] : prefixes) counts.insert(n);
    EXPECT_EQ(counts, (std::multiset<int>{3, 3, 4, 4}));
    EXPECT_EQ(suffixes.size(), kN);  // every prompt has a suffix of its own
    // Shuffled: the prompts of one prefix are not all in one run.
    bool interleaved = false;
    for (size_t i = 2; i < prompts.size(); ++i)
        if (!std::equal(prompts[i].token_ids.begin(), prompts[i].token_ids.begin() + kP,
                        prompts[i - 1].token_ids.begin()))
            interleaved = true;
    EXPECT_TRUE(interleaved);
    // The same seed, the same prompts; another seed, others.
    const auto again = zmoe::cli::make_bench_prompts(prefix_params(kN, kP, kS, kR));
    for (size_t i = 0; i < kN; ++i) EXPECT_EQ(again[i].token_ids, prompts[i].token_ids);
    auto other = prefix_params(kN, kP, kS, kR);
    other.seed = 12;
    EXPECT_NE(zmoe::cli::make_bench_prompts(other)[0].token_ids, prompts[0].token_ids);
}

TEST(BenchDataset, PrefixRepetitionRefusesFewerPromptsThanPrefixes) {
    EXPECT_THROW(zmoe::cli::make_bench_prompts(prefix_params(3, 8, 8, 4)), zmoe::error);
}

serve_bench_params multi_turn_params(uint32_t conversations, uint32_t turns) {
    serve_bench_params p;
    p.dataset = bench_dataset::multi_turn;
    p.multi_turn = {.num_conversations = conversations,
                    .num_turns = turns,
                    .system_prompt_len = 10,
                    .user_len = 3,
                    .output_len = 4};
    p.vocab_size = 1000;
    p.seed = 5;
    return p;
}

TEST(BenchDataset, MultiTurnPromptsCarryTheHistoryAndTheAnswers) {
    bench_workload w(multi_turn_params(2, 3));
    ASSERT_EQ(w.size(), 6u);
    // Both first turns may go at once (infinite rate); nothing else until an answer ends.
    const auto a = w.pop_ready(0.0), b = w.pop_ready(0.0);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(*a, 0u);
    EXPECT_EQ(*b, 3u);
    EXPECT_FALSE(w.pop_ready(100.0));
    EXPECT_EQ(w.conversation(3), 1);
    EXPECT_EQ(w.turn(3), 0);
    // A shared system prompt of 10 tokens, then 3 user tokens of each conversation's own.
    const auto& p0 = w.prompt(0).token_ids;
    const auto& p3 = w.prompt(3).token_ids;
    ASSERT_EQ(p0.size(), 13u);
    ASSERT_EQ(p3.size(), 13u);
    EXPECT_TRUE(std::equal(p0.begin(), p0.begin() + 10, p3.begin()));
    EXPECT_FALSE(std::equal(p0.begin() + 10, p0.end(), p3.begin() + 10));
    EXPECT_EQ(w.prompt(0).output_len, 4u);

    const std::vector<int32_t> answer = {900, 901, 902, 903};
    EXPECT_TRUE(w.finish(0, true, answer).empty());
    const auto next = w.pop_ready(0.0);
    ASSERT_TRUE(next);
    EXPECT_EQ(*next, 1u);
    const auto& p1 = w.prompt(1).token_ids;
    ASSERT_EQ(p1.size(), 13u + 4u + 3u);
    EXPECT_TRUE(std::equal(p0.begin(), p0.end(), p1.begin()));               // the history ...
    EXPECT_TRUE(std::equal(answer.begin(), answer.end(), p1.begin() + 13));  // ... the model's answer ...
    EXPECT_FALSE(std::equal(p0.begin() + 10, p0.end(), p1.begin() + 17));    // ... new user tokens
    EXPECT_TRUE(w.finish(1, true, {7, 8}).empty());                          // answers of any length
    const auto& p2 = w.prompt(*w.pop_ready(0.0)).token_ids;
    ASSERT_EQ(p2.size(), 20u + 2u + 3u);
    EXPECT_TRUE(std::equal(p1.begin(), p1.end(), p2.begin()));

    // Conversation 1's first turn fails: its later turns are given up, never sent.
    const auto given_up = w.finish(3, false, {});
    EXPECT_EQ(given_up, (std::vector<size_t>{4, 5}));
    EXPECT_TRUE(w.finish(2, true, {1}).empty());  // the last turn queues nothing
    EXPECT_FALSE(w.pop_ready(100.0));
    EXPECT_FALSE(w.has_unsent());
}

TEST(BenchDataset, MultiTurnSameSeedSameUserTokensWhateverTheAnswers) {
    bench_workload a(multi_turn_params(1, 2)), b(multi_turn_params(1, 2));
    ASSERT_TRUE(a.pop_ready(0) && b.pop_ready(0));
    a.finish(0, true, {1, 2, 3, 4});
    b.finish(0, true, {5, 6});
    a.pop_ready(0);
    b.pop_ready(0);
    const auto& pa = a.prompt(1).token_ids;
    const auto& pb = b.prompt(1).token_ids;
    EXPECT_TRUE(std::equal(pa.end() - 3, pa.end(), pb.end() - 3));
}

TEST(BenchDataset, NextTurnGoesBeforeANewConversationAndArrivalsAreKept) {
    auto p = multi_turn_params(3, 2);
    p.request_rate = 2.0;  // Poisson starts of the conversations
    bench_workload w(p);
    const auto first = w.pop_ready(0.0);  // the first arrival is at 0
    ASSERT_TRUE(first);
    const double second_at = w.next_arrival_s();
    ASSERT_GT(second_at, 0.0);
    EXPECT_FALSE(w.pop_ready(second_at / 2));
    w.finish(*first, true, {1});
    // At the second arrival both a new conversation and conversation 0's next turn may go: the turn first.
    const auto a = w.pop_ready(second_at), b = w.pop_ready(second_at);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(*a, 1u);
    EXPECT_EQ(*b, 2u);
    // A stall gives up everything not sent.
    EXPECT_EQ(w.give_up_unsent(), (std::vector<size_t>{3, 4, 5}));
    EXPECT_FALSE(w.has_unsent());
}

TEST(BenchDataset, RandomDatasetGoesInOrder) {
    serve_bench_params p;
    p.num_prompts = 3;
    p.input_len = 5;
    p.output_len = 2;
    p.vocab_size = 100;
    bench_workload w(p);
    for (size_t i = 0; i < 3; ++i) {
        const auto next = w.pop_ready(0.0);
        ASSERT_TRUE(next);
        EXPECT_EQ(*next, i);
        EXPECT_EQ(w.prompt(i).token_ids.size(), 5u);
        EXPECT_EQ(w.turn(i), -1);
    }
    EXPECT_TRUE(w.finish(0, true, {}).empty());
}

zmoe::cli::bench_request_record turn_record(int32_t conversation, int32_t turn, double ttft_s) {
    zmoe::cli::bench_request_record r;
    r.conversation = conversation;
    r.turn = turn;
    r.ttft_s = ttft_s;
    r.success = true;
    r.sent_s = 1.0;
    r.latency_s = 0.5;
    return r;
}

TEST(BenchSummary, TtftPerTurnAndOverLaterTurns) {
    std::vector<zmoe::cli::bench_request_record> records = {turn_record(0, 0, 0.100), turn_record(0, 1, 0.010),
                                                            turn_record(0, 2, 0.030), turn_record(1, 0, 0.300),
                                                            turn_record(1, 1, 0.020), turn_record(1, 2, 0.040)};
    records.back().success = false;  // a failed turn is left out of the times
    const auto s = zmoe::cli::multi_turn_summary(records, {90});
    ASSERT_EQ(s["ttft_by_turn"].size(), 3u);
    EXPECT_EQ(s["ttft_by_turn"][0]["turn"], 1);
    EXPECT_EQ(s["ttft_by_turn"][0]["completed"], 2);
    EXPECT_DOUBLE_EQ(s["ttft_by_turn"][0]["median_ttft_ms"].get<double>(), 200.0);
    EXPECT_DOUBLE_EQ(s["ttft_by_turn"][0]["p90_ttft_ms"].get<double>(), 280.0);
    EXPECT_EQ(s["ttft_by_turn"][2]["completed"], 1);
    // Turns 2 and 3 together: 10, 20, 30 ms.
    EXPECT_DOUBLE_EQ(s["median_ttft_ms_later_turns"].get<double>(), 20.0);
    EXPECT_DOUBLE_EQ(s["mean_ttft_ms_later_turns"].get<double>(), 20.0);
    EXPECT_EQ(s["turn_ids"], nlohmann::json({0, 1, 2, 0, 1, 2}));
    EXPECT_DOUBLE_EQ(s["end_times"][0].get<double>(), 1.5);
}

TEST(BenchSummary, PrefixCacheHitRateFromTheEngineCoreCounters) {
    const nlohmann::json before = {{"engine_core",
                                    {{"counters",
                                      {{"prefix_cache_queries_total", 100.0},
                                       {"prefix_cache_hits_total", 10.0},
                                       {"prefix_cache_queries_total{rank=\"0\"}", 60.0},
                                       {"prefix_cache_queries_total{rank=\"1\"}", 40.0},
                                       {"prefix_cache_hits_total{rank=\"0\"}", 10.0},
                                       {"prefix_cache_hits_total{rank=\"1\"}", 0.0}}}}}};
    const nlohmann::json after = {{"engine_core",
                                   {{"counters",
                                     {{"prefix_cache_queries_total", 500.0},
                                      {"prefix_cache_hits_total", 310.0},
                                      {"prefix_cache_queries_total{rank=\"0\"}", 260.0},
                                      {"prefix_cache_queries_total{rank=\"1\"}", 240.0},
                                      {"prefix_cache_hits_total{rank=\"0\"}", 160.0},
                                      {"prefix_cache_hits_total{rank=\"1\"}", 150.0}}}}}};
    const auto s = zmoe::cli::prefix_cache_summary(before, after, "", "", {});
    EXPECT_DOUBLE_EQ(s["prefix_cache_queries"].get<double>(), 400.0);
    EXPECT_DOUBLE_EQ(s["prefix_cache_hits"].get<double>(), 300.0);
    EXPECT_DOUBLE_EQ(s["prefix_cache_hit_rate"].get<double>(), 0.75);
    ASSERT_EQ(s["prefix_cache_per_rank"].size(), 2u);
    EXPECT_EQ(s["prefix_cache_per_rank"][1]["rank"], "1");
    EXPECT_DOUBLE_EQ(s["prefix_cache_per_rank"][1]["hit_rate"].get<double>(), 0.75);
    EXPECT_TRUE(s["request_cached_tokens"].is_null());

    // Only rank-labelled series, without _total: their sum.
    const nlohmann::json ranks_only = {{"engine_core",
                                        {{"counters",
                                          {{"prefix_cache_queries{rank=\"0\"}", 30.0},
                                           {"prefix_cache_queries{rank=\"1\"}", 10.0},
                                           {"prefix_cache_hits{rank=\"0\"}", 20.0},
                                           {"prefix_cache_hits{rank=\"1\"}", 0.0}}}}}};
    const auto r = zmoe::cli::prefix_cache_summary(nlohmann::json::object(), ranks_only, "", "", {});
    EXPECT_DOUBLE_EQ(r["prefix_cache_hit_rate"].get<double>(), 0.5);
}

TEST(BenchSummary, PrefixCacheHitRateFromPrometheusAndNullWithoutCounters) {
    const std::string before =
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries\n"
        "# TYPE vllm:prefix_cache_queries_total counter\n"
        "vllm:prefix_cache_queries_total{model_name=\"m\"} 10\n"
        "vllm:prefix_cache_hits_total{model_name=\"m\"} 0\n";
    const std::string after =
        "vllm:prefix_cache_queries_total_extra{model_name=\"m\"} 999\n"  // another family that starts alike
        "vllm:prefix_cache_queries_total{model_name=\"m\"} 110\n"
        "vllm:prefix_cache_hits_total{model_name=\"m\"} 25\n";
    EXPECT_EQ(zmoe::cli::prometheus_value(after, {"vllm:prefix_cache_queries_total"}), 110.0);
    EXPECT_FALSE(zmoe::cli::prometheus_value(after, {"vllm:nothing"}));
    std::vector<zmoe::cli::bench_request_record> records(3);
    for (auto& r : records) {
        r.success = true;
        r.prompt_tokens = 100;
    }
    records[0].cached_tokens = 64;
    records[1].cached_tokens = 0;  // the third did not say
    const auto s = zmoe::cli::prefix_cache_summary({}, {}, before, after, records);
    EXPECT_DOUBLE_EQ(s["prefix_cache_hit_rate"].get<double>(), 0.25);
    EXPECT_DOUBLE_EQ(s["request_cached_tokens"].get<double>(), 64.0);
    EXPECT_DOUBLE_EQ(s["request_cached_token_rate"].get<double>(), 0.32);
    EXPECT_EQ(s["cached_tokens"], nlohmann::json({64, 0, -1}));

    // A server without a prefix cache: every value null ("n/a" on the terminal).
    const auto none = zmoe::cli::prefix_cache_summary({}, {{"engine_core", {{"counters", {{"steps", 5}}}}}},
                                                      "zmoe_steps_total 5\n", "zmoe_steps_total 9\n", {});
    EXPECT_TRUE(none["prefix_cache_queries"].is_null());
    EXPECT_TRUE(none["prefix_cache_hit_rate"].is_null());
    EXPECT_NE(zmoe::cli::workload_summary_table(none, {99}).find("Prefix cache hit rate (%):              n/a"),
              std::string::npos);
}

TEST(BenchSummary, RankLoadCountsARankIdleWhileAnotherQueues) {
    const nlohmann::json samples = nlohmann::json::array({
        {{"t", 0.0}, {"running", {2, 2}}, {"waiting", {0, 0}}},
        {{"t", 0.1}, {"running", {0, 3}}, {"waiting", {0, 2}}},  // rank 0 idle, rank 1 queues
        {{"t", 0.2}, {"running", {0, 1}}, {"waiting", {0, 0}}},  // idle, but nobody waits
    });
    const auto s = zmoe::cli::rank_load_summary(samples);
    EXPECT_EQ(s["rank_samples"], 3);
    ASSERT_EQ(s["ranks"].size(), 2u);
    EXPECT_EQ(s["ranks"][0]["idle_samples"], 2);
    EXPECT_EQ(s["ranks"][0]["idle_while_others_wait_samples"], 1);
    EXPECT_EQ(s["ranks"][1]["idle_while_others_wait_samples"], 0);
    EXPECT_DOUBLE_EQ(s["ranks"][1]["mean_running"].get<double>(), 2.0);
    EXPECT_DOUBLE_EQ(s["ranks"][1]["max_waiting"].get<double>(), 2.0);
    EXPECT_DOUBLE_EQ(s["idle_while_others_wait_fraction"].get<double>(), 1.0 / 3.0);
    EXPECT_TRUE(zmoe::cli::rank_load_summary(nlohmann::json::array()).empty());
}

TEST(OpenAiStreamRecorder, KeepsTheAnswerTextAndTheCachedTokens) {
    zmoe::cli::bench_request_record rec;
    rec.output_len = 2;
    zmoe::cli::openai_stream_recorder r(rec);
    r.on_event({.type = "message", .data = R"({"choices":[{"index":0,"text":"Hel"}]})"}, 0.1);
    r.on_event({.type = "message", .data = R"({"choices":[{"index":0,"text":"lo"}]})"}, 0.2);
    r.on_event({.type = "message",
                .data = R"({"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2,)"
                        R"("prompt_tokens_details":{"cached_tokens":32}}})"},
               0.3);
    r.on_event({.type = "message", .data = "[DONE]"}, 0.3);
    r.finish(0.3, "");
    EXPECT_TRUE(rec.success) << rec.error;
    EXPECT_EQ(r.text(), "Hello");
    EXPECT_EQ(rec.cached_tokens, 32);
    EXPECT_EQ(rec.prompt_tokens, 40u);
}

}  // namespace
