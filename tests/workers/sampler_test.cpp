#include "workers/sampler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <span>

#include "kernels/reference/reference.hpp"
#include "kernels/sample_rng.hpp"

namespace zmoe {
namespace {

TEST(Sampler, GreedyTakesLowestIndexOnTies) {
    const std::vector<float> l = {0.f, 5.f, NAN, 5.f, -1.f};
    sampling_params p;  // temperature 0
    EXPECT_EQ(sample_token(l.data(), 5, p, 0), 1);
    EXPECT_EQ(sample_token(l.data(), 5, p, 9), 1);
}

TEST(Sampler, NoiseIsAPureFunctionInTheOpenUnitInterval) {
    std::set<float> seen;
    for (uint32_t i = 0; i < 1000; ++i) {
        const float u = kernels::sample_uniform(42, i, 7);
        ASSERT_GT(u, 0.f);
        ASSERT_LT(u, 1.f);
        EXPECT_EQ(u, kernels::sample_uniform(42, i, 7));
        seen.insert(u);
    }
    EXPECT_GT(seen.size(), 990u);  // 24-bit values: a few collisions among 1000 draws are expected
    EXPECT_NE(kernels::sample_uniform(1, 0, 0), kernels::sample_uniform(2, 0, 0));
    EXPECT_NE(kernels::sample_uniform(1, 0, 0), kernels::sample_uniform(1, 1, 0));
    EXPECT_NE(kernels::sample_uniform(1, 0, 0), kernels::sample_uniform(1, 0, 1));
}

// The CPU backend has no sampling rule of its own: for every parameter combination it draws what the CUDA
// kernel's reference draws (and kernels_test checks the kernel against that reference, token for token).
TEST(Sampler, EqualsTheKernelReference) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.f, 3.f);
    const struct {
        float temperature, top_p;
        int32_t top_k;
    } cases[] = {{0.f, 1.f, 0}, {1.f, 1.f, 0}, {0.7f, 1.f, 40}, {1.f, 0.9f, 0}, {0.8f, 0.95f, 20}, {1.3f, 0.5f, 1}};
    for (const int32_t vocab : {7, 300, 5000}) {
        std::vector<float> logits(vocab);
        for (auto& l : logits) l = normal(rng);
        for (const auto& c : cases) {
            const sampling_params p{.temperature = c.temperature, .top_p = c.top_p, .top_k = c.top_k, .seed = 1234};
            std::set<int32_t> drawn;
            for (uint32_t n = 0; n < 64; ++n) {
                const int32_t got = sample_token(logits.data(), vocab, p, n);
                ASSERT_EQ(got, kernels::ref::sample(logits.data(), vocab, c.temperature, c.top_p, c.top_k, 1234, n))
                    << "vocab " << vocab << " temperature " << c.temperature << " n " << n;
                drawn.insert(got);
            }
            if (c.temperature > 0.f && c.top_k != 1) {
                EXPECT_GT(drawn.size(), 1u) << "it does sample";
            }
        }
    }
}

TEST(Sampler, SameSeedAndIndexSameToken) {
    std::vector<float> l(100);
    for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::sin(i * 1.3));
    sampling_params p{0.8f, 0.9f, 0, 1234};
    for (uint32_t i = 0; i < 50; ++i) EXPECT_EQ(sample_token(l.data(), 100, p, i), sample_token(l.data(), 100, p, i));
    std::set<int32_t> tokens;
    for (uint32_t i = 0; i < 50; ++i) tokens.insert(sample_token(l.data(), 100, p, i));
    EXPECT_GT(tokens.size(), 3u);  // it does sample
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
    const std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    sampling_params p{1.f, 1.f, 0, 7};
    std::map<int32_t, int> count;
    const int n = 20000;
    for (uint32_t i = 0; i < n; ++i) ++count[sample_token(l.data(), 3, p, i)];
    EXPECT_NEAR(count[0] / double(n), 0.5, 0.02);
    EXPECT_NEAR(count[1] / double(n), 0.3, 0.02);
    EXPECT_NEAR(count[2] / double(n), 0.2, 0.02);
    // Temperature 0.5 squares the odds: 0.25 : 0.09 : 0.04.
    p.temperature = 0.5f;
    count.clear();
    for (uint32_t i = 0; i < n; ++i) ++count[sample_token(l.data(), 3, p, i)];
    EXPECT_NEAR(count[0] / double(n), 0.25 / 0.38, 0.02);
}

