// launch_moe_combine against ref::moe_combine (and bit for bit against its contract's summation order: fused
// multiply-adds in top-k order), and the whole MoE layer chained on the GPU (router, permute,
// gate/up GEMM with SiLU * up, down GEMM, combine) against the chained CPU references.

#include <numeric>

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct combine_case {
    int32_t num_tokens, top_k, hidden;
};

class MoeCombine : public ::testing::TestWithParam<combine_case> {};

TEST_P(MoeCombine, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens + c.hidden);
    const int32_t rows = c.num_tokens * c.top_k + 16;
    std::vector<int32_t> dest(size_t(c.num_tokens) * c.top_k);
    std::vector<int32_t> perm(rows);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy_n(perm.begin(), dest.size(), dest.begin());
    const auto y = random_bf16(size_t(rows) * c.hidden, 3.f, rng);
    auto w = random_f32(dest.size(), 1.f, rng);
    for (auto& v : w) v = std::abs(v);

    auto d_y = upload_bf16(y);
    auto d_dest = upload(dest);
    auto d_w = upload(w);
    device_buffer<bf16> d_out(size_t(c.num_tokens) * c.hidden);
    d_out.poison();
    launch_moe_combine({.y = d_y.get(),
                        .dest_rows = d_dest.get(),
                        .topk_weights = d_w.get(),
                        .out = d_out.get(),
                        .num_tokens = c.num_tokens,
                        .top_k = c.top_k,
                        .hidden = c.hidden},
                       nullptr);
    sync_and_check();
    std::vector<float> want(d_out.size());
    ref::moe_combine(y.data(), dest.data(), w.data(), want.data(), c.num_tokens, c.top_k, c.hidden);
    const auto got = download_bf16(d_out);
    EXPECT_LT(rel_error(got, want), kBf16Tolerance);
    // The contract's order exactly: per element, fp32 fused multiply-adds over the choices in top-k order.
    std::vector<float> exact(got.size());
    for (int32_t t = 0; t < c.num_tokens; ++t)
        for (int32_t h = 0; h < c.hidden; ++h) {
            float acc = 0.f;
            for (int32_t j = 0; j < c.top_k; ++j) {
                const size_t a = size_t(t) * c.top_k + j;
                acc = std::fma(w[a], y[size_t(dest[a]) * c.hidden + h], acc);
            }
            exact[size_t(t) * c.hidden + h] = ref::round_bf16(acc);
        }
    EXPECT_EQ(got, exact);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeCombine,
                         ::testing::Values(combine_case{1, 2, 64}, combine_case{1, 8, 2048},
                                           combine_case{1000, 8, 2048}, combine_case{4096, 4, 256},
                                           combine_case{33, 6, 128}, combine_case{5, 1, 64}, combine_case{100, 3, 72},
                                           combine_case{7, 12, 264}, combine_case{3, 16, 2056},
                                           combine_case{2, 64, 4104}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("t", c.num_tokens, "_k", c.top_k, "_h", c.hidden);
                         });

struct layer_case {
    int32_t num_tokens, num_experts, top_k, hidden, inter;
};

class MoeLayer : public ::testing::TestWithParam<layer_case> {};

