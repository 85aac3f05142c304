#include "engine_core/scheduler.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <set>

#include "base/error.hpp"
#include "scheduler_harness.hpp"

namespace zmoe {
namespace {

using testing::harness;
using testing::kVocab;
using testing::random_workload;
using testing::reference_output;
using testing::run_outcome;

scheduler_config make_config(std::vector<int32_t> blocks, bool async, int32_t budget = 64, int32_t max_seqs = 8,
                             int32_t block_size = 4) {
    scheduler_config c;
    c.max_num_batched_tokens = budget;
    c.max_num_seqs = max_seqs;
    c.block_size = block_size;
    c.num_blocks_per_rank = std::move(blocks);
    c.max_model_len = 256;
    c.async_scheduling = async;
    return c;
}

new_request make_request(uint64_t id, int32_t prompt_len, int32_t max_tokens) {
    new_request r;
    r.id = id;
    for (int32_t i = 0; i < prompt_len; ++i) r.prompt.push_back(static_cast<int32_t>((id * 7 + i) % kVocab));
    r.max_tokens = max_tokens;
    return r;
}

void expect_matches_reference(const std::vector<new_request>& reqs, const run_outcome& out) {
    for (const new_request& r : reqs) {
        const std::vector<int32_t> want = reference_output(r);
        ASSERT_TRUE(out.tokens.contains(r.id)) << "request " << r.id << " produced nothing";
        EXPECT_EQ(out.tokens.at(r.id), want) << "request " << r.id;
        ASSERT_TRUE(out.reasons.contains(r.id)) << "request " << r.id << " never finished";
        const bool stopped = static_cast<int32_t>(want.size()) < r.max_tokens ||
                             (!r.ignore_eos && std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(),
                                                         want.back()) != r.stop_token_ids.end());
        EXPECT_EQ(out.reasons.at(r.id), stopped ? finish_reason::stop : finish_reason::length) << "request " << r.id;
    }
}

int32_t error_code_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const error& e) {
        return static_cast<int32_t>(e.code());
    }
    return -1;
}

TEST(Scheduler, RejectsBadConfiguration) {
    auto bad = [](auto mutate) {
        scheduler_config c = make_config({16}, true);
        mutate(c);
        return error_code_of([&] { scheduler s(c); });
    };
    const auto kInvalid = static_cast<int32_t>(errc::invalid_argument);
    EXPECT_EQ(bad([](scheduler_config& c) { c.num_blocks_per_rank.clear(); }), kInvalid);
    EXPECT_EQ(bad([](scheduler_config& c) { c.max_num_batched_tokens = 0; }), kInvalid);
    EXPECT_EQ(bad([](scheduler_config& c) { c.max_num_seqs = 0; }), kInvalid);
    EXPECT_EQ(bad([](scheduler_config& c) { c.block_size = 0; }), kInvalid);
    EXPECT_EQ(bad([](scheduler_config& c) { c.max_model_len = 0; }), kInvalid);
    EXPECT_EQ(bad([](scheduler_config& c) { c.num_blocks_per_rank = {4, -1}; }), kInvalid);
    EXPECT_EQ(bad([](scheduler_config&) {}), -1);
}

TEST(Scheduler, RejectsRequestsItCanNeverServe) {
    scheduler s(make_config({8, 4}, true));  // block_size 4: at most 32 KV tokens on rank 0
    const auto kInvalid = static_cast<int32_t>(errc::invalid_argument);
    EXPECT_EQ(error_code_of([&] { s.add_request(make_request(1, 0, 4)); }), kInvalid);
    EXPECT_EQ(error_code_of([&] { s.add_request(make_request(1, 4, 0)); }), kInvalid);
    EXPECT_EQ(error_code_of([&] { s.add_request(make_request(1, 200, 57)); }), kInvalid);  // > max_model_len 256
    new_request neg = make_request(1, 4, 4);
    neg.prompt[2] = -5;
    EXPECT_EQ(error_code_of([&] { s.add_request(neg); }), kInvalid);
    // 30 prompt + 4 new - 1 fed = 33 KV slots = 9 blocks: more than any pool.
    EXPECT_EQ(error_code_of([&] { s.add_request(make_request(1, 30, 4)); }), static_cast<int32_t>(errc::out_of_memory));
    EXPECT_EQ(s.num_unfinished(), 0);
    // 29 + 4 - 1 = 32 slots = 8 blocks fits rank 0 exactly, and only rank 0.
    EXPECT_EQ(s.add_request(make_request(1, 29, 4)), 0);
    EXPECT_EQ(error_code_of([&] { s.add_request(make_request(1, 3, 4)); }), kInvalid);  // id in use
    EXPECT_EQ(s.num_unfinished(), 1);
}

