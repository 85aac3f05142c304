// The MLA step plan (host only): which sequences of a step take the expanded prefill form, in which launches, and
// the expanded rows' cache slots, block tables and attention work items the plan uploads.

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kernels/api.hpp"
#include "workers/cuda/cuda_deepseek.hpp"

namespace zmoe::cuda {
namespace {

struct step_layout {
    std::vector<int32_t> query_start{0}, start_pos, tables;
    int32_t block_size = 16, max_blocks = 0;

    /// Sequences of (start_pos, query tokens); sequence s owns blocks 1000 s + 7 b (distinct, not contiguous).
    explicit step_layout(const std::vector<std::pair<int32_t, int32_t>>& seqs, int32_t max_blocks_per_seq = 40)
        : max_blocks(max_blocks_per_seq) {
        for (size_t s = 0; s < seqs.size(); ++s) {
            start_pos.push_back(seqs[s].first);
            query_start.push_back(query_start.back() + seqs[s].second);
            for (int32_t b = 0; b < max_blocks; ++b) tables.push_back(1000 * static_cast<int32_t>(s) + 7 * b);
        }
    }
    mla_host_step host() const {
        return {.query_start = query_start,
                .start_pos = start_pos,
                .block_tables = tables.data(),
                .block_size = block_size,
                .max_blocks_per_seq = max_blocks};
    }
};

TEST(MlaPrefillPlan, PrefillChunksGroupAndDecodesStayAbsorbed) {
    // decode | chunk of 70 from 0 | chunk of 5 after 30 | decode | 200 from 0 | 1-token chunk
    const step_layout l({{100, 1}, {0, 70}, {30, 5}, {9, 1}, {0, 200}, {40, 1}});
    const mla_prefill_plan p = plan_mla_prefill(l.host(), 16, 256, true);
    EXPECT_EQ(p.num_tokens, 278);
    EXPECT_FALSE(p.all_absorbed);
    EXPECT_FALSE(p.decode_only);
    EXPECT_EQ(p.absorbed_tokens, (std::vector<int32_t>{0, 76, 277}));
    ASSERT_EQ(p.groups.size(), 2u);
    const auto& a = p.groups[0];
    EXPECT_EQ(a.first_seq, 1);
    EXPECT_EQ(a.num_seqs, 2);
    EXPECT_EQ(a.first_token, 1);
    EXPECT_EQ(a.num_tokens, 75);
    EXPECT_EQ(a.num_rows, 128 + 64);  // positions [0, 70) and [0, 35), each padded to kMlaExpandBlock
    EXPECT_EQ(a.table_width, 2);
    const auto& b = p.groups[1];
    EXPECT_EQ(b.first_seq, 4);
    EXPECT_EQ(b.num_seqs, 1);
    EXPECT_EQ(b.first_token, 77);
    EXPECT_EQ(b.num_tokens, 200);
    EXPECT_EQ(b.num_rows, 256);

    // Group a's rows: sequence 1's positions at rows [0, 70), padding to 128, sequence 2's at [128, 163).
    const int32_t* slots = p.data.data() + a.slots;
    auto slot_of = [&](int32_t seq, int32_t pos) {
        return l.tables[size_t(seq) * l.max_blocks + pos / 16] * 16 + pos % 16;
    };
    for (int32_t pos = 0; pos < 128; ++pos) EXPECT_EQ(slots[pos], pos < 70 ? slot_of(1, pos) : -1) << pos;
    for (int32_t pos = 0; pos < 64; ++pos) EXPECT_EQ(slots[128 + pos], pos < 35 ? slot_of(2, pos) : -1) << pos;
    const int32_t* tables = p.data.data() + a.tables;
    EXPECT_EQ((std::vector<int32_t>(tables, tables + 4)), (std::vector<int32_t>{0, 1, 2, 2}));
    const int32_t* qs = p.data.data() + a.query_start;
    EXPECT_EQ((std::vector<int32_t>(qs, qs + 3)), (std::vector<int32_t>{1, 71, 76}));  // step token offsets
    const int32_t* sp = p.data.data() + a.start_pos;
    EXPECT_EQ((std::vector<int32_t>(sp, sp + 2)), (std::vector<int32_t>{0, 30}));
    const std::vector<int32_t> items = kernels::paged_attention_plan(std::vector<int32_t>{1, 71, 76}, 16, 16);
    ASSERT_EQ(a.num_work_items, static_cast<int32_t>(items.size() / 2));
    EXPECT_EQ((std::vector<int32_t>(p.data.begin() + static_cast<ptrdiff_t>(a.work_items),
                                    p.data.begin() + static_cast<ptrdiff_t>(a.work_items + items.size()))),
              items);
    const int32_t* absorbed = p.data.data() + p.absorbed_offset;
    EXPECT_EQ((std::vector<int32_t>(absorbed, absorbed + 3)), p.absorbed_tokens);
}

TEST(MlaPrefillPlan, CapacitySplitsGroupsAndTooLongSequencesStayAbsorbed) {
    // 100 from 0 (128 rows) | 10 after 60 (128 rows) | 300 from 0 (320 rows > 256) | 2 from 0 (64 rows)
    const step_layout l({{0, 100}, {60, 10}, {0, 300}, {0, 2}});
    const mla_prefill_plan p = plan_mla_prefill(l.host(), 4, 256, true);
    ASSERT_EQ(p.groups.size(), 2u);
    EXPECT_EQ(p.groups[0].num_seqs, 2);
    EXPECT_EQ(p.groups[0].num_rows, 256);
    EXPECT_EQ(p.groups[1].first_seq, 3);
    EXPECT_EQ(p.groups[1].num_rows, 64);
    std::vector<int32_t> third(300);
    std::iota(third.begin(), third.end(), 110);
    EXPECT_EQ(p.absorbed_tokens, third);

    const step_layout fits_alone({{0, 200}, {0, 100}});  // 256 + 128 rows: one group each
    const mla_prefill_plan q = plan_mla_prefill(fits_alone.host(), 4, 256, true);
    ASSERT_EQ(q.groups.size(), 2u);
    EXPECT_TRUE(q.absorbed_tokens.empty());
}

TEST(MlaPrefillPlan, DecodesAndTheAbsorbedOnlyModeUploadNothing) {
    const step_layout decode({{5, 1}, {300, 1}, {0, 1}});
    const mla_prefill_plan d = plan_mla_prefill(decode.host(), 16, 4096, true);
    EXPECT_TRUE(d.all_absorbed);
    EXPECT_TRUE(d.decode_only);
    EXPECT_TRUE(d.data.empty());
    EXPECT_EQ(d.num_tokens, 3);

    const step_layout prefill({{0, 50}, {10, 7}});
    const mla_prefill_plan off = plan_mla_prefill(prefill.host(), 16, 4096, false);
    EXPECT_TRUE(off.all_absorbed);
    EXPECT_FALSE(off.decode_only);
    EXPECT_TRUE(off.groups.empty());
    EXPECT_TRUE(off.data.empty());
    EXPECT_EQ(off.num_tokens, 57);

    const step_layout empty(std::vector<std::pair<int32_t, int32_t>>{});
    EXPECT_EQ(plan_mla_prefill(empty.host(), 16, 4096, true).num_tokens, 0);
}

}  // namespace
}  // namespace zmoe::cuda
