#include "engine_core/eplb.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "base/error.hpp"
#include "engine_core/expert_move_plan.hpp"

namespace zmoe {
namespace {

/// Zipf-skewed loads: expert perm[i] gets scale / (i + 1)^s, times a little noise.
std::vector<double> zipf_load(std::mt19937& rng, int32_t num_experts, double s = 1.1) {
    std::vector<int32_t> perm(static_cast<size_t>(num_experts));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::uniform_real_distribution<double> noise(0.9, 1.1);
    std::vector<double> load(static_cast<size_t>(num_experts));
    for (int32_t i = 0; i < num_experts; ++i) {
        load[static_cast<size_t>(perm[static_cast<size_t>(i)])] = std::round(10000.0 / std::pow(i + 1, s) * noise(rng));
    }
    return load;
}

std::vector<int32_t> sorted_rank(const std::vector<int32_t>& layer, int32_t rank, int32_t slots_per_rank) {
    std::vector<int32_t> v(layer.begin() + rank * slots_per_rank, layer.begin() + (rank + 1) * slots_per_rank);
    std::sort(v.begin(), v.end());
    return v;
}

TEST(ExpertPlacement, IdentityAndValidation) {
    expert_placement p = expert_placement::identity(3, 8, 4);
    EXPECT_EQ(p.slots_per_rank, 2);
    EXPECT_EQ(p.num_redundant(), 0);
    EXPECT_EQ(p.num_moe_layers(), 3);
    EXPECT_EQ(p.physical_to_logical[1], (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(p.rank_of_slot(5), 2);
    EXPECT_NO_THROW(p.validate());
    EXPECT_THROW(expert_placement::identity(1, 6, 4), error);

    p.physical_to_logical[2][3] = 2;  // expert 3 lost, expert 2 twice
    try {
        p.validate();
        FAIL() << "placement missing expert 3 accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("layer 2"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("expert 3"), std::string::npos);
    }
    EXPECT_EQ(p.replica_counts(2)[2], 2);
    EXPECT_EQ(p.logical_to_physical(2)[2], (std::vector<int32_t>{2, 3}));
    p.physical_to_logical[2][3] = 8;
    EXPECT_THROW(p.validate(), error);
    p.physical_to_logical[2].pop_back();
    EXPECT_THROW(p.validate(), error);
}

TEST(Eplb, PacksHeaviestFirstOntoTheLeastLoadedRank) {
    const std::vector<double> load{10, 1, 1, 8};
    // Sorted 10(e0), 8(e3), 1(e1), 1(e2): e0 -> r0, e3 -> r1, e1 -> r1 (8 < 10), e2 -> r0 (r1 is full).
    const std::vector<int32_t> p = compute_layer_placement(load, 2, 1, 0);
    EXPECT_EQ(p, (std::vector<int32_t>{0, 2, 3, 1}));
    EXPECT_DOUBLE_EQ(layer_balancedness(load, p, 2), 10.0 / 11.0);
    EXPECT_DOUBLE_EQ(layer_balancedness(load, std::vector<int32_t>{0, 1, 2, 3}, 2), 10.0 / 11.0);
    EXPECT_DOUBLE_EQ(layer_balancedness(load, std::vector<int32_t>{0, 3, 1, 2}, 2), 10.0 / 18.0);
}

TEST(Eplb, RedundantSlotsGoToTheHeaviestLoadPerReplica) {
    const std::vector<double> load{10, 1, 1, 8};
    // Replicas: e0 (10 -> 5 + 5), then e3 (8 -> 4 + 4). Items 5,5,4,4,1,1 alternate between the two ranks.
    const std::vector<int32_t> p = compute_layer_placement(load, 2, 1, 2);
    EXPECT_EQ(p, (std::vector<int32_t>{0, 3, 1, 0, 3, 2}));
    EXPECT_DOUBLE_EQ(layer_balancedness(load, p, 2), 1.0);
    // All-zero load: redundancy spreads round-robin instead of piling onto one expert.
    const std::vector<int32_t> z = compute_layer_placement(std::vector<double>(4, 0.0), 2, 1, 2);
    expert_placement zp{.num_experts = 4, .num_ranks = 2, .slots_per_rank = 3, .physical_to_logical = {z}};
    EXPECT_EQ(zp.replica_counts(0), (std::vector<int32_t>{2, 2, 1, 1}));
    EXPECT_DOUBLE_EQ(layer_balancedness(std::vector<double>(4, 0.0), z, 2), 1.0);
}

TEST(Eplb, HierarchicalKeepsEachGroupOnOneNode) {
    // Groups of 2: g0 = 20, g1 = 2, g2 = 10, g3 = 12. Nodes: g0 -> n0, g3 -> n1, g2 -> n1, g1 -> n0 (22 vs 22).
    const std::vector<double> load{10, 10, 1, 1, 5, 5, 6, 6};
    const std::vector<int32_t> p = compute_layer_placement(load, /*num_ranks=*/4, /*num_nodes=*/2, 0, /*groups=*/4);
    std::set<int32_t> node0(p.begin(), p.begin() + 4);
    std::set<int32_t> node1(p.begin() + 4, p.end());
    EXPECT_EQ(node0, (std::set<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(node1, (std::set<int32_t>{4, 5, 6, 7}));
    // Within node 0: 10, 10, 1, 1 -> {10, 1} and {10, 1}.
    EXPECT_EQ(sorted_rank(p, 0, 2), (std::vector<int32_t>{0, 2}));
    EXPECT_EQ(sorted_rank(p, 1, 2), (std::vector<int32_t>{1, 3}));
}

TEST(Eplb, RejectsShapesThatCannotBeSplitEvenly) {
    const std::vector<double> load(5, 1.0);
    try {
        compute_layer_placement(load, 2, 1, 0);
        FAIL() << "5 experts on 2 ranks accepted";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("multiple of num_ranks"), std::string::npos);
    }
    EXPECT_NO_THROW(compute_layer_placement(load, 2, 1, 1));
    EXPECT_THROW(compute_layer_placement(std::vector<double>(8, 1.0), 6, 4, 4), error);     // 6 ranks on 4 nodes
    EXPECT_THROW(compute_layer_placement(std::vector<double>(8, 1.0), 4, 1, 0, 3), error);  // 8 experts in 3 groups
    EXPECT_THROW(compute_layer_placement(std::vector<double>{1, -1, 1, 1}, 2, 1, 0), error);
    EXPECT_THROW(compute_layer_placement(std::vector<double>{1, NAN, 1, 1}, 2, 1, 0), error);
}

struct eplb_shape {
    int32_t num_experts, num_ranks, num_nodes, num_redundant, num_groups;
};

class EplbProperties : public ::testing::TestWithParam<eplb_shape> {};

TEST_P(EplbProperties, ZipfLoadsGetValidBetterBalancedPlacements) {
    const eplb_shape s = GetParam();
    std::mt19937 rng(1234 + static_cast<uint32_t>(s.num_experts * 7 + s.num_ranks));
    std::vector<std::vector<double>> load;
    for (int i = 0; i < 8; ++i) load.push_back(zipf_load(rng, s.num_experts));
    const expert_placement p = compute_placement(load, s.num_ranks, s.num_nodes, s.num_redundant, s.num_groups);
    ASSERT_NO_THROW(p.validate());
    EXPECT_EQ(p.slots_per_rank * s.num_ranks, s.num_experts + s.num_redundant);
    EXPECT_EQ(p.num_redundant(), s.num_redundant);
    for (int32_t l = 0; l < p.num_moe_layers(); ++l) {
        // Every expert present; more replicas only for experts at least as loaded as some single-replica one.
        const std::vector<int32_t> counts = p.replica_counts(l);
        for (int32_t e = 0; e < s.num_experts; ++e) ASSERT_GE(counts[static_cast<size_t>(e)], 1);
        if (s.num_nodes == 1) {
            double max_single = 0, min_multi = INFINITY;
            for (int32_t e = 0; e < s.num_experts; ++e) {
                const double w = load[static_cast<size_t>(l)][static_cast<size_t>(e)];
                if (counts[static_cast<size_t>(e)] == 1) max_single = std::max(max_single, w);
                if (counts[static_cast<size_t>(e)] > 1) min_multi = std::min(min_multi, w);
            }
            if (s.num_redundant > 0) {
                EXPECT_GE(min_multi, max_single / 2);  // a replica went to x only while x/replicas was the top
            }
        }
    }
    // Naive baseline of the same shape: expert p in slot p, the redundant slots holding experts 0, 1, ...
    expert_placement naive = p;
    for (auto& layer : naive.physical_to_logical) {
        for (int32_t q = 0; q < naive.num_physical(); ++q) layer[static_cast<size_t>(q)] = q % s.num_experts;
    }
    EXPECT_GT(balancedness(load, p), balancedness(load, naive));

    // Rebalancing from a random current placement of the same shape never lowers balancedness.
    expert_placement current = p;
    for (auto& layer : current.physical_to_logical) std::shuffle(layer.begin(), layer.end(), rng);
    for (int round = 0; round < 3; ++round) {
        std::vector<std::vector<double>> window;
        for (int i = 0; i < 8; ++i) window.push_back(zipf_load(rng, s.num_experts));
        const rebalance_plan plan = plan_rebalance(window, current, s.num_nodes, s.num_groups);
        ASSERT_NO_THROW(plan.placement.validate());
        // --eplb-min-gain: a layer changes only when it gains more than the threshold; a gain of 1 is impossible.
        const double min_gain = 0.05;
        const rebalance_plan thresholded = plan_rebalance(window, current, s.num_nodes, s.num_groups, min_gain);
        for (int32_t l = 0; l < current.num_moe_layers(); ++l) {
            const double b_old = layer_balancedness(window[l], current.physical_to_logical[l], s.num_ranks);
            const double b_new =
                layer_balancedness(window[l], thresholded.placement.physical_to_logical[l], s.num_ranks);
            if (thresholded.placement.physical_to_logical[l] != current.physical_to_logical[l]) {
                EXPECT_GT(b_new, b_old + min_gain) << "layer " << l;
            }
        }
        EXPECT_TRUE(plan_rebalance(window, current, s.num_nodes, s.num_groups, 1.0).changed_layers.empty());
        EXPECT_GE(plan.balancedness_after, plan.balancedness_before);
        EXPECT_DOUBLE_EQ(plan.balancedness_after, balancedness(window, plan.placement));
        EXPECT_DOUBLE_EQ(plan.balancedness_before, balancedness(window, current));
        for (int32_t l = 0; l < current.num_moe_layers(); ++l) {
            const bool changed =
                std::find(plan.changed_layers.begin(), plan.changed_layers.end(), l) != plan.changed_layers.end();
            const double b_old = layer_balancedness(window[l], current.physical_to_logical[l], s.num_ranks);
            const double b_now = layer_balancedness(window[l], plan.placement.physical_to_logical[l], s.num_ranks);
            if (changed) {
                EXPECT_GT(b_now, b_old);
            } else {
                EXPECT_EQ(plan.placement.physical_to_logical[l], current.physical_to_logical[l]);
            }
        }
        EXPECT_FALSE(plan.changed_layers.empty());  // a shuffled placement under fresh skew is worth changing
        // The move plan turns current into the plan's placement, touching only slots that changed.
        const std::vector<expert_move> moves = plan_expert_moves(current, plan.placement, s.num_nodes);
        size_t num_diff = 0;
        for (int32_t l = 0; l < current.num_moe_layers(); ++l) {
            for (int32_t q = 0; q < current.num_physical(); ++q) {
                num_diff += current.physical_to_logical[l][q] != plan.placement.physical_to_logical[l][q] ? 1 : 0;
            }
        }
        EXPECT_EQ(moves.size(), num_diff);
        expert_placement applied = current;
        for (const expert_move& m : moves) {
            EXPECT_EQ(current.physical_to_logical[m.layer][m.src_slot], m.logical_expert);
            EXPECT_EQ(current.rank_of_slot(m.src_slot), m.src_rank);
            EXPECT_EQ(current.rank_of_slot(m.dst_slot), m.dst_rank);
            applied.physical_to_logical[m.layer][m.dst_slot] = m.logical_expert;
        }
        EXPECT_EQ(applied, plan.placement);
        current = plan.placement;
        // Same load again: nothing strictly better is left, nothing moves.
        const rebalance_plan again = plan_rebalance(window, current, s.num_nodes, s.num_groups);
        EXPECT_TRUE(again.changed_layers.empty());
        EXPECT_TRUE(plan_expert_moves(current, again.placement, s.num_nodes).empty());
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EplbProperties,
                         ::testing::Values(eplb_shape{16, 4, 1, 0, 0}, eplb_shape{64, 8, 1, 0, 0},
                                           eplb_shape{64, 8, 1, 8, 0}, eplb_shape{60, 8, 1, 4, 0},
                                           eplb_shape{64, 8, 2, 16, 0}, eplb_shape{128, 16, 4, 16, 8},
                                           eplb_shape{96, 16, 4, 16, 6}),
                         [](const ::testing::TestParamInfo<eplb_shape>& info) {
                             const eplb_shape& s = info.param;
                             return "E" + std::to_string(s.num_experts) + "_ranks" + std::to_string(s.num_ranks) +
                                    "_nodes" + std::to_string(s.num_nodes) + "_redundant" +
                                    std::to_string(s.num_redundant) + "_groups" + std::to_string(s.num_groups);
                         });

TEST(Eplb, AlignmentKeepsLoadsAndReducesMoves) {
    std::mt19937 rng(99);
    for (int trial = 0; trial < 20; ++trial) {
        const std::vector<double> a = zipf_load(rng, 32);
        std::vector<double> b = a;
        for (double& w : b) w *= std::uniform_real_distribution<double>(0.8, 1.25)(rng);
        const std::vector<int32_t> current = compute_layer_placement(a, 8, 2, 8);
        const std::vector<int32_t> raw = compute_layer_placement(b, 8, 2, 8);
        const std::vector<int32_t> aligned = align_layer_placement(raw, current, 8, 2);
        EXPECT_DOUBLE_EQ(layer_balancedness(b, aligned, 8), layer_balancedness(b, raw, 8));
        // Same multiset per rank up to a permutation of ranks within nodes and of nodes.
        std::multiset<std::vector<int32_t>> raw_ranks, aligned_ranks;
        for (int32_t r = 0; r < 8; ++r) {
            raw_ranks.insert(sorted_rank(raw, r, 5));
            aligned_ranks.insert(sorted_rank(aligned, r, 5));
        }
        EXPECT_EQ(raw_ranks, aligned_ranks);
        auto diff = [&](const std::vector<int32_t>& x) {
            size_t n = 0;
            for (size_t i = 0; i < x.size(); ++i) n += x[i] != current[i] ? 1 : 0;
            return n;
        };
        EXPECT_LE(diff(aligned), diff(raw));
        EXPECT_EQ(diff(align_layer_placement(current, current, 8, 2)), 0u);
    }
}

TEST(ExpertMovePlan, PrefersALocalCopyThenTheSameNode) {
    // 4 ranks x 2 slots, 2 nodes (ranks 0-1, 2-3), 6 experts + replicas of 1 and 4.
    expert_placement from{
        .num_experts = 6, .num_ranks = 4, .slots_per_rank = 2, .physical_to_logical = {{0, 1, 2, 3, 4, 5, 1, 4}}};
    expert_placement to = from;
    to.physical_to_logical[0] = {0, 0, 2, 1, 5, 4, 3, 2};
    ASSERT_NO_THROW(to.validate());
    const std::vector<expert_move> moves = plan_expert_moves(from, to, 2);
    const std::vector<expert_move> want{
        // Rank 0 already holds expert 0: local copy.
        {.layer = 0, .logical_expert = 0, .dst_rank = 0, .dst_slot = 1, .src_rank = 0, .src_slot = 0},
        // Expert 1 is on rank 0 (same node as rank 1) and rank 3: the same node wins.
        {.layer = 0, .logical_expert = 1, .dst_rank = 1, .dst_slot = 3, .src_rank = 0, .src_slot = 1},
        // Rank 2 swaps its two experts: both local, read from the old placement.
        {.layer = 0, .logical_expert = 5, .dst_rank = 2, .dst_slot = 4, .src_rank = 2, .src_slot = 5},
        {.layer = 0, .logical_expert = 4, .dst_rank = 2, .dst_slot = 5, .src_rank = 2, .src_slot = 4},
        // Only rank 1 holds experts 3 and 2.
        {.layer = 0, .logical_expert = 3, .dst_rank = 3, .dst_slot = 6, .src_rank = 1, .src_slot = 3},
        {.layer = 0, .logical_expert = 2, .dst_rank = 3, .dst_slot = 7, .src_rank = 1, .src_slot = 2},
    };
    EXPECT_EQ(moves, want);
    EXPECT_EQ(moves_to_rank(moves, 2).size(), 2u);
    EXPECT_TRUE(plan_expert_moves(from, from).empty());
    expert_placement other = expert_placement::identity(1, 8, 4);
    EXPECT_THROW(plan_expert_moves(from, other), error);
    EXPECT_THROW(plan_expert_moves(from, to, 3), error);
}

}  // namespace
}  // namespace zmoe