TEST(Scheduler, EveryRankGetsAStepEveryStep) {
    harness h(make_config({32, 32, 32, 32}, true));
    h.add(make_request(1, 5, 3));
    std::vector<uint64_t> step_ids;
    h.on_step = [&](const std::vector<step_request>& steps) {
        ASSERT_EQ(steps.size(), 4u);
        size_t busy = 0;
        for (const step_request& s : steps) busy += s.seqs.empty() ? 0 : 1;
        EXPECT_EQ(busy, 1u);
        step_ids.push_back(steps[0].step_id);
    };
    run_outcome out = h.run();
    ASSERT_GE(step_ids.size(), 3u);
    for (size_t i = 1; i < step_ids.size(); ++i) EXPECT_EQ(step_ids[i], step_ids[i - 1] + 1);
    EXPECT_EQ(out.tokens.at(1), reference_output(make_request(1, 5, 3)));
}

TEST(Scheduler, PlacesRequestsOnTheLeastLoadedRank) {
    scheduler s(make_config({64, 64, 64}, true));
    std::vector<int32_t> ranks;
    for (uint64_t id = 0; id < 6; ++id) ranks.push_back(s.add_request(make_request(id, 8, 4)));
    EXPECT_EQ(ranks, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));

    // Equal request counts: fewer tokens wins.
    scheduler t(make_config({64, 64}, true));
    EXPECT_EQ(t.add_request(make_request(10, 20, 4)), 0);
    EXPECT_EQ(t.add_request(make_request(11, 3, 4)), 1);
    EXPECT_EQ(t.add_request(make_request(12, 3, 4)), 1);  // (1 req, 20 tok) vs (1 req, 3 tok)
    EXPECT_EQ(t.add_request(make_request(13, 3, 4)), 0);  // (1 req) vs (2 reqs)
    EXPECT_EQ(t.rank_of(12), 1);
    EXPECT_EQ(t.rank_of(99), -1);
    const scheduler_stats st = t.stats();
    EXPECT_EQ(st.num_waiting, (std::vector<int32_t>{2, 2}));

    // Only ranks whose pool can hold the request are candidates, however busy.
    scheduler u(make_config({2, 64}, true));
    EXPECT_EQ(u.add_request(make_request(20, 20, 4)), 1);
    EXPECT_EQ(u.add_request(make_request(21, 20, 4)), 1);
    EXPECT_EQ(u.add_request(make_request(22, 2, 4)), 0);
}

TEST(Scheduler, ChunkedPrefillSpansSeveralSteps) {
    harness h(make_config({64}, false, /*budget=*/16, 8, /*block_size=*/16));
    const new_request req = make_request(7, 40, 3);
    h.add(req);
    std::vector<step_request> seen;
    h.on_step = [&](const std::vector<step_request>& steps) { seen.push_back(steps[0]); };
    run_outcome out = h.run();
    ASSERT_EQ(seen.size(), 5u);  // 16 + 16 + 8 (samples token 0), then two decodes
    const int32_t starts[] = {0, 16, 32, 40, 41};
    const size_t lens[] = {16, 16, 8, 1, 1};
    const size_t tables[] = {1, 2, 3, 3, 3};
    for (size_t i = 0; i < 5; ++i) {
        ASSERT_EQ(seen[i].seqs.size(), 1u) << "step " << i;
        const scheduled_seq& s = seen[i].seqs[0];
        EXPECT_EQ(s.start_pos, starts[i]) << "step " << i;
        EXPECT_EQ(s.token_ids.size(), lens[i]) << "step " << i;
        EXPECT_EQ(s.block_table.size(), tables[i]) << "step " << i;
        EXPECT_EQ(s.do_sample, i >= 2) << "step " << i;
        if (i >= 2) {
            EXPECT_EQ(s.sample_index, i - 2) << "step " << i;
        }
    }
    EXPECT_EQ(std::vector<int32_t>(seen[1].seqs[0].token_ids),
              std::vector<int32_t>(req.prompt.begin() + 16, req.prompt.begin() + 32));
    EXPECT_EQ(seen[3].seqs[0].token_ids, std::vector<int32_t>{out.tokens.at(7)[0]});  // sync: no placeholder
    EXPECT_EQ(out.tokens.at(7), reference_output(req));
    EXPECT_EQ(out.reasons.at(7), finish_reason::length);
}

