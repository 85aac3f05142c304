#pragma once
// Prefix caching on a backend, run on the CPU model runner (tests/workers/prefix_cache_test.cpp) and on the CUDA
// executor (tests/workers_cuda/cuda_prefix_cache_test.cpp): the engine core's scheduler drives the executor as the
// engine core does (async scheduling, chunked prefill, steps in order), with the prefix cache on and off.
//
// The requests share prefixes of several lengths (whole blocks and not), repeat a prompt exactly, and include three
// sequences of one prompt (what the frontend sends for n = 3). A cache hit makes the backend start a sequence at
// start_pos > 0 on a block table whose first blocks other sequences hold (and read) too. Greedy tokens must equal
// those of the run without the cache; so must a run whose KV pool is small enough that cached blocks are evicted
// and requests preempted (recomputed from their cached prefix). A shared block with the wrong content changes the
// tokens; blocks of the right content in the wrong order would not (attention sums over cached keys that carry their
// own rotary position), which the scheduler's fake-worker tests catch instead (tests/engine_core/fake_worker.hpp).

#include <gtest/gtest.h>

#include <cstdio>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "engine_core/scheduler.hpp"
#include "reference_fixture.hpp"
#include "workers/step_executor.hpp"

namespace zmoe::testing {

struct prefix_run {
    std::map<uint64_t, std::vector<int32_t>> tokens;  ///< by request id minus the run's id base
    std::map<uint64_t, int32_t> cached_tokens;
    scheduler_stats stats;
};

/// Runs `requests` to their end through a scheduler with two steps in flight (the executor runs them in order).
inline prefix_run run_prefix_requests(step_executor& ex, const std::vector<new_request>& requests, uint64_t id_base,
                                      bool caching, int32_t block_size, int32_t num_blocks, int32_t budget) {
    scheduler sched({.max_num_batched_tokens = budget,
                     .max_num_seqs = 8,
                     .block_size = block_size,
                     .num_blocks_per_rank = {num_blocks},
                     .max_model_len = 512,
                     .async_scheduling = true,
                     .enable_prefix_caching = caching,
                     .placement = dp_placement::cache_aware,
                     .placement_max_imbalance = 4});
    for (new_request r : requests) {
        r.id += id_base;
        sched.add_request(std::move(r));
    }
    prefix_run out;
    std::deque<step_request> sent;
    for (int steps = 0; sched.num_unfinished() > 0 || !sent.empty(); ++steps) {
        if (steps >= 5000) {
            ADD_FAILURE() << "the requests did not end within 5000 steps";
            break;
        }
        if (sched.can_schedule() && sched.has_pending_work()) {
            sent.push_back(sched.schedule().at(0));
            continue;
        }
        if (sent.empty()) {
            ADD_FAILURE() << "scheduler stuck";
            break;
        }
        const step_result res = ex.execute(sent.front());
        sent.pop_front();
        for (const request_output& o : sched.update({res})) {
            auto& t = out.tokens[o.id - id_base];
            t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
            out.cached_tokens[o.id - id_base] = o.num_cached_tokens;
        }
    }
    out.stats = sched.stats();
    return out;
}

inline std::vector<new_request> prefix_requests(const std::vector<ref_prompt>& prompts) {
    auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    };
    const std::vector<int32_t>& base = prompts.at(5).token_ids;  // 64 tokens
    const std::vector<int32_t> head(base.begin(), base.begin() + 40);
    const std::vector<std::vector<int32_t>> texts = {base,
                                                     cat(base, prompts.at(4).token_ids),
                                                     cat(head, prompts.at(3).token_ids),
                                                     cat(cat(base, prompts.at(4).token_ids), prompts.at(2).token_ids),
                                                     prompts.at(4).token_ids,
                                                     base,
                                                     cat(head, prompts.at(2).token_ids),
                                                     cat(head, prompts.at(2).token_ids),
                                                     cat(head, prompts.at(2).token_ids)};
    std::vector<new_request> reqs;
    for (size_t i = 0; i < texts.size(); ++i) {
        new_request r;
        r.id = i + 1;
        r.prompt = texts[i];
        r.max_tokens = 10;
        r.sampling.temperature = 0.f;
        r.sampling.seed = 11 + i;
        r.ignore_eos = true;
        reqs.push_back(std::move(r));
    }
    return reqs;
}

/// See the top of this file. `num_blocks`: the backend's KV blocks (the small-pool run uses the first 10).
inline void check_prefix_cache(step_executor& ex, const std::vector<ref_prompt>& prompts, const std::string& label,
                               int32_t block_size, int32_t num_blocks) {
    ASSERT_GE(prompts.size(), 6u) << label;
    ASSERT_EQ(block_size, 16) << label << ": the small pool below is sized for blocks of 16";
    const std::vector<new_request> reqs = prefix_requests(prompts);
    const prefix_run off = run_prefix_requests(ex, reqs, 0, false, block_size, num_blocks, 48);
    const prefix_run on = run_prefix_requests(ex, reqs, 1000, true, block_size, num_blocks, 48);
    // 10 blocks of 16 for requests of up to 121 KV slots, 32-token chunks: eviction and preemption.
    const prefix_run tiny = run_prefix_requests(ex, reqs, 2000, true, block_size, 10, 32);
    ASSERT_EQ(off.tokens.size(), reqs.size()) << label;
    for (const new_request& r : reqs) {
        ASSERT_EQ(off.tokens.at(r.id).size(), 10u) << label << " request " << r.id;
        EXPECT_EQ(on.tokens.at(r.id), off.tokens.at(r.id)) << label << " request " << r.id << ": cache on";
        EXPECT_EQ(tiny.tokens.at(r.id), off.tokens.at(r.id)) << label << " request " << r.id << ": small pool";
        EXPECT_EQ(off.cached_tokens.at(r.id), 0) << label;
    }
    // The exact repeat and the three sequences of one prompt found their prefix (deferred while it was computed).
    EXPECT_EQ(on.cached_tokens.at(6), 48) << label;
    EXPECT_EQ(on.cached_tokens.at(8), 32) << label;
    EXPECT_GT(on.stats.prefix_cache_hits.at(0), 0u) << label;
    EXPECT_GT(tiny.stats.num_preemptions, 0u) << label;
    EXPECT_GT(tiny.stats.num_blocks_evicted.at(0), 0u) << label;
    EXPECT_GT(tiny.stats.prefix_cache_hits.at(0), 0u) << label;
    std::printf("[prefix_cache] %s: hits %llu of %llu prompt tokens; small pool: %llu preemptions, %llu evictions\n",
                label.c_str(), static_cast<unsigned long long>(on.stats.prefix_cache_hits[0]),
                static_cast<unsigned long long>(on.stats.prefix_cache_queries[0]),
                static_cast<unsigned long long>(tiny.stats.num_preemptions),
                static_cast<unsigned long long>(tiny.stats.num_blocks_evicted[0]));
}

}  // namespace zmoe::testing
