#include "workers/micro_batch.hpp"

#include <gtest/gtest.h>

namespace zmoe {
namespace {

TEST(MicroBatch, DecodeSplitsBySequences) {
    EXPECT_EQ(micro_batch_split_row({1, 1, 1, 1}), 2);
    EXPECT_EQ(micro_batch_split_row({1, 1, 1, 1, 1}), 3);  // A takes the odd one
    EXPECT_EQ(micro_batch_split_row({1}), 1);              // B empty: it still joins the exchanges
}

TEST(MicroBatch, PrefillSplitsByBalancedTokenCounts) {
    EXPECT_EQ(micro_batch_split_row({10, 10}), 10);
    EXPECT_EQ(micro_batch_split_row({30, 1, 1}), 16);  // cuts the long chunk: rows are independent in the MoE layer
    EXPECT_EQ(micro_batch_split_row({1, 1, 1, 6}), 5);
    EXPECT_EQ(micro_batch_split_row({7}), 4);
}

TEST(MicroBatch, EmptyBatch) { EXPECT_EQ(micro_batch_split_row({}), 0); }

}  // namespace
}  // namespace zmoe