TEST(Scheduler, DecodesComeBeforePrefills) {
    harness h(make_config({64}, false, /*budget=*/16));
    h.add(make_request(1, 4, 10));
    h.send();
    h.collect();
    h.add(make_request(2, 100, 4));
    std::vector<step_request> seen;
    h.on_step = [&](const std::vector<step_request>& steps) { seen.push_back(steps[0]); };
    h.send();
    ASSERT_EQ(seen.size(), 1u);
    ASSERT_EQ(seen[0].seqs.size(), 2u);
    EXPECT_EQ(seen[0].seqs[0].request_id, 1u);
    EXPECT_EQ(seen[0].seqs[0].token_ids.size(), 1u);
    EXPECT_EQ(seen[0].seqs[1].request_id, 2u);
    EXPECT_EQ(seen[0].seqs[1].token_ids.size(), 15u);  // what the decode left of the budget
    EXPECT_FALSE(seen[0].seqs[1].do_sample);
    EXPECT_EQ(h.sched.stats().num_tokens_scheduled[0], 16);
}

TEST(Scheduler, TokenBudgetAndSequenceCapAreRespected) {
    for (const bool async : {false, true}) {
        SCOPED_TRACE(async ? "async" : "sync");
        constexpr int32_t kBudget = 24;
        constexpr int32_t kMaxSeqs = 5;
        harness h(make_config({256, 256}, async, kBudget, kMaxSeqs));
        int32_t full_steps = 0;
        size_t max_seqs_seen = 0;
        h.on_step = [&](const std::vector<step_request>& steps) {
            for (const step_request& s : steps) {
                int32_t tokens = 0;
                for (const scheduled_seq& q : s.seqs) tokens += static_cast<int32_t>(q.token_ids.size());
                EXPECT_LE(tokens, kBudget);
                EXPECT_LE(s.seqs.size(), static_cast<size_t>(kMaxSeqs));
                full_steps += tokens == kBudget ? 1 : 0;
                max_seqs_seen = std::max(max_seqs_seen, s.seqs.size());
            }
            for (int32_t r : h.sched.stats().num_running) EXPECT_LE(r, kMaxSeqs);
        };
        const auto reqs = random_workload(11, 40, 60, 20);
        for (const auto& r : reqs) h.add(r);
        run_outcome out = h.run();
        expect_matches_reference(reqs, out);
        EXPECT_GT(full_steps, 0);  // the budget was the binding limit at times
        EXPECT_EQ(max_seqs_seen, static_cast<size_t>(kMaxSeqs));
    }
}

TEST(Scheduler, PreemptionUnderATinyPoolGivesTheSameOutputs) {
    // block_size 4; the biggest request needs (40 + 30 - 1) / 4 -> 18 blocks; the tiny pool has 20 per rank.
    const auto reqs = random_workload(23, 40, 40, 30);
    for (const bool async : {false, true}) {
        SCOPED_TRACE(async ? "async" : "sync");
        harness big(make_config({1000, 1000}, async));
        harness tiny(make_config({20, 20}, async));
        for (const auto& r : reqs) {
            big.add(r);
            tiny.add(r);
        }
        run_outcome a = big.run();
        run_outcome b = tiny.run();
        EXPECT_EQ(a.stats.num_preemptions, 0u);
        EXPECT_GT(b.stats.num_preemptions, 0u);
        EXPECT_EQ(a.tokens, b.tokens);
        EXPECT_EQ(a.reasons, b.reasons);
        expect_matches_reference(reqs, b);
        EXPECT_EQ(b.stats.num_blocks_used, (std::vector<int32_t>{0, 0}));
    }
}

