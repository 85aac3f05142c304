// launch_grouped_gemm against ref::grouped_gemm, for the gate/up GEMM with fused SiLU * up and the down GEMM,
// over routings with empty and ragged expert groups, partial N tiles and K tails, for each kernel: the mma.sync
// one, the sm_90a wgmma + TMA one (skipped off compute capability 9.x) and the automatic choice.

#include "kernels/grouped_gemm_sm90.hpp"
#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct gemm_case {
    int32_t num_tokens, top_k, num_experts, k, n;
    bool swiglu;
    int32_t row_align;
    grouped_gemm_impl impl = grouped_gemm_impl::mma_sync;
    bool gather = false;   ///< read the unpermuted x through a_rows = row_token instead of the permuted copy
    int32_t max_ctas = 0;  ///< grouped_gemm_params::max_ctas (the persistent kernel's grid bound)
    int32_t coop = -1;     ///< wgmma: a detail::coop_variant forced (-1: the default of cooperative_variant)
};

const char* impl_name(grouped_gemm_impl impl) {
    switch (impl) {
        case grouped_gemm_impl::automatic:
            return "auto";
        case grouped_gemm_impl::mma_sync:
            return "mma";
        case grouped_gemm_impl::wgmma:
            return "wgmma";
        case grouped_gemm_impl::small:
            return "small";
    }
    return "?";
}

bool device_is_sm90() {
    int dev = 0, major = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&dev));
    ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major == 9;
}

/// Routing of random tokens by the reference router, with every third expert never chosen.
std::vector<int32_t> route(int32_t num_tokens, int32_t top_k, int32_t num_experts, std::mt19937& rng) {
    auto logits = random_f32(size_t(num_tokens) * num_experts, 2.f, rng);
    for (int32_t t = 0; t < num_tokens; ++t)
        for (int32_t e = 0; e < num_experts; e += 3)
            if (num_experts - (num_experts + 2) / 3 >= top_k) logits[size_t(t) * num_experts + e] -= 100.f;
    std::vector<int32_t> ids(size_t(num_tokens) * top_k), counts(num_experts);
    std::vector<float> weights(ids.size());
    ref::router_topk(logits.data(), ids.data(), weights.data(), counts.data(), num_tokens, num_experts, top_k, true);
    return ids;
}

constexpr auto kWgmma = grouped_gemm_impl::wgmma;
constexpr auto kMma = grouped_gemm_impl::mma_sync;
constexpr auto kAuto = grouped_gemm_impl::automatic;
constexpr auto kSmall = grouped_gemm_impl::small;
constexpr int32_t kTwoBuffers = int32_t(detail::coop_variant::two_buffers),
                  kAllBoxes = int32_t(detail::coop_variant::all_boxes),
                  kAllBoxesFastDiv = int32_t(detail::coop_variant::all_boxes_fast_div),
                  kAllBoxesTanh = int32_t(detail::coop_variant::all_boxes_tanh);

class GroupedGemm : public ::testing::TestWithParam<gemm_case> {};

