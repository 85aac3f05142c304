// launch_router_topk against ref::router_topk: ids and counts exact, weights to fp32 rounding; with the replica
// choice fused in, slot ids and load counts exactly as ref::moe_route computes them from the same ids.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct router_case {
    int32_t num_tokens, num_experts, top_k;
    bool renormalize;
    bool ties;  ///< logits on a coarse grid, so that equal logits test the lower-index-first rule
};

class RouterTopk : public ::testing::TestWithParam<router_case> {};

/// Gate logits for the case (on a coarse grid when it tests ties).
std::vector<float> make_logits(const router_case& c, std::mt19937& rng) {
    auto logits = random_f32(size_t(c.num_tokens) * c.num_experts, 4.f, rng);
    if (c.ties)
        for (auto& l : logits) l = std::round(l);
    return logits;
}

TEST_P(RouterTopk, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens * 3 + c.num_experts + c.top_k);
    const auto logits = make_logits(c, rng);

    auto d_logits = upload(logits);
    device_buffer<int32_t> d_ids(size_t(c.num_tokens) * c.top_k), d_counts(c.num_experts);
    device_buffer<float> d_w(size_t(c.num_tokens) * c.top_k);
    d_ids.poison();
    d_w.poison();
    d_counts.poison(0x11);  // the launcher must zero the counts itself
    launch_router_topk({.logits = d_logits.get(),
                        .topk_ids = d_ids.get(),
                        .topk_weights = d_w.get(),
                        .expert_counts = d_counts.get(),
                        .num_tokens = c.num_tokens,
                        .num_experts = c.num_experts,
                        .top_k = c.top_k,
                        .renormalize = c.renormalize},
                       nullptr);
    sync_and_check();

    std::vector<int32_t> ids(d_ids.size()), counts(c.num_experts);
    std::vector<float> weights(d_w.size());
    ref::router_topk(logits.data(), ids.data(), weights.data(), counts.data(), c.num_tokens, c.num_experts, c.top_k,
                     c.renormalize);
    EXPECT_EQ(download(d_ids), ids);
    EXPECT_EQ(download(d_counts), counts);
    EXPECT_LT(rel_error(download(d_w), weights), 1e-5);
}

TEST_P(RouterTopk, FusedReplicaChoiceMatchesMoeRoute) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens * 5 + c.num_experts + c.top_k);
    const auto logits = make_logits(c, rng);
    // Expert e has 1 + e % 3 replicas over 2 ranks' slots; the last quarter of the tokens is padding.
    std::vector<int32_t> offsets{0}, slots;
    for (int32_t e = 0; e < c.num_experts; ++e) {
        for (int32_t r = 0; r <= e % 3; ++r) slots.push_back((e * 7 + r * 13) % (2 * c.num_experts));
        offsets.push_back(int32_t(slots.size()));
    }
    const int32_t num_valid = c.num_tokens - c.num_tokens / 4;
    std::vector<int32_t> base_counts(c.num_experts);
    for (auto& v : base_counts) v = int32_t(rng() % 5);  // counts are added to, not zeroed

    auto d_logits = upload(logits);
    auto d_offsets = upload(offsets);
    auto d_slots = upload(slots);
    auto d_valid = upload(std::vector<int32_t>{num_valid});
    auto d_load = upload(base_counts);
    device_buffer<int32_t> d_ids(size_t(c.num_tokens) * c.top_k), d_slot_ids(size_t(c.num_tokens) * c.top_k);
    device_buffer<float> d_w(size_t(c.num_tokens) * c.top_k);
    d_ids.poison();
    d_slot_ids.poison();
    d_w.poison();
    launch_router_topk({.logits = d_logits.get(),
                        .topk_ids = d_ids.get(),
                        .topk_weights = d_w.get(),
                        .expert_counts = nullptr,
                        .num_tokens = c.num_tokens,
                        .num_experts = c.num_experts,
                        .top_k = c.top_k,
                        .renormalize = c.renormalize,
                        .replica_offsets = d_offsets.get(),
                        .replica_slots = d_slots.get(),
                        .num_valid = d_valid.get(),
                        .slot_ids = d_slot_ids.get(),
                        .load_counts = d_load.get()},
                       nullptr);
    sync_and_check();

    std::vector<int32_t> ids(d_ids.size()), counts(c.num_experts), slot_ids(d_ids.size());
    std::vector<float> weights(d_w.size());
    ref::router_topk(logits.data(), ids.data(), weights.data(), counts.data(), c.num_tokens, c.num_experts, c.top_k,
                     c.renormalize);
    std::vector<int32_t> load = base_counts;
    ref::moe_route(ids.data(), offsets.data(), slots.data(), num_valid, slot_ids.data(), load.data(), c.num_tokens,
                   c.top_k);
    EXPECT_EQ(download(d_ids), ids);
    EXPECT_EQ(download(d_slot_ids), slot_ids);
    EXPECT_EQ(download(d_load), load);
    EXPECT_LT(rel_error(download(d_w), weights), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RouterTopk,
                         ::testing::Values(router_case{1, 8, 2, true, false}, router_case{5, 60, 4, false, false},
                                           router_case{1000, 128, 8, true, false},
                                           router_case{4096, 128, 8, true, true},
                                           router_case{4096, 256, 8, false, false},
                                           router_case{333, 512, 16, true, false}, router_case{64, 8, 2, false, true},
                                           router_case{0, 128, 8, true, false}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("t", c.num_tokens, "_e", c.num_experts, "_k", c.top_k,
                                              (c.renormalize ? "_renorm" : "_raw"), (c.ties ? "_ties" : ""));
                         });

}  // namespace
}  // namespace zmoe::kernels::test
