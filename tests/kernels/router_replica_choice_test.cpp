// launch_moe_route against ref::moe_route: slots and counts exact, over expert counts, replica layouts (one replica
// each, uneven redundant replicas, slots spread over several ranks) and padding.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct route_case {
    int32_t num_tokens, num_experts, top_k;
    int32_t extra_replicas;  ///< redundant replicas added to random experts
    int32_t num_valid;       ///< -1: no padding
};

class MoeRoute : public ::testing::TestWithParam<route_case> {};

TEST_P(MoeRoute, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens * 7 + c.num_experts + c.extra_replicas);
    // Replica lists: expert e has 1 + (its share of extra) replicas, slots numbered over a shuffled slot space.
    const auto [offsets, slots] = random_replicas(c.num_experts, c.extra_replicas, rng);
    std::vector<int32_t> ids(size_t(c.num_tokens) * c.top_k);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % c.num_experts);

    auto d_ids = upload(ids), d_offsets = upload(offsets), d_slots = upload(slots);
    auto d_valid = upload(std::vector<int32_t>{c.num_valid});
    std::vector<int32_t> counts0(c.num_experts);
    for (auto& n : counts0) n = static_cast<int32_t>(rng() % 5);  // counts accumulate: start from non-zero
    auto d_counts = upload(counts0);
    device_buffer<int32_t> d_out(ids.size());
    d_out.poison();
    launch_moe_route({.topk_ids = d_ids.get(),
                      .replica_offsets = d_offsets.get(),
                      .replica_slots = d_slots.get(),
                      .num_valid = c.num_valid < 0 ? nullptr : d_valid.get(),
                      .slot_ids = d_out.get(),
                      .expert_counts = d_counts.get(),
                      .num_tokens = c.num_tokens,
                      .top_k = c.top_k,
                      .num_experts = c.num_experts},
                     nullptr);
    sync_and_check();

    std::vector<int32_t> out(ids.size()), counts = counts0;
    ref::moe_route(ids.data(), offsets.data(), slots.data(), c.num_valid, out.data(), counts.data(), c.num_tokens,
                   c.top_k);
    EXPECT_EQ(download(d_out), out);
    EXPECT_EQ(download(d_counts), counts);
    if (c.num_valid >= 0 && c.num_valid < c.num_tokens) {
        int64_t added = 0;
        for (int32_t e = 0; e < c.num_experts; ++e) added += counts[e] - counts0[e];
        EXPECT_EQ(added, int64_t(c.num_valid) * c.top_k) << "padding tokens must not be counted";
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeRoute,
                         ::testing::Values(route_case{1, 8, 2, 0, -1}, route_case{7, 60, 4, 5, -1},
                                           route_case{256, 128, 8, 0, 200}, route_case{1000, 128, 8, 64, -1},
                                           route_case{4096, 256, 8, 32, 4000}, route_case{333, 1024, 16, 100, 1},
                                           route_case{0, 128, 8, 0, -1}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("t", c.num_tokens, "_e", c.num_experts, "_k", c.top_k, "_extra",
                                              c.extra_replicas, "_valid", c.num_valid < 0 ? 0 : c.num_valid);
                         });

}  // namespace
}  // namespace zmoe::kernels::test
