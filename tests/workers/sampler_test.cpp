#include "workers/sampler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

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
            if (c.temperature > 0.f && c.top_k != 1) EXPECT_GT(drawn.size(), 1u) << "it does sample";
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
