#include "messages/expert_placement.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "base/error.hpp"
#include "messages/worker_protocol.hpp"

namespace zmoe {
namespace {

// 2 ranks x 3 slots, 4 experts: expert 0 has replicas on both ranks, expert 3 two on rank 1.
expert_placement two_ranks() {
    return {.num_experts = 4, .num_ranks = 2, .slots_per_rank = 3, .physical_to_logical = {{0, 1, 2, 3, 0, 3}}};
}

TEST(ExpertPlacement, SlotsAndReplicasFollowThePhysicalMap) {
    const expert_placement p = two_ranks();
    ASSERT_NO_THROW(p.validate());
    const auto r1 = p.slots(0, 1);
    EXPECT_EQ(std::vector<int32_t>(r1.begin(), r1.end()), (std::vector<int32_t>{3, 0, 3}));
    const auto zero = p.replicas(0, 0);
    ASSERT_EQ(zero.size(), 2u);
    EXPECT_EQ(zero[0].rank, 0);
    EXPECT_EQ(zero[0].slot, 0);
    EXPECT_EQ(zero[1].rank, 1);
    EXPECT_EQ(zero[1].slot, 1);
    EXPECT_EQ(p.replicas(0, 2).size(), 1u);
}

TEST(ExpertPlacement, PickSpreadsTokensOverReplicasInSlotOrder) {
    const expert_placement p = two_ranks();
    for (int64_t t = 0; t < 6; ++t) {
        const auto all = p.replicas(0, 3);
        const expert_replica got = p.pick(0, 3, t);
        const expert_replica& want = all[static_cast<size_t>(t) % all.size()];
        EXPECT_EQ(got.rank, want.rank) << "token " << t;
        EXPECT_EQ(got.slot, want.slot) << "token " << t;
    }
    EXPECT_EQ(p.pick(0, 3, 0).slot, 0);  // physical slot 3
    EXPECT_EQ(p.pick(0, 3, 1).slot, 2);  // physical slot 5
    EXPECT_EQ(p.pick(0, 1, 7).rank, 0);  // one replica: always it
}

TEST(ExpertPlacement, MovesAreCheckedThenApplied) {
    expert_placement p = two_ranks();
    const std::vector<expert_slot_move> swap{
        {.layer = 0, .slot = 4, .logical_expert = 1, .src_rank = 0, .src_slot = 1},
        {.layer = 0, .slot = 1, .logical_expert = 0, .src_rank = 0, .src_slot = 0}};
    ASSERT_NO_THROW(p.check_moves(swap));
    p.apply_moves(swap);
    EXPECT_EQ(p.physical_to_logical[0], (std::vector<int32_t>{0, 0, 2, 3, 1, 3}));
    EXPECT_NO_THROW(p.validate());
    for (const expert_slot_move& bad :
         {expert_slot_move{.layer = 1, .slot = 0, .logical_expert = 0},
          expert_slot_move{.layer = 0, .slot = 6, .logical_expert = 0},
          expert_slot_move{.layer = 0, .slot = 0, .logical_expert = 4},
          expert_slot_move{.layer = 0, .slot = 0, .logical_expert = -1},
          expert_slot_move{.layer = 0, .slot = 0, .logical_expert = 0, .src_rank = 2},
          expert_slot_move{.layer = 0, .slot = 0, .logical_expert = 0, .src_rank = 0, .src_slot = 6}}) {
        const expert_placement before = p;
        EXPECT_THROW(p.apply_moves({bad}), error) << "layer " << bad.layer << " slot " << bad.slot;
        EXPECT_EQ(p, before);  // a rejected move list changes nothing
    }
}

}  // namespace
}  // namespace zmoe
