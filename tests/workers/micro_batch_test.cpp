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

using ints = std::vector<int32_t>;

TEST(MicroBatchSequences, SplitAtASequenceBoundary) {
    // Sequences of 3, 2 and 4 rows at positions 10, 0 and 7; the split at row 5 falls between the second and third.
    const ints qs{0, 3, 5, 9}, sp{10, 0, 7};
    const auto m = micro_batch_sequences(qs, sp, 5);
    EXPECT_EQ(m[0].first_seq, 0);
    EXPECT_EQ(m[0].query_start, (ints{0, 3, 5}));
    EXPECT_EQ(m[0].start_pos, (ints{10, 0}));
    EXPECT_EQ(m[1].first_seq, 2);
    EXPECT_EQ(m[1].query_start, (ints{5, 9}));
    EXPECT_EQ(m[1].start_pos, (ints{7}));
}

TEST(MicroBatchSequences, SplitCutsASequence) {
    // Row 4 is the second row of the second sequence: A keeps its first row, B its last, one position later.
    const ints qs{0, 3, 5, 9}, sp{10, 0, 7};
    const auto m = micro_batch_sequences(qs, sp, 4);
    EXPECT_EQ(m[0].query_start, (ints{0, 3, 4}));
    EXPECT_EQ(m[0].start_pos, (ints{10, 0}));
    EXPECT_EQ(m[1].first_seq, 1);
    EXPECT_EQ(m[1].query_start, (ints{4, 5, 9}));
    EXPECT_EQ(m[1].start_pos, (ints{1, 7}));
    // One long prompt cut in the middle.
    const auto one = micro_batch_sequences(ints{0, 8}, ints{16}, 3);
    EXPECT_EQ(one[0].query_start, (ints{0, 3}));
    EXPECT_EQ(one[0].start_pos, (ints{16}));
    EXPECT_EQ(one[1].query_start, (ints{3, 8}));
    EXPECT_EQ(one[1].start_pos, (ints{19}));
}

TEST(MicroBatchSequences, DecodeSplitsBySequences) {
    const ints qs{0, 1, 2, 3, 4, 5}, sp{7, 8, 9, 10, 11};
    const auto m = micro_batch_sequences(qs, sp, static_cast<int32_t>(micro_batch_split_row({1, 1, 1, 1, 1})));
    EXPECT_EQ(m[0].num_seqs(), 3);
    EXPECT_EQ(m[0].query_start, (ints{0, 1, 2, 3}));
    EXPECT_EQ(m[1].first_seq, 3);
    EXPECT_EQ(m[1].query_start, (ints{3, 4, 5}));
    EXPECT_EQ(m[1].start_pos, (ints{10, 11}));
}

TEST(MicroBatchSequences, EmptyMicroBatches) {
    const ints qs{0, 2, 6}, sp{0, 3};
    const auto all_b = micro_batch_sequences(qs, sp, 0);
    EXPECT_EQ(all_b[0].num_seqs(), 0);
    EXPECT_EQ(all_b[0].query_start, (ints{0}));
    EXPECT_EQ(all_b[1].query_start, qs);
    EXPECT_EQ(all_b[1].start_pos, sp);
    const auto all_a = micro_batch_sequences(qs, sp, 100);  // clamped to the 6 rows
    EXPECT_EQ(all_a[0].query_start, qs);
    EXPECT_EQ(all_a[1].num_seqs(), 0);
    EXPECT_EQ(all_a[1].first_seq, 2);
    EXPECT_EQ(all_a[1].query_start, (ints{6}));
    const auto none = micro_batch_sequences(ints{0}, ints{}, 0);
    EXPECT_EQ(none[0].num_seqs() + none[1].num_seqs(), 0);
}

}  // namespace
}  // namespace zmoe
