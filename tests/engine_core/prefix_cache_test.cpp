// Prefix caching in the scheduler, against fake workers whose sampled token is a function of the whole sequence read
// back through the block table: a shared block with the wrong content, a block written while another sequence holds
// it, or a wrong start_pos changes the outputs.

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "base/error.hpp"
#include "engine_core/scheduler.hpp"
#include "scheduler_harness.hpp"

namespace zmoe {
namespace {

using testing::harness;
using testing::kVocab;
using testing::reference_output;
using testing::run_outcome;

constexpr int32_t kBlock = 4;

scheduler_config make_config(std::vector<int32_t> blocks, bool async, int32_t budget = 64, int32_t max_seqs = 8) {
    scheduler_config c;
    c.max_num_batched_tokens = budget;
    c.max_num_seqs = max_seqs;
    c.block_size = kBlock;
    c.num_blocks_per_rank = std::move(blocks);
    c.max_model_len = 512;
    c.async_scheduling = async;
    return c;
}

new_request make_request(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens) {
    new_request r;
    r.id = id;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    return r;
}

std::vector<int32_t> tokens_from(uint32_t seed, int32_t n) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t;
    for (int32_t i = 0; i < n; ++i) t.push_back(std::uniform_int_distribution<int32_t>(0, kVocab - 1)(rng));
    return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

void expect_reference(const std::vector<new_request>& reqs, const run_outcome& out) {
    for (const new_request& r : reqs) {
        ASSERT_TRUE(out.tokens.contains(r.id)) << "request " << r.id;
        EXPECT_EQ(out.tokens.at(r.id), reference_output(r)) << "request " << r.id;
    }
}

/// The first scheduled chunk of each request: (start_pos, number of tokens).
struct first_chunks {
    std::map<uint64_t, std::pair<int32_t, int32_t>> of;
    void attach(harness& h) {
        h.on_step = [this](const std::vector<step_request>& steps) {
            for (const step_request& s : steps)
                for (const scheduled_seq& q : s.seqs)
                    of.try_emplace(q.request_id, q.start_pos, static_cast<int32_t>(q.token_ids.size()));
        };
    }
};

/// Requests drawn from a few shared prefixes (system prompts) with their own tails.
std::vector<new_request> shared_prefix_workload(uint32_t seed, int32_t num_requests, int32_t num_prefixes) {
    std::mt19937 rng(seed);
    std::vector<std::vector<int32_t>> prefixes;
    for (int32_t p = 0; p < num_prefixes; ++p)
        prefixes.push_back(tokens_from(seed * 100 + static_cast<uint32_t>(p), 9 + 7 * p));
    std::vector<new_request> reqs;
    for (int32_t i = 0; i < num_requests; ++i) {
        const auto& prefix =
            prefixes[static_cast<size_t>(std::uniform_int_distribution<int32_t>(0, num_prefixes - 1)(rng))];
        const int32_t tail = std::uniform_int_distribution<int32_t>(0, 9)(rng);
        new_request r = make_request(500 + static_cast<uint64_t>(i),
                                     concat(prefix, tokens_from(seed * 1000 + static_cast<uint32_t>(i), tail)),
                                     std::uniform_int_distribution<int32_t>(1, 12)(rng));
        r.stop_token_ids = {3};
        reqs.push_back(std::move(r));
    }
    return reqs;
}

TEST(PrefixCache, ASecondRequestSkipsTheCachedPrefix) {
    for (const bool async : {false, true}) {
        harness h(make_config({64}, async));
        first_chunks chunks;
        chunks.attach(h);
        const std::vector<int32_t> prefix = tokens_from(1, 16);
        const new_request a = make_request(1, concat(prefix, {5, 6}), 6);
        h.add(a);
        h.run();
        const new_request b = make_request(2, concat(prefix, {7, 8, 9, 10}), 6);
        h.add(b);
        // A prompt of whole blocks that is all cached still computes its last block (its last token gives the sample).
        const new_request c = make_request(3, prefix, 4);
        const run_outcome out = h.run({{0, {c}}});
        expect_reference({a, b, c}, out);
        EXPECT_EQ(chunks.of.at(1), std::make_pair(0, 18));
        EXPECT_EQ(chunks.of.at(2), std::make_pair(16, 4)) << "async " << async;
        EXPECT_EQ(chunks.of.at(3), std::make_pair(12, 4));
        EXPECT_EQ(out.cached_tokens.at(1), 0);
        EXPECT_EQ(out.cached_tokens.at(2), 16);
        EXPECT_EQ(out.cached_tokens.at(3), 12);
        EXPECT_EQ(out.stats.prefix_cache_queries.at(0), 18u + 20u + 16u);
        EXPECT_EQ(out.stats.prefix_cache_hits.at(0), 16u + 12u);
    }
}

TEST(PrefixCache, GeneratedTokensAreCachedForTheNextTurn) {
    harness h(make_config({64}, true));
    first_chunks chunks;
    chunks.attach(h);
    new_request turn1 = make_request(1, tokens_from(2, 10), 11);
    turn1.ignore_eos = true;
    h.add(turn1);
    run_outcome out = h.run();
    // The next turn's prompt: the history (prompt + answer) and new user tokens.
    const std::vector<int32_t> history = concat(turn1.prompt, out.tokens.at(1));
    ASSERT_EQ(history.size(), 21u);
    const new_request turn2 = make_request(2, concat(history, {1, 2, 3}), 5);
    h.add(turn2);
    out = h.run();
    expect_reference({turn2}, out);
    // The 20 tokens whose KV was computed (the last answer token was never fed) make 5 full blocks.
    EXPECT_EQ(chunks.of.at(2).first, 20);
    EXPECT_EQ(out.cached_tokens.at(2), 20);
}

TEST(PrefixCache, SharedPrefixWorkloadMatchesTheReference) {
    for (const bool async : {false, true}) {
        for (const dp_placement placement :
             {dp_placement::cache_aware, dp_placement::least_loaded, dp_placement::round_robin}) {
            scheduler_config cfg = make_config({96, 96, 96}, async, 24, 4);
            cfg.placement = placement;
            harness h(cfg);
            const std::vector<new_request> reqs = shared_prefix_workload(3, 40, 3);
            std::map<int64_t, std::vector<new_request>> arrivals;
            for (size_t i = 0; i < reqs.size(); ++i) arrivals[static_cast<int64_t>(i * 3)].push_back(reqs[i]);
            const run_outcome out = h.run(arrivals);
            expect_reference(reqs, out);
            uint64_t hits = 0;
            for (const uint64_t x : out.stats.prefix_cache_hits) hits += x;
            EXPECT_GT(hits, 0u) << dp_placement_name(placement);
        }
    }
}

TEST(PrefixCache, EvictionAndPreemptionUnderASmallPoolKeepTheOutputs) {
    for (const bool async : {false, true}) {
        harness tiny(make_config({18, 18}, async, 32, 6));
        const std::vector<new_request> reqs = shared_prefix_workload(4, 40, 4);
        const run_outcome out = tiny.run({{0, reqs}});
        expect_reference(reqs, out);
        EXPECT_GT(out.stats.num_preemptions, 0u);
        EXPECT_GT(out.stats.num_blocks_evicted.at(0) + out.stats.num_blocks_evicted.at(1), 0u);
        EXPECT_GT(out.stats.prefix_cache_hits.at(0) + out.stats.prefix_cache_hits.at(1), 0u);
        for (int32_t r = 0; r < 2; ++r) EXPECT_EQ(tiny.sched.pool(r).num_used(), 0);
    }
}

TEST(PrefixCache, RecomputeAfterPreemptionReusesItsCachedBlocks) {
    // Two requests on a pool that cannot hold both at full length: the newer one is preempted and, readmitted,
    // starts from its cached blocks rather than from position 0.
    harness h(make_config({10}, false, 64, 4));
    std::vector<std::pair<uint64_t, int32_t>> starts;
    h.on_step = [&](const std::vector<step_request>& steps) {
        for (const scheduled_seq& q : steps[0].seqs)
            if (q.token_ids.size() > 1) starts.emplace_back(q.request_id, q.start_pos);
    };
    new_request a = make_request(1, tokens_from(5, 12), 20);
    new_request b = make_request(2, tokens_from(6, 12), 20);
    a.ignore_eos = b.ignore_eos = true;
    const run_outcome out = h.run({{0, {a, b}}});
    expect_reference({a, b}, out);
    ASSERT_GT(out.stats.num_preemptions, 0u);
    bool resumed_past_zero = false;
    for (size_t i = 2; i < starts.size(); ++i) resumed_past_zero |= starts[i].second > 0;
    EXPECT_TRUE(resumed_past_zero) << "a recompute after preemption started from position 0";
}

TEST(PrefixCache, SequencesOfOnePromptShareItsBlocks) {
    // n > 1: the frontend adds one request per sequence with the same prompt at once. The first computes the
    // prompt; the others wait for its blocks and then compute only the last partial block.
    for (const bool async : {false, true}) {
        harness h(make_config({64}, async));
        first_chunks chunks;
        chunks.attach(h);
        std::vector<new_request> seqs;
        for (uint64_t i = 0; i < 4; ++i) seqs.push_back(make_request(10 + i, tokens_from(7, 25), 8));
        const run_outcome out = h.run({{0, seqs}});
        expect_reference(seqs, out);
        EXPECT_EQ(chunks.of.at(10).first, 0);
        for (uint64_t i = 1; i < 4; ++i) {
            EXPECT_EQ(chunks.of.at(10 + i), std::make_pair(24, 1)) << "sequence " << i << " async " << async;
            EXPECT_EQ(out.cached_tokens.at(10 + i), 24);
        }
    }
}

TEST(PrefixCache, SaltsIsolateCaches) {
    harness h(make_config({64}, true));
    first_chunks chunks;
    chunks.attach(h);
    const std::vector<int32_t> prompt = tokens_from(8, 17);
    new_request a = make_request(1, prompt, 3);
    a.cache_salt = "tenant-a";
    h.add(a);
    h.run();
    new_request other_salt = make_request(2, prompt, 3);
    other_salt.cache_salt = "tenant-b";
    new_request no_salt = make_request(3, prompt, 3);
    new_request same_salt = make_request(4, prompt, 3);
    same_salt.cache_salt = "tenant-a";
    const run_outcome out = h.run({{0, {other_salt}}, {20, {no_salt}}, {40, {same_salt}}});
    expect_reference({other_salt, no_salt, same_salt}, out);
    EXPECT_EQ(chunks.of.at(2).first, 0);
    EXPECT_EQ(chunks.of.at(3).first, 0);
    EXPECT_EQ(chunks.of.at(4).first, 16);
}

TEST(PrefixCache, DisabledMeansNoSharingAndNoQueries) {
    scheduler_config cfg = make_config({64}, true);
    cfg.enable_prefix_caching = false;
    harness h(cfg);
    first_chunks chunks;
    chunks.attach(h);
    std::vector<new_request> reqs;
    for (uint64_t i = 0; i < 3; ++i) reqs.push_back(make_request(1 + i, tokens_from(9, 20), 4));
    const run_outcome out = h.run({{0, {reqs[0]}}, {30, {reqs[1], reqs[2]}}});
    expect_reference(reqs, out);
    for (uint64_t i = 1; i <= 3; ++i) EXPECT_EQ(chunks.of.at(i).first, 0);
    EXPECT_EQ(out.stats.prefix_cache_queries.at(0), 0u);
    EXPECT_EQ(out.stats.num_blocks_cached.at(0), 0);
}

TEST(PrefixCache, RequestsWithPenaltiesFeedTheirWholePrompt) {
    // A worker applies penalties over every token it was fed: such a request must feed its cached prefix too.
    harness h(make_config({64}, true));
    first_chunks chunks;
    chunks.attach(h);
    const std::vector<int32_t> prompt = tokens_from(10, 20);
    h.add(make_request(1, prompt, 2));
    h.run();
    new_request p = make_request(2, prompt, 2);
    p.sampling.repetition_penalty = 1.2f;
    const run_outcome out = h.run({{0, {p}}});
    EXPECT_EQ(chunks.of.at(2).first, 0);
    EXPECT_EQ(out.cached_tokens.at(2), 0);
}

TEST(PrefixCache, CacheAwarePlacementFollowsThePrefixWithinTheLoadBound) {
    for (const int32_t bound : {4, 0}) {
        scheduler_config cfg = make_config({64, 64}, true);
        cfg.placement_max_imbalance = bound;
        harness h(cfg);
        const std::vector<int32_t> prefix = tokens_from(11, 24);
        ASSERT_EQ(h.add(make_request(1, concat(prefix, {1}), 3)), 0);
        h.run();
        // Rank 0 now holds the prefix and gets one more request than rank 1.
        ASSERT_EQ(h.add(make_request(2, tokens_from(12, 5), 3)), 0);
        const int32_t rank = h.add(make_request(3, concat(prefix, {2}), 3));
        const scheduler_stats st = h.sched.stats();
        if (bound == 4) {
            EXPECT_EQ(rank, 0);
            EXPECT_EQ(st.num_placed_cache_hit, 1u);
        } else {
            EXPECT_EQ(rank, 1);  // rank 0 is one request above rank 1, over the bound
            EXPECT_EQ(st.num_placed_overloaded, 1u);
        }
        h.run();
    }
}

TEST(PrefixCache, OtherPlacementsIgnoreTheCache) {
    for (const dp_placement placement : {dp_placement::least_loaded, dp_placement::round_robin}) {
        scheduler_config cfg = make_config({64, 64}, true);
        cfg.placement = placement;
        harness h(cfg);
        const std::vector<int32_t> prefix = tokens_from(13, 24);
        ASSERT_EQ(h.add(make_request(1, concat(prefix, {1}), 3)), 0);
        h.run();
        const int32_t second = h.add(make_request(2, tokens_from(14, 5), 3));
        const int32_t third = h.add(make_request(3, concat(prefix, {2}), 3));
        EXPECT_EQ(second, placement == dp_placement::round_robin ? 1 : 0);
        EXPECT_EQ(third, placement == dp_placement::round_robin ? 0 : 1);
        h.run();
    }
    EXPECT_EQ(dp_placement_from_name("round-robin"), dp_placement::round_robin);
    EXPECT_THROW(dp_placement_from_name("random"), error);
}

}  // namespace
}  // namespace zmoe
