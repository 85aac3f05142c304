// The fixed expert-parallel window's size (workers/ep_capacity.hpp): the arithmetic, and that the default leaves a
// uniform random routing room to never overflow where 1.25 x the even share often did.

#include "workers/ep_capacity.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

namespace zmoe {
namespace {

constexpr int32_t kBig = 1 << 30;

TEST(EpCapacity, AGivenFactorIsThatManyEvenShares) {
    EXPECT_EQ(ep_window_capacity(128, 8, 2, 1.25, kBig), 640);  // share 512
    EXPECT_EQ(ep_window_capacity(256, 8, 4, 1.25, kBig), 640);
    EXPECT_EQ(ep_window_capacity(64, 8, 4, 1.25, kBig), 160);
    EXPECT_EQ(ep_window_capacity(64, 8, 4, 0.01, kBig), 8);  // rounded up to 8, never 0
    EXPECT_EQ(ep_window_capacity(64, 8, 4, 2.0, kBig), 256);
}

TEST(EpCapacity, TheDefaultKeepsSixSigmasOverTheShare) {
    EXPECT_EQ(ep_window_capacity(64, 8, 4, 0, kBig), 200);      // 128 + 6 sqrt(128) = 195.9
    EXPECT_EQ(ep_window_capacity(128, 8, 4, 0, kBig), 352);     // 256 + 96
    EXPECT_EQ(ep_window_capacity(128, 8, 2, 0, kBig), 648);     // 512 + 135.8, above 1.25 x 512 = 640
    EXPECT_EQ(ep_window_capacity(4096, 8, 2, 0, kBig), 20480);  // 1.25 x 16384: the factor wins at large shares
    EXPECT_EQ(ep_window_capacity(-3, 8, 4, 0, kBig), 8);        // no tokens: one token's worth
}

TEST(EpCapacity, NeverMoreThanEveryRowNorThanTheBuffers) {
    for (int32_t t : {1, 2, 3, 4}) EXPECT_EQ(ep_window_capacity(t, 8, 4, 0, kBig), t * 8) << t;
    EXPECT_EQ(ep_window_capacity(1, 8, 1, 0, kBig), 8);
    EXPECT_EQ(ep_window_capacity(256, 8, 4, 0, 100), 100);
    EXPECT_EQ(ep_window_capacity(256, 8, 4, 1.25, 100), 100);
    for (int32_t t = 1; t <= 512; t += 7)
        for (int32_t w : {2, 4, 8}) {
            const int32_t c = ep_window_capacity(t, 8, w, 0, kBig);
            EXPECT_LE(c, t * 8);
            EXPECT_GE(c, std::min(t * 8, ep_window_capacity(t, 8, w, 1.25, kBig))) << t << " " << w;
        }
}

/// The largest count any (source, destination) pair needs in a layer: `tokens` tokens each choose top_k distinct
/// experts uniformly out of num_experts, split evenly over `world` ranks.
int32_t worst_destination(std::mt19937& rng, int32_t tokens, int32_t top_k, int32_t num_experts, int32_t world) {
    std::vector<int32_t> experts(static_cast<size_t>(num_experts)), rows(static_cast<size_t>(world), 0);
    std::iota(experts.begin(), experts.end(), 0);
    const int32_t per_rank = num_experts / world;
    for (int32_t t = 0; t < tokens; ++t) {
        for (int32_t k = 0; k < top_k; ++k) {  // a partial Fisher-Yates shuffle: top_k distinct experts
            std::uniform_int_distribution<int32_t> pick(k, num_experts - 1);
            std::swap(experts[size_t(k)], experts[size_t(pick(rng))]);
            ++rows[size_t(experts[size_t(k)] / per_rank)];
        }
    }
    return *std::max_element(rows.begin(), rows.end());
}

// Qwen3-30B-A3B's routing shape (top-8 of 128) on 4 ranks: 48 layers x 40 steps of windows at each batch size.
TEST(EpCapacity, TheDefaultDoesNotOverflowARandomRoutingWhere125xDid) {
    std::mt19937 rng(1234);
    int overflow_default = 0, overflow_125 = 0, windows = 0;
    for (int32_t tokens : {4, 16, 64}) {
        const int32_t c_default = ep_window_capacity(tokens, 8, 4, 0, kBig);
        const int32_t c_125 = ep_window_capacity(tokens, 8, 4, 1.25, kBig);
        for (int i = 0; i < 48 * 40; ++i, ++windows) {
            const int32_t need = worst_destination(rng, tokens, 8, 128, 4);
            overflow_default += need > c_default;
            overflow_125 += need > c_125;
        }
    }
    EXPECT_EQ(overflow_default, 0) << "of " << windows << " windows";
    std::printf("windows %d, overflowed at 1.25 x the share %d\n", windows, overflow_125);
    EXPECT_GT(overflow_125, windows / 100) << "1.25 x the share was expected to overflow often at these sizes";
}

}  // namespace
}  // namespace zmoe