TEST(Scheduler, RequestPreemptedWithATokenInFlightKeepsIt) {
    // 3 blocks of 4 slots. Step 0 prefills A (4 tokens) and B (3), both sample; step 1 decodes both on placeholders
    // (A takes the third block); step 2 needs a fourth block for B at position 4 while B's step-1 token is still out:
    // B is preempted with a sample in flight, must keep that token when it arrives, and recompute later.
    harness h(make_config({3}, true, 64, 8, 4));
    const new_request a = make_request(1, 4, 5);
    const new_request b = make_request(2, 3, 6);
    h.add(a);
    h.add(b);
    h.send();
    h.send();
    h.collect();
    h.send();
    EXPECT_EQ(h.sched.stats().num_preemptions, 1u);
    EXPECT_EQ(h.sched.stats().num_waiting, std::vector<int32_t>{1});
    h.collect();  // step 1: B's second token arrives while B waits
    ASSERT_EQ(h.outcome.tokens.at(2).size(), 2u);
    run_outcome out = h.run();
    EXPECT_EQ(out.tokens.at(1), reference_output(a));
    EXPECT_EQ(out.tokens.at(2), reference_output(b));
    EXPECT_EQ(out.stats.num_discarded_tokens, 0u);
}

TEST(Scheduler, StructuredOutputSpecGoesWithTheFirstSampleAndEveryRecompute) {
    // The preemption scenario above with both requests constrained: the constraint reaches the worker with each
    // request's first sample, and again (with the tokens generated so far) with the sample that ends B's recompute;
    // no other sequence carries it, and an unconstrained request never does.
    harness h(make_config({3}, true, 64, 8, 4));
    new_request a = make_request(1, 4, 5);
    new_request b = make_request(2, 3, 6);
    a.structured = {structured_kind::regex, "[0-9]+"};
    b.structured = {structured_kind::json_object, ""};
    struct sent {
        uint64_t id;
        uint32_t sample_index;
        structured_output spec;
        std::vector<int32_t> replay;
    };
    std::vector<sent> with_spec;
    int num_samples = 0;
    h.on_step = [&](const std::vector<step_request>& steps) {
        for (const step_request& s : steps) {
            for (const scheduled_seq& q : s.seqs) {
                num_samples += q.do_sample ? 1 : 0;
                if (!q.structured.active()) {
                    EXPECT_TRUE(q.output_token_ids.empty());
                    continue;
                }
                EXPECT_TRUE(q.do_sample);
                // What the engine core knows of the request's output when it sends the recompute.
                const auto it = h.outcome.tokens.find(q.request_id);
                const std::vector<int32_t> known = it == h.outcome.tokens.end() ? std::vector<int32_t>{} : it->second;
                EXPECT_EQ(q.output_token_ids, known) << "request " << q.request_id;
                with_spec.push_back({q.request_id, q.sample_index, q.structured, q.output_token_ids});
            }
        }
    };
    h.add(a);
    h.add(b);
    h.add(make_request(3, 2, 3));
    run_outcome out = h.run();
    ASSERT_GE(out.stats.num_preemptions, 1u);
    std::map<uint64_t, int> first_samples, recomputes;
    for (const sent& s : with_spec) {
        EXPECT_TRUE(s.id == 1 || s.id == 2) << "request " << s.id << " is not constrained";
        EXPECT_EQ(s.spec, s.id == 1 ? a.structured : b.structured);
        EXPECT_EQ(s.sample_index, s.replay.size());
        ++(s.sample_index == 0 ? first_samples : recomputes)[s.id];
    }
    EXPECT_EQ(first_samples, (std::map<uint64_t, int>{{1, 1}, {2, 1}}));
    EXPECT_GE(recomputes[2], 1) << "B's recompute carries the constraint and its tokens again";
    EXPECT_LE(static_cast<uint64_t>(recomputes[1] + recomputes[2]), out.stats.num_preemptions);
    EXPECT_GT(num_samples, static_cast<int>(with_spec.size()));
    EXPECT_EQ(out.tokens.at(1), reference_output(a));
    EXPECT_EQ(out.tokens.at(2), reference_output(b));
}

