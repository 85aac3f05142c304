#include "engine_core/dual_batch.hpp"

#include <gtest/gtest.h>

namespace zmoe {
namespace {

// One rank's share: a sequence per entry of `lengths`, feeding that many tokens.
step_request share(const std::vector<int>& lengths) {
    step_request r;
    uint64_t id = 1;
    for (int n : lengths) {
        scheduled_seq s;
        s.request_id = id++;
        s.token_ids.assign(static_cast<size_t>(n), 5);
        r.seqs.push_back(s);
    }
    return r;
}

TEST(DualBatch, OffUnlessEnabled) {
    const dbo_options off{.enabled = false, .decode_token_threshold = 1, .prefill_token_threshold = 1};
    EXPECT_FALSE(should_split_step({share({1, 1, 1, 1}), share({300})}, off));
}

TEST(DualBatch, DecodeOnlyStepsUseTheDecodeThreshold) {
    const dbo_options o{.enabled = true, .decode_token_threshold = 4, .prefill_token_threshold = 100};
    EXPECT_FALSE(should_split_step({share({1, 1, 1}), share({1, 1})}, o));
    EXPECT_TRUE(should_split_step({share({1, 1, 1, 1}), share({1})}, o));
    // The busiest rank decides for all, so a rank with no work still splits (and joins both micro-batches).
    EXPECT_TRUE(should_split_step({share({}), share({1, 1, 1, 1, 1})}, o));
}

TEST(DualBatch, AnyPrefillChunkSelectsThePrefillThreshold) {
    const dbo_options o{.enabled = true, .decode_token_threshold = 4, .prefill_token_threshold = 100};
    EXPECT_FALSE(should_split_step({share({1, 1, 1, 1, 2}), share({1})}, o));  // 6 tokens, one a 2-token chunk
    EXPECT_FALSE(should_split_step({share({99}), share({1, 1, 1, 1, 1})}, o));
    EXPECT_TRUE(should_split_step({share({99, 1}), share({})}, o));
    // A prefill on another rank makes the whole step a prefill step.
    EXPECT_FALSE(should_split_step({share({1, 1, 1, 1, 1, 1}), share({3})}, o));
}

TEST(DualBatch, EmptyStepsNeverSplit) {
    const dbo_options o{.enabled = true, .decode_token_threshold = 1, .prefill_token_threshold = 1};
    EXPECT_FALSE(should_split_step({share({}), share({})}, o));
    EXPECT_TRUE(should_split_step({share({}), share({1})}, o));
}

// --dbo-prefill-token-threshold 0 (the default) stands for the crossover measured at the run's worker count; any other
// value is taken as given.
TEST(DualBatch, PrefillThresholdZeroIsResolvedByTheWorkerCount) {
    EXPECT_EQ(dbo_options::of(true, 1 << 30, 0, 1).prefill_token_threshold, 8192);
    EXPECT_EQ(dbo_options::of(true, 1 << 30, 0, 2).prefill_token_threshold, 8192);
    EXPECT_EQ(dbo_options::of(true, 1 << 30, 0, 3).prefill_token_threshold, 8192);
    EXPECT_EQ(dbo_options::of(true, 1 << 30, 0, 4).prefill_token_threshold, 2048);
    EXPECT_EQ(dbo_options::of(true, 1 << 30, 0, 8).prefill_token_threshold, 2048);
    EXPECT_EQ(dbo_options::of(true, 1 << 30, 100, 4).prefill_token_threshold, 100);
    EXPECT_EQ(dbo_options::of(true, 1 << 30, 100, 2).prefill_token_threshold, 100);
    const dbo_options four = dbo_options::of(true, 1 << 30, 0, 4);
    EXPECT_EQ(four.decode_token_threshold, 1 << 30);
    EXPECT_TRUE(four.enabled);
    // With 4 workers a 2048-token prefill on one rank splits the step; with 2 it does not.
    EXPECT_TRUE(should_split_step({share({2048}), share({}), share({1}), share({})}, four));
    EXPECT_FALSE(should_split_step({share({2047}), share({}), share({1}), share({})}, four));
    EXPECT_FALSE(should_split_step({share({2048}), share({1})}, dbo_options::of(true, 1 << 30, 0, 2)));
    EXPECT_FALSE(dbo_options::of(false, 1 << 30, 0, 4).enabled);
}

}  // namespace
}  // namespace zmoe