TEST_P(MoeLayer, ChainedKernelsMatchChainedReferences) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens * 11 + c.num_experts);
    const auto x = random_bf16(size_t(c.num_tokens) * c.hidden, 1.f, rng);
    const auto logits = random_f32(size_t(c.num_tokens) * c.num_experts, 3.f, rng);
    const auto w1 = random_bf16(size_t(c.num_experts) * 2 * c.inter * c.hidden, 2.f / std::sqrt(float(c.hidden)), rng);
    const auto w2 = random_bf16(size_t(c.num_experts) * c.hidden * c.inter, 2.f / std::sqrt(float(c.inter)), rng);
    const int32_t align = moe_row_align_for(c.num_tokens, c.top_k, c.num_experts);
    const int32_t max_rows = moe_permuted_rows_bound(c.num_tokens, c.top_k, c.num_experts, align);
    const size_t assignments = size_t(c.num_tokens) * c.top_k;

    auto d_x = upload_bf16(x);
    auto d_logits = upload(logits);
    auto d_w1 = upload_bf16(w1);
    auto d_w2 = upload_bf16(w2);
    device_buffer<int32_t> d_ids(assignments), d_counts(c.num_experts), d_offsets(c.num_experts + 1),
        d_dest(assignments), d_row_token(max_rows);
    device_buffer<float> d_weights(assignments);
    device_buffer<uint8_t> d_ws(moe_permute_workspace_bytes(c.num_tokens, c.top_k, c.num_experts));
    device_buffer<bf16> d_xp(size_t(max_rows) * c.hidden), d_act(size_t(max_rows) * c.inter),
        d_y(size_t(max_rows) * c.hidden), d_out(size_t(c.num_tokens) * c.hidden);
    d_out.poison();

    launch_router_topk({.logits = d_logits.get(),
                        .topk_ids = d_ids.get(),
                        .topk_weights = d_weights.get(),
                        .expert_counts = d_counts.get(),
                        .num_tokens = c.num_tokens,
                        .num_experts = c.num_experts,
                        .top_k = c.top_k,
                        .renormalize = true},
                       nullptr);
    moe_permute_params pp;
    pp.topk_ids = d_ids.get();
    pp.x = d_x.get();
    pp.expert_offsets = d_offsets.get();
    pp.dest_rows = d_dest.get();
    pp.row_token = d_row_token.get();
    pp.x_permuted = d_xp.get();
    pp.workspace = d_ws.get();
    pp.num_tokens = c.num_tokens;
    pp.top_k = c.top_k;
    pp.num_experts = c.num_experts;
    pp.hidden = c.hidden;
    pp.row_align = align;
    pp.max_rows = max_rows;
    launch_moe_permute(pp, nullptr);
    const grouped_gemm_params g1{.a = d_xp.get(),
                                 .b = d_w1.get(),
                                 .expert_offsets = d_offsets.get(),
                                 .c = d_act.get(),
                                 .max_rows = max_rows,
                                 .n = c.inter,
                                 .k = c.hidden,
                                 .num_experts = c.num_experts,
                                 .row_align = align,
                                 .swiglu = true};
    launch_grouped_gemm(g1, nullptr);
    const grouped_gemm_params g2{.a = d_act.get(),
                                 .b = d_w2.get(),
                                 .expert_offsets = d_offsets.get(),
                                 .c = d_y.get(),
                                 .max_rows = max_rows,
                                 .n = c.hidden,
                                 .k = c.inter,
                                 .num_experts = c.num_experts,
                                 .row_align = align,
                                 .swiglu = false};
    launch_grouped_gemm(g2, nullptr);
    launch_moe_combine({.y = d_y.get(),
                        .dest_rows = d_dest.get(),
                        .topk_weights = d_weights.get(),
                        .out = d_out.get(),
                        .num_tokens = c.num_tokens,
                        .top_k = c.top_k,
                        .hidden = c.hidden},
                       nullptr);
    sync_and_check();

    std::vector<int32_t> ids(assignments), counts(c.num_experts), offsets(c.num_experts + 1), dest(assignments),
        row_token(max_rows);
    std::vector<float> weights(assignments);
    ref::router_topk(logits.data(), ids.data(), weights.data(), counts.data(), c.num_tokens, c.num_experts, c.top_k,
                     true);
    ref::moe_permute_plan(ids.data(), c.num_tokens, c.top_k, c.num_experts, align, max_rows, offsets.data(),
                          dest.data(), row_token.data());
    std::vector<float> xp(size_t(max_rows) * c.hidden, 0.f), act(size_t(max_rows) * c.inter),
        y(size_t(max_rows) * c.hidden), want(size_t(c.num_tokens) * c.hidden);
    for (int32_t r = 0; r < max_rows; ++r)
        if (row_token[r] >= 0) std::copy_n(&x[size_t(row_token[r]) * c.hidden], c.hidden, &xp[size_t(r) * c.hidden]);
    ref::grouped_gemm(xp.data(), w1.data(), offsets.data(), act.data(), c.inter, c.hidden, c.num_experts, true);
    ref::grouped_gemm(act.data(), w2.data(), offsets.data(), y.data(), c.hidden, c.inter, c.num_experts, false);
    ref::moe_combine(y.data(), dest.data(), weights.data(), want.data(), c.num_tokens, c.top_k, c.hidden);
    EXPECT_EQ(download(d_counts), counts);
    EXPECT_LT(rel_error(download_bf16(d_out), want), kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeLayer,
                         ::testing::Values(layer_case{1, 8, 2, 64, 32}, layer_case{257, 16, 4, 256, 128},
                                           layer_case{2048, 64, 8, 128, 64}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("t", c.num_tokens, "_e", c.num_experts, "_k", c.top_k, "_h", c.hidden,
                                              "_i", c.inter);
                         });

}  // namespace
}  // namespace zmoe::kernels::test
