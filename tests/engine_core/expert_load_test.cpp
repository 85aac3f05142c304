#include "engine_core/expert_load.hpp"

#include <gtest/gtest.h>

#include "base/error.hpp"

namespace zmoe {
namespace {

step_result counts_result(int32_t rank, std::vector<uint32_t> counts) {
    step_result r;
    r.rank = rank;
    r.expert_counts = std::move(counts);
    return r;
}

TEST(ExpertLoadWindow, SumsOverRanksAndKeepsTheLastSteps) {
    expert_load_window w(/*num_moe_layers=*/2, /*num_experts=*/3, /*window_steps=*/3);
    EXPECT_EQ(w.num_steps(), 0);
    EXPECT_EQ(w.layer_load(0), (std::vector<double>{0, 0, 0}));
    // Step s: rank 0 gives s on every counter, rank 1 gives 10*s on expert 1 of layer 1 only.
    for (uint32_t s = 1; s <= 5; ++s) {
        w.add_step({counts_result(0, std::vector<uint32_t>(6, s)), counts_result(1, {0, 0, 0, 0, 10 * s, 0})});
        EXPECT_EQ(w.num_steps(), static_cast<int32_t>(std::min<uint32_t>(s, 3)));
        if (s == 2) {
            EXPECT_EQ(w.layer_load(1), (std::vector<double>{3, 33, 3}));
        }
    }
    // Steps 3, 4, 5 remain.
    EXPECT_EQ(w.layer_load(0), (std::vector<double>{12, 12, 12}));
    EXPECT_EQ(w.load(), (std::vector<std::vector<double>>{{12, 12, 12}, {12, 132, 12}}));
    w.clear();
    EXPECT_EQ(w.num_steps(), 0);
    EXPECT_EQ(w.layer_load(1), (std::vector<double>{0, 0, 0}));
}

TEST(ExpertLoadWindow, IdleRanksMayReportNothing) {
    expert_load_window w(1, 2, 4);
    w.add_step({counts_result(0, {}), counts_result(1, {4, 5})});
    w.add_step_counts(std::vector<uint32_t>{1, 1});
    EXPECT_EQ(w.layer_load(0), (std::vector<double>{5, 6}));
}

TEST(ExpertLoadWindow, RejectsMisshapenCountsWithoutChangingAnything) {
    expert_load_window w(2, 2, 4);
    w.add_step({counts_result(0, {1, 2, 3, 4})});
    try {
        w.add_step({counts_result(0, {1, 1, 1, 1}), counts_result(1, {1, 2, 3})});
        FAIL() << "3 counts accepted for 2 x 2";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::protocol);
        EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos);
    }
    EXPECT_THROW(w.add_step_counts(std::vector<uint32_t>{1}), error);
    EXPECT_EQ(w.num_steps(), 1);
    EXPECT_EQ(w.layer_load(1), (std::vector<double>{3, 4}));
    EXPECT_THROW(expert_load_window(0, 2, 4), error);
    EXPECT_THROW(expert_load_window(1, 2, 0), error);
}

}  // namespace
}  // namespace zmoe
