#pragma once
// One check of a backend's sampling parameters, run on the CPU model runner (tests/workers/sampling_params_test.cpp)
// and on the CUDA executor (tests/workers_cuda/cuda_sampling_params_test.cpp).
//
// Each case runs a fixture's prompts (two seeds each, chunked prefill, then decodes: on CUDA most of them replayed
// from the decode graphs) through the executor with one parameter set, and redraws every sampled token on the
// host from the executor's own logits with the sampler's reference (kernels::ref through workers/sampler.hpp),
// the penalty history rebuilt independently from the prompt and the tokens generated so far: the tokens must be
// equal, exactly, at every step. A parameter the backend failed to apply would show, because each case also
// requires that the parameter changes at least one draw against plain temperature sampling with the same seed.
// Logprobs equal the reference log-softmax of the executor's logits (top ids exactly) and, at the first token, a
// log-softmax of the transformers reference logits within the backend's own logit error (log-softmax moves at
// most twice the largest logit error).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "reference_fixture.hpp"
#include "step_driver.hpp"
#include "workers/sampler.hpp"
#include "workers/step_executor.hpp"

namespace zmoe::testing {

struct params_case {
    const char* name;
    sampling_params sampling;
    bool changes_draws;  ///< the parameter must change at least one draw
};

inline void PrintTo(const params_case& c, std::ostream* os) { *os << c.name; }

/// Indices of the k largest of `v`.
inline std::vector<int32_t> top_ids(const std::vector<float>& v, size_t k) {
    std::vector<int32_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + static_cast<int64_t>(k), idx.end(),
                      [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
    idx.resize(k);
    return idx;
}

inline std::vector<double> log_softmax(const std::vector<float>& v) {
    double m = -INFINITY, s = 0;
    for (float x : v) m = std::max(m, double(x));
    for (float x : v) s += std::exp(double(x) - m);
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = double(v[i]) - m - std::log(s);
    return out;
}

/// Runs `pc` on `ex` over `prompts` (see the top of this file); `logit_tolerance`: the largest relative error of
/// the backend's first-token logits against transformers'.
inline void check_sampling_params(step_executor& ex, const std::vector<ref_prompt>& prompts, const params_case& pc,
                                  const std::string& label, int64_t block_size, double logit_tolerance) {
    ASSERT_FALSE(prompts.empty());
    const auto V = static_cast<int32_t>(ex.config().vocab_size);
    sampling_params base = pc.sampling;
    if (base.min_tokens > 0)  // the engine core fills these from the stop ids: ban the likeliest first tokens
        base.min_tokens_stop_ids = top_ids(prompts[0].last_logits, 8);
    const int64_t kNew = 8;
    step_driver driver(block_size, 5);
    for (size_t i = 0; i < prompts.size() * 2; ++i) {
        sampling_params s = base;
        s.seed = 11 + 7 * i;
        driver.add(i, prompts[i % prompts.size()].token_ids, kNew).sampling = s;
    }
    size_t draws = 0, changed = 0, logprob_rows = 0;
    while (!driver.all_done()) {
        const step_request r = driver.next();
        std::vector<std::vector<float>> logits;
        const step_result res = ex.execute(r, &logits);
        size_t k = 0;
        for (const scheduled_seq& q : r.seqs) {
            if (!q.do_sample) continue;
            const driven_seq& d = driver.find(q.request_id);
            const std::vector<float>& row = logits.at(k);
            // The reference: the CPU sampler on these logits, the history rebuilt from prompt + generated.
            std::vector<int32_t> history = d.prompt;
            history.insert(history.end(), d.generated.begin(), d.generated.end());
            sample_batch want;
            want.add(q, &history);
            const std::vector<sampled_token> ref =
                sample_rows(row.data(), V, want, std::vector<uint64_t>{q.request_id});
            const sampled_token& got = res.tokens.at(k);
            ASSERT_EQ(got.request_id, q.request_id);
            ASSERT_EQ(got.token_id, ref[0].token_id)
                << label << " " << pc.name << " request " << q.request_id << " token " << q.sample_index;
            ++draws;
            const sampling_params plain{.temperature = q.sampling.temperature, .seed = q.sampling.seed};
            if (sample_token(row.data(), V, plain, q.sample_index) != got.token_id) ++changed;
            if (q.sample_index < base.min_tokens) {
                for (int32_t b : base.min_tokens_stop_ids) {
                    ASSERT_NE(got.token_id, b) << "min_tokens let a stop id out";
                }
            }

            ASSERT_EQ(got.logprobs.has_value(), q.sampling.logprobs >= 0);
            if (got.logprobs) {
                ++logprob_rows;
                const token_logprobs& lp = *got.logprobs;
                const token_logprobs& rl = *ref[0].logprobs;
                EXPECT_EQ(lp.top_ids, rl.top_ids);
                ASSERT_EQ(lp.top_logprobs.size(), rl.top_logprobs.size());
                EXPECT_NEAR(lp.logprob, rl.logprob, 1e-4);
                for (size_t j = 0; j < rl.top_logprobs.size(); ++j)
                    EXPECT_NEAR(lp.top_logprobs[j], rl.top_logprobs[j], 1e-4);
                if (q.sample_index == 0) {
                    // Against transformers: log-softmax is 2-Lipschitz in the max norm of the logits.
                    const std::vector<float>& hf = prompts[q.request_id % prompts.size()].last_logits;
                    double err = 0, scale = 0;
                    for (size_t i = 0; i < hf.size(); ++i) {
                        err = std::max(err, std::abs(double(row[i]) - hf[i]));
                        scale = std::max(scale, std::abs(double(hf[i])));
                    }
                    EXPECT_LE(err, logit_tolerance * scale);
                    const std::vector<double> want_lp = log_softmax(hf);
                    EXPECT_NEAR(lp.logprob, want_lp[static_cast<size_t>(got.token_id)], 2 * err + 1e-4);
                    for (size_t j = 0; j < lp.top_ids.size(); ++j)
                        EXPECT_NEAR(lp.top_logprobs[j], want_lp[static_cast<size_t>(lp.top_ids[j])], 2 * err + 1e-4);
                }
            }
            ++k;
        }
        driver.record(r, res, logits);
    }
    EXPECT_EQ(draws, prompts.size() * 2 * kNew);
    if (pc.changes_draws) {
        EXPECT_GT(changed, 0u) << pc.name << " changed no draw: the parameter had no effect";
    }
    if (pc.sampling.logprobs >= 0) {
        EXPECT_EQ(logprob_rows, draws);
    }
    std::printf("[sampling] %s %s: %zu draws equal to the CPU sampler's, %zu changed by the parameter\n", label.c_str(),
                pc.name, draws, changed);
}

/// The parameter sets: one per parameter, and all of them together.
inline const params_case kSamplingCases[] = {
    {"top_k", {.temperature = 1.f, .top_k = 3}, true},
    {"top_p", {.temperature = 1.f, .top_p = 0.5f}, true},
    {"min_p", {.temperature = 1.f, .min_p = 0.3f}, true},
    {"presence_penalty", {.temperature = 0.f, .presence_penalty = 2.f}, true},
    {"frequency_penalty", {.temperature = 0.f, .frequency_penalty = 1.5f}, true},
    {"repetition_penalty", {.temperature = 0.5f, .repetition_penalty = 3.f}, true},
    {"greedy_repetition_penalty", {.temperature = 0.f, .repetition_penalty = 3.f}, true},
    {"logit_bias",
     {.temperature = 0.7f, .logit_bias_ids = {3, 40, 77, 200}, .logit_bias_values = {6.f, -100.f, 4.f, 5.f}},
     true},
    {"min_tokens", {.temperature = 0.f, .min_tokens = 6}, true},
    {"logprobs", {.temperature = 1.f, .logprobs = 5}, false},
    {"greedy_logprobs_max", {.temperature = 0.f, .logprobs = 20}, false},
    {"all_together",
     {.temperature = 0.9f,
      .top_p = 0.9f,
      .top_k = 20,
      .min_p = 0.05f,
      .presence_penalty = 0.5f,
      .frequency_penalty = 0.3f,
      .repetition_penalty = 1.3f,
      .min_tokens = 3,
      .logit_bias_ids = {5, 9},
      .logit_bias_values = {3.f, -3.f},
      .logprobs = 3},
     true},
};

}  // namespace zmoe::testing