TEST(Scheduler, AsyncAndSyncGiveTheSameOutputs) {
    const auto reqs = random_workload(5, 60, 50, 40);
    // Staggered arrivals so that prefills, decodes and finishes interleave.
    std::map<int64_t, std::vector<new_request>> arrivals;
    for (size_t i = 0; i < reqs.size(); ++i) arrivals[static_cast<int64_t>(i) * 3].push_back(reqs[i]);
    harness sync(make_config({64, 64, 64}, false, 48));
    harness async(make_config({64, 64, 64}, true, 48));
    run_outcome a = sync.run(arrivals);
    run_outcome b = async.run(arrivals);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.reasons, b.reasons);
    expect_matches_reference(reqs, b);
    EXPECT_EQ(a.max_in_flight, 1);
    EXPECT_EQ(b.max_in_flight, 2);
    EXPECT_EQ(a.num_placeholders, 0);
    EXPECT_GT(b.num_placeholders, 0);
    int32_t num_stopped = 0;
    for (const auto& [id, reason] : b.reasons) num_stopped += reason == finish_reason::stop ? 1 : 0;
    EXPECT_GT(num_stopped, 0);
    EXPECT_GT(b.stats.num_discarded_tokens, 0u);  // some requests stopped on token 3 with a step still out
    EXPECT_EQ(a.stats.num_discarded_tokens, 0u);
}

TEST(Scheduler, TokenComputedPastAStopIsDiscarded) {
    // Find a position k >= 2 whose token first appears there, and make it the stop token.
    new_request req = make_request(77, 6, 40);
    req.ignore_eos = true;
    const std::vector<int32_t> full = reference_output(req);
    size_t k = 2;
    while (std::find(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(k), full[k]) !=
           full.begin() + static_cast<std::ptrdiff_t>(k)) {
        ++k;
        ASSERT_LT(k, full.size());
    }
    req.stop_token_ids = {full[k]};

    harness with_eos_ignored(make_config({64}, true));
    with_eos_ignored.add(req);
    EXPECT_EQ(with_eos_ignored.run().tokens.at(77), full);

    req.ignore_eos = false;
    harness h(make_config({64}, true));
    h.add(req);
    run_outcome out = h.run();
    const std::vector<int32_t> want(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(k) + 1);
    EXPECT_EQ(out.tokens.at(77), want);  // the stop token included, nothing after it
    EXPECT_EQ(out.reasons.at(77), finish_reason::stop);
    EXPECT_EQ(out.stats.num_discarded_tokens, 1u);
    // The next step tells the worker to drop its kept token.
    std::vector<step_request> next = h.sched.schedule();
    EXPECT_EQ(next[0].finished_ids, std::vector<uint64_t>{77});
    EXPECT_TRUE(next[0].seqs.empty());
}

// vLLM's rule: a stop id ends a request only once it has min_tokens tokens (the workers also ban stop ids from
// being sampled before then; the fake worker does not, so this checks the engine core's side alone).
TEST(Scheduler, StopIdsDoNotEndARequestBeforeMinTokens) {
    new_request req = make_request(78, 5, 40);
    req.ignore_eos = true;
    const std::vector<int32_t> full = reference_output(req);
    req.ignore_eos = false;
    req.stop_token_ids = {full[1]};
    for (const uint32_t min_tokens : {0u, 3u, 10u}) {
        req.sampling.min_tokens = min_tokens;
        size_t j = 0;  // the first stop at or past the min_tokens-th token
        while (j < full.size() && (j + 1 < min_tokens || full[j] != full[1])) ++j;
        const std::vector<int32_t> want(full.begin(),
                                        full.begin() + static_cast<std::ptrdiff_t>(std::min(j + 1, full.size())));
        harness h(make_config({64}, true));
        h.add(req);
        const run_outcome out = h.run();
        EXPECT_EQ(out.tokens.at(78), want) << "min_tokens " << min_tokens;
        EXPECT_EQ(out.reasons.at(78), j < full.size() ? finish_reason::stop : finish_reason::length);
        EXPECT_GE(want.size(), std::max<size_t>(min_tokens, 2));
    }
}

TEST(Scheduler, NoStepIsSpentPastMaxTokens) {
    harness h(make_config({64}, true));
    h.add(make_request(1, 5, 1));
    h.send();  // prefill samples the only token
    EXPECT_FALSE(h.sched.has_pending_work());
    EXPECT_TRUE(h.sched.can_schedule());
    h.collect();
    EXPECT_EQ(h.outcome.tokens.at(1).size(), 1u);
    EXPECT_EQ(h.outcome.reasons.at(1), finish_reason::length);
    EXPECT_EQ(h.sched.stats().num_discarded_tokens, 0u);
}

