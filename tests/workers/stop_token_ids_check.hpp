#pragma once
// stop_token_ids on a backend, run on the CPU model runner (tests/workers/sampling_params_test.cpp) and on the CUDA
// executor (tests/workers_cuda/cuda_sampling_params_test.cpp): the engine core's scheduler drives the executor
// (chunked prefill, then decodes, steps in order), as the engine core does.
//
// The reference is the same greedy run without stop ids, itself checked against transformers' greedy tokens up to
// the first near-tie. With a stop id that the greedy output first produces at position k, the request must end
// right there: the first k + 1 tokens, the stop id kept, finish_reason stop. With min_tokens = k + 2 as well (the
// engine core then bans the stop ids until min_tokens tokens exist), the id is neither sampled nor ends the request
// before k + 2 tokens, and the tokens before position k are unchanged.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "engine_core/scheduler.hpp"
#include "reference_fixture.hpp"
#include "workers/step_executor.hpp"

namespace zmoe::testing {

struct stop_run_output {
    std::vector<int32_t> tokens;
    finish_reason reason = finish_reason::none;
};

/// Runs `requests` to their end through a scheduler (one rank, synchronous steps, 24-token prefill chunks).
inline std::map<uint64_t, stop_run_output> run_through_scheduler(step_executor& ex,
                                                                 const std::vector<new_request>& requests,
                                                                 int32_t block_size, int32_t num_blocks) {
    scheduler sched({.max_num_batched_tokens = 24,
                     .max_num_seqs = 16,
                     .block_size = block_size,
                     .num_blocks_per_rank = {num_blocks},
                     .max_model_len = 256,
                     .async_scheduling = false});
    for (const new_request& r : requests) sched.add_request(r);
    std::map<uint64_t, stop_run_output> out;
    for (int steps = 0; sched.num_unfinished() > 0; ++steps) {
        if (steps >= 1000) {
            ADD_FAILURE() << "the requests did not end within 1000 steps";
            break;
        }
        const std::vector<step_request> step = sched.schedule();
        const step_result res = ex.execute(step.at(0));
        for (const request_output& o : sched.update({res})) {
            auto& r = out[o.id];
            r.tokens.insert(r.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
            if (o.finished) r.reason = o.reason;
        }
    }
    return out;
}

/// See the top of this file. `min_margin`: the greedy tokens are compared with transformers' up to the first step
/// whose transformers top-2 margin is below it (the backend's logit error can flip such a step).
inline void check_stop_token_ids(step_executor& ex, const std::vector<ref_prompt>& prompts, const std::string& label,
                                 int32_t block_size, int32_t num_blocks, double min_margin) {
    constexpr int32_t kNew = 8;
    auto requests = [&](auto&& tweak) {
        std::vector<new_request> reqs;
        for (size_t i = 0; i < prompts.size(); ++i) {
            new_request r;
            r.id = i + 1;
            r.prompt = prompts[i].token_ids;
            r.max_tokens = kNew;
            r.sampling.temperature = 0.f;
            r.sampling.seed = 3 + i;
            tweak(i, r);
            reqs.push_back(std::move(r));
        }
        return reqs;
    };
    const auto plain = run_through_scheduler(ex, requests([](size_t, new_request&) {}), block_size, num_blocks);
    // Per prompt: the first position k >= 1 whose greedy token has not appeared before (-1: none).
    std::vector<int> first_new(prompts.size(), -1);
    size_t checked = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        const std::vector<int32_t>& g = plain.at(i + 1).tokens;
        ASSERT_EQ(g.size(), static_cast<size_t>(kNew)) << label << " prompt " << i;
        EXPECT_EQ(plain.at(i + 1).reason, finish_reason::length);
        // Up to the first near-tie (after it the continuations may rightly differ), and no further than a mismatch.
        for (size_t t = 0; t < g.size() && t < prompts[i].greedy.size() && prompts[i].margins[t] >= min_margin; ++t) {
            EXPECT_EQ(g[t], prompts[i].greedy[t]) << label << " prompt " << i << " greedy token " << t;
            if (g[t] != prompts[i].greedy[t]) break;
        }
        for (int k = 1; k + 2 <= kNew && first_new[i] < 0; ++k)
            if (std::find(g.begin(), g.begin() + k, g[static_cast<size_t>(k)]) == g.begin() + k) first_new[i] = k;
        checked += first_new[i] >= 0;
    }
    ASSERT_GT(checked, 0u) << label << ": no prompt's greedy output has a new token to stop at";

    const auto stop_id = [&](size_t i) { return plain.at(i + 1).tokens[static_cast<size_t>(first_new[i])]; };
    const auto stopped = run_through_scheduler(ex, requests([&](size_t i, new_request& r) {
                                                   if (first_new[i] >= 0) r.stop_token_ids = {stop_id(i)};
                                               }),
                                               block_size, num_blocks);
    const auto banned = run_through_scheduler(ex, requests([&](size_t i, new_request& r) {
                                                  if (first_new[i] < 0) return;
                                                  r.stop_token_ids = {stop_id(i)};
                                                  r.sampling.min_tokens = static_cast<uint32_t>(first_new[i] + 2);
                                                  r.sampling.min_tokens_stop_ids = r.stop_token_ids;
                                              }),
                                              block_size, num_blocks);
    for (size_t i = 0; i < prompts.size(); ++i) {
        if (first_new[i] < 0) continue;
        const auto k = static_cast<size_t>(first_new[i]);
        const std::vector<int32_t>& g = plain.at(i + 1).tokens;
        const stop_run_output& s = stopped.at(i + 1);
        EXPECT_EQ(s.reason, finish_reason::stop) << label << " prompt " << i;
        EXPECT_EQ(s.tokens, std::vector<int32_t>(g.begin(), g.begin() + static_cast<int64_t>(k) + 1))
            << label << " prompt " << i << ": not ended at stop id " << stop_id(i) << " (position " << k << ")";
        const stop_run_output& b = banned.at(i + 1);
        ASSERT_GE(b.tokens.size(), k + 2) << label << " prompt " << i << ": ended before min_tokens";
        EXPECT_EQ(std::vector<int32_t>(b.tokens.begin(), b.tokens.begin() + static_cast<int64_t>(k)),
                  std::vector<int32_t>(g.begin(), g.begin() + static_cast<int64_t>(k)));
        for (size_t t = 0; t < k + 2; ++t)
            EXPECT_NE(b.tokens[t], stop_id(i)) << label << " prompt " << i << ": stop id sampled at " << t;
        if (b.reason == finish_reason::stop) {
            EXPECT_EQ(b.tokens.back(), stop_id(i));
        }
    }
    std::printf("[stop_token_ids] %s: %zu prompt(s) stopped at their stop id, min_tokens held\n", label.c_str(),
                checked);
}

}  // namespace zmoe::testing
