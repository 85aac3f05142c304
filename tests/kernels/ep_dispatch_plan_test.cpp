// launch_ep_dispatch_plan against ref::ep_dispatch_plan: send rows, slots, source rows, counts and the overflow flag
// exact, over world sizes, capacities that fit and that overflow, chunks of more than one block's threads, and no
// tokens.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct plan_case {
    int32_t num_tokens, top_k, num_ranks, slots_per_rank;
    int32_t capacity;  ///< 0: num_tokens * top_k (every choice fits)
    bool skewed;       ///< most choices to rank 0
};

class EpDispatchPlan : public ::testing::TestWithParam<plan_case> {};

TEST_P(EpDispatchPlan, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens * 31 + c.num_ranks * 7 + c.capacity);
    const int32_t TK = c.num_tokens * c.top_k;
    const int32_t C = c.capacity > 0 ? c.capacity : std::max(TK, 1);
    const int32_t num_slots = c.num_ranks * c.slots_per_rank;
    std::vector<int32_t> slots(static_cast<size_t>(TK));
    for (auto& s : slots)
        s = c.skewed && rng() % 4 != 0 ? static_cast<int32_t>(rng() % c.slots_per_rank)
                                       : static_cast<int32_t>(rng() % num_slots);
    const size_t rows = size_t(c.num_ranks) * C;
    auto d_slots = upload(slots);
    device_buffer<int32_t> d_token(rows), d_slot(rows), d_src(size_t(std::max(TK, 1))), d_counts(c.num_ranks);
    auto d_overflow = upload(std::vector<int32_t>{0});
    d_token.poison();
    d_slot.poison();
    d_src.poison();
    d_counts.poison();
    launch_ep_dispatch_plan({.slot_ids = d_slots.get(),
                             .send_token = d_token.get(),
                             .send_slot = d_slot.get(),
                             .src_row = d_src.get(),
                             .send_counts = d_counts.get(),
                             .overflow = d_overflow.get(),
                             .num_tokens = c.num_tokens,
                             .top_k = c.top_k,
                             .num_ranks = c.num_ranks,
                             .slots_per_rank = c.slots_per_rank,
                             .capacity = C},
                            nullptr);
    sync_and_check();

    std::vector<int32_t> token(rows), slot(rows), src(static_cast<size_t>(TK)), counts(c.num_ranks);
    const bool overflow = ref::ep_dispatch_plan(slots.data(), c.num_tokens, c.top_k, c.num_ranks, c.slots_per_rank, C,
                                                token.data(), slot.data(), src.data(), counts.data());
    EXPECT_EQ(download(d_token), token);
    EXPECT_EQ(download(d_slot), slot);
    std::vector<int32_t> got_src = download(d_src);
    got_src.resize(size_t(TK));
    EXPECT_EQ(got_src, src);
    EXPECT_EQ(download(d_counts), counts);
    EXPECT_EQ(download(d_overflow)[0], overflow ? 1 : 0);
    if (c.capacity == 0) {
        EXPECT_FALSE(overflow) << "a capacity of every choice never overflows";
    }
    // Every choice that fits round-trips: its row names its token and its local slot.
    std::vector<int32_t> due(c.num_ranks, 0);
    for (int32_t i = 0; i < TK; ++i)
        if (due[slots[i] / c.slots_per_rank]++ < C) {
            EXPECT_EQ(token[src[i]], i / c.top_k);
            EXPECT_EQ(slot[src[i]], slots[i] % c.slots_per_rank);
        }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EpDispatchPlan,
                         ::testing::Values(plan_case{1, 2, 2, 4, 0, false}, plan_case{128, 8, 2, 64, 768, false},
                                           plan_case{256, 8, 4, 32, 0, false}, plan_case{300, 8, 2, 64, 64, false},
                                           plan_case{77, 4, 8, 16, 40, true}, plan_case{2048, 8, 2, 64, 9000, true},
                                           plan_case{0, 8, 2, 64, 16, false}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("t", c.num_tokens, "_k", c.top_k, "_ranks", c.num_ranks, "_slots",
                                              c.slots_per_rank, "_cap", c.capacity, c.skewed ? "_skewed" : "");
                         });

}  // namespace
}  // namespace zmoe::kernels::test