TEST(Scheduler, AbortFreesBlocksWhereverTheRequestIs) {
    harness h(make_config({64}, true, /*budget=*/16, /*max_seqs=*/1));
    h.add(make_request(1, 20, 8));  // running, its steps in flight
    h.add(make_request(2, 20, 8));  // waiting behind the sequence cap
    h.send();                       // step 0: chunk 0..16 of request 1
    h.send();                       // step 1: chunk 16..20, samples
    EXPECT_FALSE(h.sched.can_schedule());
    EXPECT_EQ(h.sched.num_in_flight(), 2);
    EXPECT_EQ(h.sched.pool(0).num_used(), 5);

    std::optional<request_output> a = h.sched.abort_request(1);
    ASSERT_TRUE(a.has_value());
    EXPECT_TRUE(a->finished);
    EXPECT_EQ(a->reason, finish_reason::abort);
    EXPECT_TRUE(a->new_tokens.empty());
    EXPECT_EQ(h.sched.pool(0).num_used(), 0);
    std::optional<request_output> b = h.sched.abort_request(2, finish_reason::error);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->reason, finish_reason::error);
    EXPECT_FALSE(h.sched.abort_request(2).has_value());
    EXPECT_EQ(h.sched.num_unfinished(), 0);

    h.collect();
    h.collect();  // step 1 sampled a token for request 1: dropped
    EXPECT_TRUE(h.outcome.tokens.empty());
    EXPECT_EQ(h.sched.stats().num_discarded_tokens, 1u);
    std::vector<step_request> next = h.sched.schedule();
    EXPECT_EQ(next[0].finished_ids, std::vector<uint64_t>{1});  // 2 never reached a worker
    EXPECT_EQ(h.sched.stats().num_running, std::vector<int32_t>{0});
    EXPECT_EQ(h.sched.stats().num_waiting, std::vector<int32_t>{0});
}

TEST(Scheduler, AbortedRequestsLeaveOthersIntact) {
    const auto reqs = random_workload(31, 30, 30, 20);
    harness h(make_config({24, 24}, true, 32, 4));
    for (const auto& r : reqs) h.add(r);
    // Abort every third request after a few steps, wherever it happens to be by then.
    for (int i = 0; i < 6; ++i) {
        if (h.sched.can_schedule()) h.send();
        h.collect();
    }
    std::set<uint64_t> aborted;
    for (size_t i = 0; i < reqs.size(); i += 3) {
        if (auto o = h.sched.abort_request(reqs[i].id)) {
            h.record({*o});
            aborted.insert(reqs[i].id);
        }
    }
    EXPECT_FALSE(aborted.empty());
    run_outcome out = h.run();
    for (const auto& r : reqs) {
        if (aborted.contains(r.id)) {
            EXPECT_EQ(out.reasons.at(r.id), finish_reason::abort);
            continue;
        }
        EXPECT_EQ(out.tokens.at(r.id), reference_output(r)) << "request " << r.id;
    }
    EXPECT_EQ(out.stats.num_blocks_used, (std::vector<int32_t>{0, 0}));
}

