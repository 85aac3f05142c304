// The EPLB state machine on its own: when a rebalance is due, which steps it stages and switches at, and how the
// ranks' acknowledgements complete it.

#include "engine_core/eplb_coordinator.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "base/error.hpp"

namespace zmoe {
namespace {

constexpr int32_t kLayers = 2;
constexpr int32_t kExperts = 4;

eplb_options options(int32_t interval = 2, int32_t stage_steps = 3) {
    return eplb_options{.enabled = true,
                        .interval = interval,
                        .window = 8,
                        .stage_steps = stage_steps,
                        .min_gain = 0.02,
                        .num_nodes = 1,
                        .num_ranks = 2,
                        .num_redundant_experts = 0};
}

/// One step's results of two ranks, every token on experts 0 and 1 (both on rank 0 in the initial placement).
std::vector<step_result> skewed_step(uint32_t tokens = 10) {
    std::vector<step_result> results(2);
    for (int32_t r = 0; r < 2; ++r) {
        results[r].rank = r;
        results[r].expert_counts.assign(kLayers * kExperts, 0);
        for (int32_t l = 0; l < kLayers; ++l) {
            results[r].expert_counts[l * kExperts + 0] = tokens;
            results[r].expert_counts[l * kExperts + 1] = tokens;
        }
    }
    return results;
}

worker_expert_move_done ack(int32_t rank, uint64_t switched_at, uint64_t move_id = 1) {
    worker_expert_move_done m;
    m.move_id = move_id;
    m.rank = rank;
    m.bytes_moved = 64;
    m.switched_at_step = switched_at;
    return m;
}

TEST(EplbCoordinator, RebalancesEveryIntervalAndStagesAtTheNextStep) {
    metrics_registry m;
    eplb_coordinator c(options(2, 3), kLayers, kExperts, m);
    ASSERT_TRUE(c.placement().has_value());
    const auto before = c.placement()->physical_to_logical;
    c.start();
    const auto t0 = eplb_coordinator::clock_type::now();
    c.step_done(skewed_step());
    EXPECT_FALSE(c.maybe_rebalance(5, t0).has_value()) << "one step of two in the interval";
    c.step_done(skewed_step());
    const auto move = c.maybe_rebalance(7, t0);
    ASSERT_TRUE(move.has_value());
    EXPECT_EQ(move->move_id, 1u);
    EXPECT_EQ(c.stage_step(), 7u);
    EXPECT_EQ(move->apply_at_step, 10u) << "switch = stage + stage_steps";
    EXPECT_EQ(c.switch_step(), 10u);
    EXPECT_TRUE(c.move_pending());
    EXPECT_NE(c.placement()->physical_to_logical, before) << "the new placement is adopted at once";
    // Each move names a slot whose expert changed, from a rank that held that expert.
    for (const auto& mv : move->moves) {
        EXPECT_EQ(c.placement()->physical_to_logical[mv.layer][mv.slot], mv.logical_expert);
        EXPECT_EQ(before[mv.layer][mv.src_slot], mv.logical_expert);
        EXPECT_EQ(static_cast<int32_t>(mv.src_slot) / 2, mv.src_rank);
    }
    EXPECT_EQ(m.counter("eplb_expert_moves"), static_cast<double>(move->moves.size()));
    EXPECT_GT(m.gauge("eplb_balancedness_after"), m.gauge("eplb_balancedness_before"));
}

TEST(EplbCoordinator, OneRebalanceInFlightUntilEveryRankAcknowledges) {
    metrics_registry m;
    eplb_coordinator c(options(1, 2), kLayers, kExperts, m);
    c.start();
    const auto t0 = eplb_coordinator::clock_type::now();
    c.step_done(skewed_step());
    const auto move = c.maybe_rebalance(3, t0);
    ASSERT_TRUE(move.has_value());
    // Load swings onto the two experts that now share rank 0: still nothing new while the first is unacknowledged.
    const auto& p = c.placement()->physical_to_logical;
    for (int i = 0; i < 4; ++i) {
        auto other = skewed_step(0);
        for (auto& r : other)
            for (int32_t l = 0; l < kLayers; ++l) {
                r.expert_counts[l * kExperts + p[l][0]] = 50;
                r.expert_counts[l * kExperts + p[l][1]] = 50;
            }
        c.step_done(other);
        EXPECT_FALSE(c.maybe_rebalance(4 + i, t0).has_value());
    }
    EXPECT_FALSE(c.move_done(ack(1, 5), t0 + std::chrono::milliseconds(5)));  // rank 1, and a stale switch step: logged
    EXPECT_FALSE(c.move_done(ack(1, 5), t0)) << "a second ack of the same rank is ignored";
    EXPECT_TRUE(c.move_pending());
    EXPECT_EQ(m.counter("eplb_rebalances"), 0);
    EXPECT_TRUE(c.move_done(ack(0, move->apply_at_step), t0 + std::chrono::milliseconds(20)));
    EXPECT_FALSE(c.move_pending());
    EXPECT_EQ(m.counter("eplb_rebalances"), 1);
    EXPECT_EQ(m.counter("eplb_bytes_moved"), 128);
    EXPECT_FALSE(c.move_done(ack(0, 5), t0)) << "no move pending";
    const auto json = m.to_json();
    EXPECT_EQ(json["histograms"]["eplb_move_ms"]["max"], 20.0);
    // Free again: the next interval plans from the adopted placement.
    c.step_done(skewed_step(0));
    const auto second = c.maybe_rebalance(9, t0);
    ASSERT_TRUE(second.has_value()) << "rank 0 holds both hot experts again";
    EXPECT_EQ(second->move_id, 2u);
    EXPECT_EQ(second->apply_at_step, 11u);
}

TEST(EplbCoordinator, NothingToMoveWhenBalancedOrDisabledOrWithoutMoe) {
    metrics_registry m;
    eplb_coordinator balanced(options(1), kLayers, kExperts, m);
    balanced.start();
    auto even = skewed_step(0);
    for (auto& r : even) std::fill(r.expert_counts.begin(), r.expert_counts.end(), 5u);
    balanced.step_done(even);
    EXPECT_FALSE(balanced.maybe_rebalance(1, {}).has_value());
    EXPECT_EQ(m.counter("eplb_plans_not_adopted"), 1);

    eplb_options off = options(1);
    off.enabled = false;
    eplb_coordinator disabled(off, kLayers, kExperts, m);
    disabled.start();
    disabled.step_done(skewed_step());
    EXPECT_FALSE(disabled.maybe_rebalance(1, {}).has_value());
    EXPECT_EQ(disabled.expert_tokens()[0], 20.0) << "the load is still counted";

    eplb_coordinator dense(options(1), 0, 0, m);
    dense.start();
    EXPECT_FALSE(dense.placement().has_value());
    dense.step_done({});
    EXPECT_FALSE(dense.maybe_rebalance(1, {}).has_value());
}

TEST(EplbCoordinator, CountsOfTheWrongSizeAreRefusedAndNotCounted) {
    metrics_registry m;
    eplb_coordinator c(options(1), kLayers, kExperts, m);
    c.step_done(skewed_step());
    EXPECT_EQ(c.load_window_steps(), 0) << "nothing counts before start()";
    c.start();
    auto bad = skewed_step();
    bad[1].expert_counts.pop_back();
    EXPECT_THROW(c.step_done(bad), error);
    EXPECT_EQ(c.load_window_steps(), 0);
    EXPECT_TRUE(c.expert_tokens().empty());
    c.step_done(skewed_step(3));
    EXPECT_EQ(c.load_window_steps(), 1);
    EXPECT_EQ(c.expert_tokens()[kExperts + 1], 6.0);
}

}  // namespace
}  // namespace zmoe
