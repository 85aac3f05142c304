// launch_router_grouped against ref::router_grouped: DeepSeek-V3's sigmoid + bias group-limited routing and
// DeepSeek-V2's softmax group-limited and greedy routing; ids exact, weights to fp32 rounding.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct grouped_case {
    int32_t num_tokens, num_experts, top_k, n_group, topk_group;
    bool sigmoid, renormalize;
    float scaling;
    bool ties;  ///< logits on a coarse grid: equal scores test the lower-index-first rules
};

class RouterGrouped : public ::testing::TestWithParam<grouped_case> {};

TEST_P(RouterGrouped, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens * 5 + c.num_experts + c.top_k * 3 + c.n_group);
    auto logits = random_f32(size_t(c.num_tokens) * c.num_experts, 4.f, rng);
    if (c.ties)
        for (auto& l : logits) l = std::round(l);
    const auto bias = random_f32(c.num_experts, 0.5f, rng);
    auto d_logits = upload(logits);
    auto d_bias = upload(bias);
    device_buffer<int32_t> d_ids(size_t(c.num_tokens) * c.top_k);
    device_buffer<float> d_w(size_t(c.num_tokens) * c.top_k);
    d_ids.poison();
    d_w.poison();
    launch_router_grouped({.logits = d_logits.get(),
                           .bias = c.sigmoid ? d_bias.get() : nullptr,
                           .topk_ids = d_ids.get(),
                           .topk_weights = d_w.get(),
                           .num_tokens = c.num_tokens,
                           .num_experts = c.num_experts,
                           .top_k = c.top_k,
                           .n_group = c.n_group,
                           .topk_group = c.topk_group,
                           .scoring = c.sigmoid ? router_scoring::sigmoid : router_scoring::softmax,
                           .renormalize = c.renormalize,
                           .scaling = c.scaling},
                          nullptr);
    sync_and_check();
    std::vector<int32_t> ids(d_ids.size());
    std::vector<float> weights(d_w.size());
    ref::router_grouped({.num_tokens = c.num_tokens,
                         .num_experts = c.num_experts,
                         .top_k = c.top_k,
                         .n_group = c.n_group,
                         .topk_group = c.topk_group,
                         .sigmoid = c.sigmoid,
                         .renormalize = c.renormalize,
                         .scaling = c.scaling},
                        logits.data(), c.sigmoid ? bias.data() : nullptr, ids.data(), weights.data());
    EXPECT_EQ(download(d_ids), ids);
    EXPECT_LT(rel_error(download(d_w), weights), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RouterGrouped,
    ::testing::Values(grouped_case{1, 16, 4, 4, 2, true, true, 2.5f, false},      // the V3 fixtures
                      grouped_case{37, 16, 4, 4, 2, true, true, 2.5f, true},      //   with ties
                      grouped_case{1000, 256, 8, 8, 4, true, true, 2.5f, false},  // DeepSeek-V3
                      grouped_case{64, 256, 8, 8, 4, true, false, 1.f, true},
                      grouped_case{300, 8, 2, 1, 1, true, false, 1.f, false},      // deepseek_v3_flat
                      grouped_case{200, 8, 3, 4, 2, false, false, 1.5f, false},    // V2 group_limited_greedy
                      grouped_case{500, 160, 6, 8, 3, false, false, 16.f, false},  // DeepSeek-V2
                      grouped_case{99, 64, 6, 1, 1, false, true, 1.f, true},       // V2 greedy (V2-Lite)
                      grouped_case{17, 512, 16, 32, 4, true, true, 1.f, false},
                      grouped_case{0, 256, 8, 8, 4, true, true, 2.5f, false}),
    [](const auto& info) {
        const auto& c = info.param;
        return make_name("t", c.num_tokens, "_e", c.num_experts, "_k", c.top_k, "_g", c.n_group, "of", c.topk_group,
                         c.sigmoid ? "_sigmoid" : "_softmax", c.renormalize ? "_renorm" : "", c.ties ? "_ties" : "");
    });

}  // namespace
}  // namespace zmoe::kernels::test