TEST(Scheduler, RandomConfigurationsAndAbortsStillMatchTheReference) {
    uint64_t num_preemptions = 0;
    size_t num_aborted = 0;
    for (uint32_t seed = 0; seed < 40; ++seed) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        std::mt19937 rng(seed);
        auto pick = [&](int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); };
        const int32_t num_ranks = pick(1, 3);
        const int32_t block_size = pick(1, 8);
        std::vector<int32_t> blocks;
        // Each pool holds at least one maximal request: prompt 30 + new 20 - 1 slots.
        for (int32_t r = 0; r < num_ranks; ++r) blocks.push_back((49 + block_size - 1) / block_size + pick(0, 12));
        harness h(make_config(blocks, pick(0, 1) == 1, pick(1, 40), pick(1, 6), block_size));
        const auto reqs = random_workload(seed * 7 + 1, pick(5, 30), 30, 20);
        std::map<int64_t, std::vector<new_request>> arrivals;
        for (const auto& r : reqs) arrivals[pick(0, 40)].push_back(r);
        // Run the arrivals, aborting a random unfinished request now and then.
        std::set<uint64_t> aborted;
        for (int64_t iter = 0; iter < 100000; ++iter) {
            for (auto it = arrivals.begin(); it != arrivals.end() && it->first <= iter;) {
                for (const new_request& r : it->second) h.add(r);
                it = arrivals.erase(it);
            }
            if (h.sched.num_unfinished() == 0 && h.pending.empty() && arrivals.empty()) break;
            if (pick(0, 30) == 0) {
                const uint64_t id = reqs[static_cast<size_t>(pick(0, static_cast<int32_t>(reqs.size()) - 1))].id;
                if (auto o = h.sched.abort_request(id)) {
                    h.record({*o});
                    aborted.insert(id);
                }
            }
            if (h.sched.can_schedule() && h.sched.has_pending_work()) {
                h.send();
            } else if (!h.pending.empty()) {
                h.collect();
            }
        }
        ASSERT_EQ(h.sched.num_unfinished(), 0);
        for (const auto& r : reqs) {
            ASSERT_TRUE(h.outcome.reasons.contains(r.id)) << "request " << r.id;
            if (aborted.contains(r.id)) {
                EXPECT_EQ(h.outcome.reasons.at(r.id), finish_reason::abort);
                const std::vector<int32_t> want = reference_output(r);
                const std::vector<int32_t>& got = h.outcome.tokens[r.id];
                EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "prefix of request " << r.id;
            } else {
                EXPECT_EQ(h.outcome.tokens.at(r.id), reference_output(r)) << "request " << r.id;
            }
        }
        for (int32_t used : h.sched.stats().num_blocks_used) EXPECT_EQ(used, 0);
        num_preemptions += h.sched.stats().num_preemptions;
        num_aborted += aborted.size();
    }
    // The random configurations did exercise preemption and aborts.
    EXPECT_GT(num_preemptions, 0u);
    EXPECT_GT(num_aborted, 0u);
}

TEST(Scheduler, UpdateRejectsResultsThatDoNotMatchTheStep) {
    harness h(make_config({64, 64}, false));
    EXPECT_EQ(error_code_of([&] { h.sched.update({}); }), static_cast<int32_t>(errc::protocol));
    h.add(make_request(1, 4, 3));
    h.send();
    std::vector<step_result> good = h.pending.front();
    const auto kProtocol = static_cast<int32_t>(errc::protocol);

    auto wrong_step = good;
    wrong_step[0].step_id += 1;
    EXPECT_EQ(error_code_of([&] { h.sched.update(wrong_step); }), kProtocol);
    auto missing = good;
    missing.pop_back();
    EXPECT_EQ(error_code_of([&] { h.sched.update(missing); }), kProtocol);
    auto duplicate = good;
    duplicate[1].rank = duplicate[0].rank;
    EXPECT_EQ(error_code_of([&] { h.sched.update(duplicate); }), kProtocol);
    auto extra = good;
    extra[0].tokens.push_back({1, 5});
    extra[1].tokens.push_back({1, 5});
    EXPECT_EQ(error_code_of([&] { h.sched.update(extra); }), kProtocol);
    auto stranger = good;
    for (auto& r : stranger) {
        for (auto& t : r.tokens) t.request_id = 999;
    }
    EXPECT_EQ(error_code_of([&] { h.sched.update(stranger); }), kProtocol);

    // Nothing was applied: the genuine results still go through.
    EXPECT_EQ(h.sched.num_in_flight(), 1);
    h.collect();
    EXPECT_EQ(h.outcome.tokens.at(1).size(), 1u);
}

TEST(Scheduler, AtMostTwoStepsInFlight) {
    scheduler s(make_config({64}, true));
    s.add_request(make_request(1, 4, 10));
    EXPECT_TRUE(s.can_schedule());
    s.schedule();
    EXPECT_TRUE(s.can_schedule());
    std::vector<step_request> second = s.schedule();
    EXPECT_FALSE(s.can_schedule());
    EXPECT_EQ(s.num_in_flight(), 2);
    // The decode in step 1 follows the prefill's sample in step 0, not yet known: a placeholder.
    ASSERT_EQ(second[0].seqs.size(), 1u);
    EXPECT_EQ(second[0].seqs[0].token_ids, std::vector<int32_t>{kPlaceholderToken});
    EXPECT_EQ(second[0].seqs[0].start_pos, 4);
    EXPECT_EQ(second[0].seqs[0].sample_index, 1u);

    scheduler t(make_config({64}, false));
    t.schedule();
    EXPECT_FALSE(t.can_schedule());
}

}  // namespace
}  // namespace zmoe