TEST(Sampler, TopKAndTopPRestrictTheCandidates) {
    const std::vector<float> l = {std::log(0.1f), std::log(0.4f), std::log(0.05f), std::log(0.3f), std::log(0.15f)};
    sampling_params p{1.f, 1.f, 2, 99};
    std::set<int32_t> seen;
    for (uint32_t i = 0; i < 2000; ++i) seen.insert(sample_token(l.data(), 5, p, i));
    EXPECT_EQ(seen, (std::set<int32_t>{1, 3}));
    p.top_k = 0;
    p.top_p = 0.8f;  // 0.4 + 0.3 = 0.7 < 0.8, + 0.15 = 0.85: tokens 1, 3, 4
    seen.clear();
    for (uint32_t i = 0; i < 2000; ++i) seen.insert(sample_token(l.data(), 5, p, i));
    EXPECT_EQ(seen, (std::set<int32_t>{1, 3, 4}));
    p.top_p = 0.01f;  // at least one token survives
    seen.clear();
    for (uint32_t i = 0; i < 200; ++i) seen.insert(sample_token(l.data(), 5, p, i));
    EXPECT_EQ(seen, (std::set<int32_t>{1}));
}

}  // namespace
}  // namespace zmoe

namespace zmoe {
namespace {

std::vector<float> random_logits(int32_t vocab, uint32_t seed, float scale = 2.f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.f, scale);
    std::vector<float> l(vocab);
    for (auto& x : l) x = normal(rng);
    return l;
}

/// A do_sample sequence of request `id` at its sample_index-th token.
scheduled_seq sampled_seq(uint64_t id, const sampling_params& p, uint32_t sample_index) {
    scheduled_seq s;
    s.request_id = id;
    s.do_sample = true;
    s.sample_index = sample_index;
    s.sampling = p;
    return s;
}

std::vector<sampled_token> sample_one(const std::vector<float>& logits, const scheduled_seq& s,
                                      const std::vector<int32_t>* history = nullptr) {
    sample_batch b;
    b.add(s, history);
    const uint64_t id = s.request_id;
    return sample_rows(logits.data(), static_cast<int64_t>(logits.size()), b, std::span<const uint64_t>(&id, 1));
}

TEST(SamplerLogprobs, EqualLogSoftmaxOfTheRawLogits) {
    const auto l = random_logits(500, 1);
    double m = -INFINITY, z = 0;
    for (float x : l) m = std::max(m, double(x));
    for (float x : l) z += std::exp(double(x) - m);
    const double lse = m + std::log(z);
    std::vector<int32_t> order(l.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    // Temperature and penalties change what is drawn, never the logprobs reported (vLLM's raw logprobs).
    for (const sampling_params& p :
         {sampling_params{.temperature = 0.f, .logprobs = 5},
          sampling_params{.temperature = 0.7f, .seed = 3, .repetition_penalty = 1.5f, .logprobs = 20},
          sampling_params{.temperature = 1.f, .seed = 4, .logprobs = 0}}) {
        const std::vector<int32_t> history = {1, 2, 3, order[0]};
        const auto t = sample_one(l, sampled_seq(9, p, 2), &history);
        ASSERT_EQ(t.size(), 1u);
        ASSERT_TRUE(t[0].logprobs.has_value());
        const token_logprobs& lp = *t[0].logprobs;
        EXPECT_NEAR(lp.logprob, l[t[0].token_id] - lse, 1e-5);
        ASSERT_EQ(lp.top_ids.size(), static_cast<size_t>(p.logprobs));
        for (int32_t j = 0; j < p.logprobs; ++j) {
            EXPECT_EQ(lp.top_ids[j], order[j]);
            EXPECT_NEAR(lp.top_logprobs[j], l[order[j]] - lse, 1e-5);
        }
    }
    const auto none = sample_one(l, sampled_seq(9, sampling_params{}, 0));
    EXPECT_FALSE(none[0].logprobs.has_value());
}

// The penalties as vLLM and transformers define them, written out directly: repetition (CTRL) on every token of
// prompt and output, l > 0 ? l / r : l * r; then l -= frequency * count_in_output + presence * (count > 0).
std::vector<float> penalised(std::vector<float> l, const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& output, const sampling_params& p) {
    std::map<int32_t, int> count;
    std::set<int32_t> seen(prompt.begin(), prompt.end());
    for (int32_t t : output) ++count[t], seen.insert(t);
    for (int32_t t : seen) l[t] = l[t] > 0 ? l[t] / p.repetition_penalty : l[t] * p.repetition_penalty;
    for (auto [t, c] : count) l[t] -= p.frequency_penalty * c + p.presence_penalty;
    return l;
}

TEST(SamplerPenalties, MatchTheDirectFormula) {
    const int32_t V = 64;
    const auto l = random_logits(V, 2);
    const std::vector<int32_t> prompt = {1, 5, 5, 9, 40, 63};
    const std::vector<int32_t> output = {5, 7, 7, 7, 12, 40, 0};
    std::vector<int32_t> fed = prompt;
    fed.insert(fed.end(), output.begin(), output.end());
    for (const sampling_params& p :
         {sampling_params{.repetition_penalty = 1.3f}, sampling_params{.repetition_penalty = 0.7f},
          sampling_params{.presence_penalty = 1.5f}, sampling_params{.frequency_penalty = 0.8f},
          sampling_params{.presence_penalty = -0.5f, .frequency_penalty = 0.25f, .repetition_penalty = 1.1f}}) {
        const auto want = penalised(l, prompt, output, p);
        sample_batch b;
        b.add(sampled_seq(1, p, static_cast<uint32_t>(output.size())), &fed);
        std::vector<float> got(V);
        kernels::ref::process_logits(l.data(), V, b.seqs[0], b.inputs(), got.data());
        for (int32_t i = 0; i < V; ++i) EXPECT_NEAR(got[i], want[i], 1e-6f * std::max(1.f, std::abs(want[i]))) << i;
        // Greedy picks the argmax of the penalised logits.
        const auto t = sample_one(l, sampled_seq(1, p, static_cast<uint32_t>(output.size())), &fed);
        EXPECT_EQ(t[0].token_id, std::max_element(want.begin(), want.end()) - want.begin());
    }
}

// The history a worker keeps: tokens by position, placeholders resolved, a recompute overwriting from its start;
// at a sample, the last sample_index fed tokens are the output.
TEST(SamplerPenalties, HistoryFollowsTheSteps) {
    token_history h;
    const sampling_params p{.frequency_penalty = 1.f};
    std::vector<uint64_t> ids;
    step_request prefill;
    prefill.seqs.push_back(sampled_seq(3, p, 0));
    prefill.seqs[0].token_ids = {10, 11, 12};
    auto b = gather_samples(prefill, {{10, 11, 12}}, h, ids);
    EXPECT_EQ(b.seqs[0].num_prompt, 3);
    EXPECT_EQ(b.seqs[0].num_output, 0);
    step_request decode;
    decode.seqs.push_back(sampled_seq(3, p, 1));
    decode.seqs[0].token_ids = {kPlaceholderToken};
    decode.seqs[0].start_pos = 3;
    b = gather_samples(decode, {{20}}, h, ids);  // the placeholder resolved to the token sampled before
    EXPECT_EQ(*h.find(3), (std::vector<int32_t>{10, 11, 12, 20}));
    EXPECT_EQ(b.seqs[0].num_prompt, 3);
    EXPECT_EQ(b.seqs[0].num_output, 1);
    EXPECT_EQ(ids, std::vector<uint64_t>{3});
    step_request recompute;  // preempted and readmitted: prompt + output again from position 0
    recompute.seqs.push_back(sampled_seq(3, p, 2));
    recompute.seqs[0].token_ids = {10, 11, 12, 20, 21};
    b = gather_samples(recompute, {{10, 11, 12, 20, 21}}, h, ids);
    EXPECT_EQ(*h.find(3), (std::vector<int32_t>{10, 11, 12, 20, 21}));
    EXPECT_EQ(b.seqs[0].num_output, 2);
    step_request done;
    done.finished_ids = {3};
    gather_samples(done, {}, h, ids);
    EXPECT_EQ(h.find(3), nullptr);
    // Requests without penalties keep no history.
    step_request plain;
    plain.seqs.push_back(sampled_seq(4, sampling_params{.temperature = 1.f}, 0));
    gather_samples(plain, {{1, 2}}, h, ids);
    EXPECT_EQ(h.find(4), nullptr);
}

TEST(SamplerMinP, KeepsTokensAtLeastMinPTimesTheMostLikely) {
    const std::vector<float> l = {std::log(0.4f), std::log(0.3f), std::log(0.15f), std::log(0.1f), std::log(0.05f)};
    for (const float min_p : {0.2f, 0.3f, 0.5f, 1.f}) {
        std::set<int32_t> want;
        for (int32_t i = 0; i < 5; ++i)
            if (std::exp(l[i]) >= min_p * 0.4f * (1 - 1e-6f)) want.insert(i);
        std::set<int32_t> seen;
        for (uint32_t n = 0; n < 3000; ++n)
            seen.insert(sample_token(l.data(), 5, {.temperature = 1.f, .seed = 5, .min_p = min_p}, n));
        EXPECT_EQ(seen, want) << "min_p " << min_p;
    }
}

TEST(SamplerLogitBias, IsAddedToTheLogits) {
    const auto l = random_logits(100, 3);
    const sampling_params p{.temperature = 0.f, .logit_bias_ids = {17, 50}, .logit_bias_values = {100.f, -3.f}};
    sample_batch b;
    b.add(sampled_seq(1, p, 0), nullptr);
    std::vector<float> got(100);
    kernels::ref::process_logits(l.data(), 100, b.seqs[0], b.inputs(), got.data());
    for (int32_t i = 0; i < 100; ++i) EXPECT_EQ(got[i], l[i] + (i == 17 ? 100.f : i == 50 ? -3.f : 0.f)) << i;
    EXPECT_EQ(sample_token(l.data(), 100, p, 0), 17);
    const sampling_params sampled{.temperature = 1.f, .seed = 1, .logit_bias_ids = {17}, .logit_bias_values = {100.f}};
    for (uint32_t n = 0; n < 100; ++n) EXPECT_EQ(sample_token(l.data(), 100, sampled, n), 17);
}

TEST(SamplerMinTokens, BansStopIdsUntilMinTokens) {
    std::vector<float> l(10, 0.f);
    l[2] = 5.f;  // the stop token is by far the most likely
    const sampling_params p{.temperature = 1.f, .seed = 2, .min_tokens = 3, .min_tokens_stop_ids = {2, 7}};
    for (uint32_t n = 0; n < 3; ++n)
        for (uint64_t seed = 0; seed < 50; ++seed) {
            sampling_params q = p;
            q.seed = seed;
            const int32_t t = sample_token(l.data(), 10, q, n);
            EXPECT_NE(t, 2);
            EXPECT_NE(t, 7);
        }
    int stops = 0;
    for (uint64_t seed = 0; seed < 50; ++seed) {
        sampling_params q = p;
        q.seed = seed;
        stops += sample_token(l.data(), 10, q, 3) == 2;
    }
    EXPECT_GT(stops, 25);  // p(2) = e^5 / (e^5 + 9) = 0.94 once min_tokens are out
}

}  // namespace
}  // namespace zmoe