TEST_P(GroupedGemm, MatchesReference) {
    const auto c = GetParam();
    if (c.impl == kWgmma && !device_is_sm90()) GTEST_SKIP() << "the wgmma kernel needs sm_90";
    std::mt19937 rng(c.num_tokens * 5 + c.k + c.n + c.swiglu);
    const auto ids = route(c.num_tokens, c.top_k, c.num_experts, rng);
    const int32_t max_rows = moe_permuted_rows_bound(c.num_tokens, c.top_k, c.num_experts, c.row_align);
    std::vector<int32_t> offsets(c.num_experts + 1), dest(ids.size()), row_token(max_rows);
    ref::moe_permute_plan(ids.data(), c.num_tokens, c.top_k, c.num_experts, c.row_align, max_rows, offsets.data(),
                          dest.data(), row_token.data());
    const auto x = random_bf16(size_t(c.num_tokens) * c.k, 1.f, rng);
    std::vector<float> a(size_t(max_rows) * c.k, 0.f);
    for (int32_t r = 0; r < max_rows; ++r)
        if (row_token[r] >= 0) std::copy_n(&x[size_t(row_token[r]) * c.k], c.k, &a[size_t(r) * c.k]);
    const int32_t n_b = c.swiglu ? 2 * c.n : c.n;
    const auto b = random_bf16(size_t(c.num_experts) * n_b * c.k, 2.f / std::sqrt(float(c.k)), rng);

    auto d_a = upload_bf16(a);
    auto d_x = upload_bf16(x);
    auto d_row_token = upload(row_token);
    auto d_b = upload_bf16(b);
    auto d_offsets = upload(offsets);
    device_buffer<bf16> d_c(size_t(max_rows) * c.n);
    d_c.poison();
    grouped_gemm_params p;
    p.a = c.gather ? d_x.get() : d_a.get();
    p.a_rows = c.gather ? d_row_token.get() : nullptr;
    p.b = d_b.get();
    p.expert_offsets = d_offsets.get();
    p.c = d_c.get();
    p.max_rows = max_rows;
    p.n = c.n;
    p.k = c.k;
    p.num_experts = c.num_experts;
    p.row_align = c.row_align;
    p.swiglu = c.swiglu;
    p.impl = c.impl;
    p.max_ctas = c.max_ctas;
    if (c.impl == kWgmma && c.coop >= 0)
        detail::launch_grouped_gemm_wgmma(p, detail::coop_variant(c.coop), nullptr);
    else
        launch_grouped_gemm(p, nullptr);
    sync_and_check();

    std::vector<float> want(size_t(max_rows) * c.n, 0.f);
    ref::grouped_gemm(a.data(), b.data(), offsets.data(), want.data(), c.n, c.k, c.num_experts, c.swiglu);
    std::vector<bool> mask(want.size(), false);  // rows holding a real token; padding rows are don't-care
    for (int32_t r = 0; r < max_rows; ++r)
        if (row_token[r] >= 0) std::fill_n(mask.begin() + size_t(r) * c.n, c.n, true);
    EXPECT_LT(rel_error(download_bf16(d_c), want, &mask), kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GroupedGemm,
    ::testing::Values(
        gemm_case{3, 2, 8, 64, 32, true, 16}, gemm_case{3, 2, 8, 32, 64, false, 16},
        gemm_case{1, 8, 128, 2048, 768, true, 16}, gemm_case{1, 8, 128, 768, 2048, false, 16},
        gemm_case{64, 8, 128, 2048, 768, true, 16}, gemm_case{256, 8, 128, 2048, 768, true, 32},
        gemm_case{256, 8, 128, 768, 2048, false, 32}, gemm_case{37, 3, 16, 96, 40, true, 32},
        gemm_case{4096, 8, 64, 256, 128, true, 64}, gemm_case{4096, 8, 64, 128, 256, false, 64},
        gemm_case{200, 4, 60, 512, 1408, true, 64}, gemm_case{500, 2, 8, 96, 40, true, 128},
        gemm_case{500, 2, 8, 40, 96, false, 128}, gemm_case{2048, 8, 32, 256, 128, true, 128},
        gemm_case{2048, 8, 32, 128, 256, false, 128},
        // The wgmma kernel: 64-row tiles (row_align 64) and 128-row tiles (row_align 128).
        gemm_case{1, 8, 128, 2048, 768, true, 64, kWgmma}, gemm_case{1, 8, 128, 768, 2048, false, 128, kWgmma},
        gemm_case{37, 3, 16, 96, 40, true, 64, kWgmma}, gemm_case{37, 3, 16, 40, 96, false, 128, kWgmma},
        gemm_case{300, 4, 16, 192, 200, true, 128, kWgmma}, gemm_case{300, 4, 16, 200, 192, false, 64, kWgmma},
        gemm_case{200, 4, 60, 512, 1408, true, 64, kWgmma}, gemm_case{200, 4, 60, 1408, 512, false, 64, kWgmma},
        gemm_case{256, 8, 32, 2048, 768, true, 64, kWgmma}, gemm_case{256, 8, 32, 768, 2048, false, 64, kWgmma},
        gemm_case{2048, 8, 32, 256, 128, true, 128, kWgmma}, gemm_case{2048, 8, 32, 128, 256, false, 128, kWgmma},
        gemm_case{4096, 8, 64, 256, 128, true, 64, kWgmma},
        // 128-row tiles over 64-row groups (a group of an odd number of blocks ends in a 64-row tile).
        gemm_case{3000, 8, 64, 128, 256, false, 64, kWgmma}, gemm_case{3000, 6, 40, 136, 72, true, 64, kWgmma},
        gemm_case{20000, 2, 64, 128, 64, true, 128, kWgmma}, gemm_case{20000, 2, 64, 64, 128, false, 64, kWgmma},
        // Many tiles per CTA through the epilogue's two output buffers per warpgroup, a partial last column box
        // (n % 64 == 8), and more experts than the wgmma tile schedule holds (auto falls back to mma.sync).
        gemm_case{20000, 2, 64, 128, 256, false, 64, kWgmma}, gemm_case{3000, 8, 64, 128, 264, false, 64, kWgmma},
        gemm_case{5000, 4, 32, 64, 264, true, 128, kWgmma}, gemm_case{500, 2, 300, 64, 64, false, 64, kAuto},
        // x read through a_rows (row_token) instead of the permuted copy, both kernels and all tiles.
        gemm_case{37, 3, 16, 96, 40, true, 16, kMma, true}, gemm_case{500, 2, 8, 40, 96, false, 128, kMma, true},
        gemm_case{1, 8, 128, 2048, 768, true, 64, kWgmma, true},
        gemm_case{300, 4, 16, 200, 192, false, 64, kWgmma, true},
        gemm_case{256, 8, 32, 2048, 768, true, 64, kWgmma, true},
        gemm_case{3000, 6, 40, 136, 72, true, 64, kWgmma, true},
        gemm_case{2048, 8, 32, 256, 128, true, 128, kWgmma, true},
        gemm_case{20000, 2, 64, 128, 64, true, 64, kWgmma, true},
        gemm_case{5000, 4, 32, 200, 264, false, 128, kWgmma, true},
        gemm_case{20000, 2, 64, 136, 128, true, 128, kWgmma, true},
        // The small-group kernel (8-row groups; moe_row_align_for does not pick it, row_align 8 or impl small do):
        // Qwen3-30B-A3B shapes up to 16 rows per expert (256 tokens), all three tile counts (mean rows per expert up
        // to 4, 8, more), experts with more rows than its tiles (further passes), K tails (K % 32 != 0), N not a
        // multiple of 16 or 32, other row alignments, and x read through a_rows.
        gemm_case{1, 8, 128, 2048, 768, true, 8, kSmall}, gemm_case{1, 8, 128, 768, 2048, false, 8, kSmall},
        gemm_case{9, 8, 128, 2048, 768, true, 8, kSmall, true}, gemm_case{9, 8, 128, 768, 2048, false, 8, kSmall},
        gemm_case{33, 8, 128, 2048, 768, true, 8, kSmall, true}, gemm_case{33, 8, 128, 768, 2048, false, 8, kSmall},
        gemm_case{100, 8, 128, 2048, 768, true, 8, kAuto, true}, gemm_case{100, 8, 128, 768, 2048, false, 8, kAuto},
        gemm_case{256, 8, 128, 2048, 768, true, 8, kAuto, true}, gemm_case{256, 8, 128, 768, 2048, false, 8, kAuto},
        gemm_case{3, 2, 8, 64, 32, true, 8, kSmall}, gemm_case{3, 2, 8, 32, 64, false, 8, kSmall},
        gemm_case{37, 3, 16, 104, 40, true, 8, kSmall, true}, gemm_case{37, 3, 16, 40, 104, false, 8, kSmall},
        gemm_case{500, 2, 8, 96, 40, true, 8, kSmall, true}, gemm_case{500, 2, 8, 40, 96, false, 8, kSmall},
        gemm_case{200, 4, 60, 512, 1408, true, 8, kSmall}, gemm_case{200, 4, 60, 1408, 512, false, 8, kSmall},
        gemm_case{64, 8, 128, 2048, 768, true, 16, kSmall, true}, gemm_case{64, 8, 128, 768, 2048, false, 64, kSmall},
        // The automatic choice at Qwen3-30B-A3B shapes (wgmma on sm_90 from row_align 64 on).
        gemm_case{8, 8, 128, 2048, 768, true, 16, kAuto}, gemm_case{64, 8, 128, 768, 2048, false, 64, kAuto},
        gemm_case{1000, 4, 32, 512, 256, true, 128, kAuto},
        // The persistent wgmma kernel on fewer CTAs than SMs (SMs left to an exchange in flight): each CTA walks
        // more tiles; one CTA walks them all.
        gemm_case{3000, 8, 64, 128, 256, false, 64, kWgmma, true, 7},
        gemm_case{2048, 8, 32, 256, 128, true, 128, kWgmma, true, 124},
        gemm_case{300, 4, 16, 200, 192, false, 64, kWgmma, false, 1},
        // The cooperative kernel's epilogue variants forced (two buffers per warpgroup reused box after box, or one
        // per box; SiLU with IEEE division, the approximate one, tanh.approx), both tile heights, ragged groups,
        // partial last column boxes, many tiles per CTA.
        gemm_case{300, 4, 16, 192, 200, true, 128, kWgmma, true, 0, kTwoBuffers},
        gemm_case{3000, 8, 64, 128, 264, false, 64, kWgmma, false, 0, kTwoBuffers},
        gemm_case{300, 4, 16, 192, 200, true, 64, kWgmma, true, 0, kAllBoxes},
        gemm_case{3000, 8, 64, 128, 264, false, 64, kWgmma, false, 0, kAllBoxes},
        gemm_case{5000, 4, 32, 200, 264, false, 128, kWgmma, true, 0, kAllBoxes},
        gemm_case{2048, 8, 32, 256, 136, true, 128, kWgmma, true, 0, kAllBoxesFastDiv},
        gemm_case{20000, 2, 64, 136, 128, true, 64, kWgmma, true, 7, kAllBoxesFastDiv},
        gemm_case{2048, 8, 32, 256, 136, true, 128, kWgmma, true, 0, kAllBoxesTanh},
        gemm_case{37, 3, 16, 96, 40, true, 64, kWgmma, false, 0, kAllBoxesTanh}),
    [](const auto& info) {
        const auto& c = info.param;
        return make_name("t", c.num_tokens, "_k", c.top_k, "_e", c.num_experts, "_K", c.k, "_N", c.n,
                         (c.swiglu ? "_swiglu" : "_plain"), "_align", c.row_align, "_", impl_name(c.impl),
                         (c.gather ? "_gather" : ""), (c.max_ctas > 0 ? "_ctas" : ""),
                         (c.max_ctas > 0 ? std::to_string(c.max_ctas) : std::string()),
                         (c.coop >= 0 ? "_coop" + std::to_string(c.coop) : std::string()));
    });

}  // namespace
}  // namespace zmoe::kernels::test
