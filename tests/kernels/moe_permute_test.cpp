// launch_moe_permute against ref::moe_permute_plan: offsets, destination rows and row tokens exact, and the
// gathered activations bit for bit, over skewed routings with empty and ragged expert groups; batches on both
// sides of the one-block plan (up to 4096 assignments) and the chunked one.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct permute_case {
    int32_t num_tokens, top_k, num_experts, row_align, hidden;
};

/// Distinct experts per token, drawn with a skew: only every other expert is ever chosen (so half the groups
/// are empty) and one expert is hot.
std::vector<int32_t> skewed_topk_ids(int32_t num_tokens, int32_t top_k, int32_t num_experts, std::mt19937& rng) {
    std::vector<int32_t> ids(size_t(num_tokens) * top_k);
    const int32_t used = std::max(top_k, num_experts / 2);
    const int32_t stride = 2 * used <= num_experts ? 2 : 1;
    std::uniform_int_distribution<int32_t> dist(0, used - 1);
    for (int32_t t = 0; t < num_tokens; ++t) {
        for (int32_t j = 0; j < top_k; ++j) {
            int32_t e;
            bool repeat;
            do {
                e = ((j == 0 && t % 3 == 0) ? used / 2 : dist(rng)) * stride;
                repeat = false;
                for (int32_t i = 0; i < j; ++i) repeat |= ids[size_t(t) * top_k + i] == e;
            } while (repeat);
            ids[size_t(t) * top_k + j] = e;
        }
    }
    return ids;
}

class MoePermute : public ::testing::TestWithParam<permute_case> {};

TEST_P(MoePermute, MatchesReferenceExactly) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens + 7 * c.num_experts + c.row_align);
    const auto ids = skewed_topk_ids(c.num_tokens, c.top_k, c.num_experts, rng);
    const auto x = random_bf16(size_t(c.num_tokens) * c.hidden, 1.f, rng);
    const int32_t max_rows = moe_permuted_rows_bound(c.num_tokens, c.top_k, c.num_experts, c.row_align);

    auto d_ids = upload(ids);
    auto d_x = upload_bf16(x);
    device_buffer<int32_t> d_offsets(c.num_experts + 1), d_dest(ids.size()), d_row_token(max_rows);
    device_buffer<bf16> d_xp(size_t(max_rows) * c.hidden);
    device_buffer<uint8_t> d_ws(moe_permute_workspace_bytes(c.num_tokens, c.top_k, c.num_experts));
    d_offsets.poison();
    d_dest.poison();
    d_row_token.poison(0x22);
    moe_permute_params p;
    p.topk_ids = d_ids.get();
    p.x = d_x.get();
    p.expert_offsets = d_offsets.get();
    p.dest_rows = d_dest.get();
    p.row_token = d_row_token.get();
    p.x_permuted = d_xp.get();
    p.workspace = d_ws.get();
    p.num_tokens = c.num_tokens;
    p.top_k = c.top_k;
    p.num_experts = c.num_experts;
    p.hidden = c.hidden;
    p.row_align = c.row_align;
    p.max_rows = max_rows;
    launch_moe_permute(p, nullptr);
    sync_and_check();

    std::vector<int32_t> offsets(c.num_experts + 1), dest(ids.size()), row_token(max_rows);
    ref::moe_permute_plan(ids.data(), c.num_tokens, c.top_k, c.num_experts, c.row_align, max_rows, offsets.data(),
                          dest.data(), row_token.data());
    EXPECT_EQ(download(d_offsets), offsets);
    EXPECT_EQ(download(d_dest), dest);
    EXPECT_EQ(download(d_row_token), row_token);

    const auto xp = download_bf16(d_xp);
    size_t mismatches = 0;
    for (int32_t r = 0; r < offsets[c.num_experts]; ++r)
        for (int32_t h = 0; h < c.hidden; ++h) {
            const float want = row_token[r] < 0 ? 0.f : x[size_t(row_token[r]) * c.hidden + h];
            mismatches += xp[size_t(r) * c.hidden + h] != want;
        }
    EXPECT_EQ(mismatches, 0u);
    // Sanity of the reference itself: some experts are empty, groups are padded, every assignment has a row.
    int32_t empty = 0;
    for (int32_t e = 0; e < c.num_experts; ++e) {
        EXPECT_EQ(offsets[e] % c.row_align, 0);
        empty += offsets[e + 1] == offsets[e];
    }
    if (c.num_experts >= 8) {
        EXPECT_GT(empty, 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoePermute,
                         ::testing::Values(permute_case{1, 2, 8, 16, 64}, permute_case{3, 8, 128, 16, 2048},
                                           permute_case{100, 4, 60, 64, 256}, permute_case{1000, 8, 128, 64, 128},
                                           permute_case{4096, 8, 128, 128, 64}, permute_case{5000, 8, 1024, 16, 64},
                                           permute_case{0, 8, 128, 16, 64}, permute_case{256, 8, 128, 32, 64},
                                           permute_case{77, 3, 40, 32, 16}, permute_case{20000, 8, 128, 64, 16},
                                           permute_case{3000, 6, 96, 64, 16}, permute_case{512, 8, 128, 64, 64},
                                           permute_case{2, 8, 1024, 16, 64}, permute_case{33, 8, 128, 8, 64},
                                           permute_case{0, 8, 128, 8, 64}, permute_case{500, 2, 8, 8, 16}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("t", c.num_tokens, "_k", c.top_k, "_e", c.num_experts, "_align",
                                              c.row_align, "_h", c.hidden);
                         });

}  // namespace
}  // namespace zmoe::kernels::test
