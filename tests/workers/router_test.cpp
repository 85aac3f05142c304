// The routers against hand-computed cases: DeepSeek-V3's grouped sigmoid selection with its correction bias,
// DeepSeek-V2's group-limited softmax, and the scaling / renormalisation order.

#include "workers/router.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace zmoe {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Eight experts in four groups of two: {0,1} {2,3} {4,5} {6,7}.
const std::vector<float> kLogits = {3.f, -5.f, 1.f, 1.f, 0.5f, 0.5f, -3.f, -3.f};

router_params v3(const float* bias, bool norm, float scaling) {
    return {.kind = router_kind::sigmoid_group_limited,
            .num_experts = 8,
            .top_k = 2,
            .n_group = 4,
            .topk_group = 2,
            .norm_topk_prob = norm,
            .scaling = scaling,
            .bias = bias};
}

TEST(Router, SigmoidGroupsRankByTheirTopTwo) {
    // Expert 0 scores best alone, but its group's top-2 sum (with expert 1) loses to groups {2,3} and {4,5}.
    const std::vector<float> zero(8, 0.f);
    const routing r = route(kLogits.data(), v3(zero.data(), true, 2.5f));
    EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 3}));  // tie: lower index first
    ASSERT_EQ(r.weights.size(), 2u);
    EXPECT_FLOAT_EQ(r.weights[0], 0.5f * 2.5f);  // renormalised, then scaled
    EXPECT_FLOAT_EQ(r.weights[1], 0.5f * 2.5f);
}

TEST(Router, CorrectionBiasSelectsButDoesNotWeigh) {
    std::vector<float> bias(8, 0.f);
    bias[4] = 1.0f;  // lifts expert 4 (and its group) above the rest
    const routing r = route(kLogits.data(), v3(bias.data(), false, 1.f));
    EXPECT_EQ(r.experts, (std::vector<int32_t>{4, 2}));
    ASSERT_EQ(r.weights.size(), 2u);
    EXPECT_FLOAT_EQ(r.weights[0], sigmoid(0.5f));  // the plain sigmoid score, no bias
    EXPECT_FLOAT_EQ(r.weights[1], sigmoid(1.f));
    const routing n = route(kLogits.data(), v3(bias.data(), true, 1.f));
    EXPECT_FLOAT_EQ(n.weights[0], sigmoid(0.5f) / (sigmoid(0.5f) + sigmoid(1.f) + 1e-20f));
}

TEST(Router, SoftmaxGroupLimitedRanksGroupsByTheirBest) {
    router_params p{.kind = router_kind::softmax_group_limited,
                    .num_experts = 8,
                    .top_k = 2,
                    .n_group = 4,
                    .topk_group = 2,
                    .scaling = 1.5f};
    const routing r = route(kLogits.data(), p);
    // Groups {0,1} (best 3) and {2,3} (best 1) are kept; top-2 of {0,1,2,3}.
    EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 2}));
    float sum = 0.f;
    for (float l : kLogits) sum += std::exp(l - 3.f);
    EXPECT_NEAR(r.weights[0], 1.0f / sum * 1.5f, 1e-6f);  // softmax over all experts, not renormalised
    EXPECT_NEAR(r.weights[1], std::exp(1.f - 3.f) / sum * 1.5f, 1e-6f);
    // Keeping one group only leaves {0,1}.
    p.topk_group = 1;
    EXPECT_EQ(route(kLogits.data(), p).experts, (std::vector<int32_t>{0, 1}));
}

TEST(Router, SoftmaxTopKIsUnchangedWithoutGroups) {
    const router_params p{.kind = router_kind::softmax_topk, .num_experts = 8, .top_k = 3, .norm_topk_prob = true};
    const routing r = route(kLogits.data(), p);
    EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 2, 3}));
    EXPECT_NEAR(r.weights[0] + r.weights[1] + r.weights[2], 1.0f, 1e-6f);
}

}  // namespace
}  // namespace zmoe
