// launch_skinny_gemm_bf16 (the tensor-core path for decode steps of tens of sequences) against ref::gemm (+ bias):
// 1 to kSkinnyGemmMaxRows rows, the decode shapes of Qwen3-30B-A3B (QKV, O), n and k that are not multiples of the
// 64-row tile or the 64-wide k step, fp32 and BF16 outputs, every split count; and the result is deterministic, does
// not depend on the other rows of x, and is the same sum whatever the split count (within fp32 rounding).

#include "tests/kernels/dense_gemm_test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct skinny_case {
    int32_t m, n, k;
    bool y_fp32;
    bool bias;
    int32_t splits;  // 0: the kernel's choice
};

std::vector<float> run_skinny(const skinny_case& c, const std::vector<float>& x, const std::vector<float>& w,
                              const std::vector<float>& bias) {
    return run_dense_bf16(skinny_gemm_bf16_params{.m = c.m, .n = c.n, .k = c.k, .y_fp32 = c.y_fp32, .splits = c.splits},
                          c.bias, x, w, bias, launch_skinny_gemm_bf16);
}

struct inputs {
    std::vector<float> x, w, bias;
};

inputs random_inputs(const skinny_case& c, uint32_t seed) {
    std::mt19937 rng(seed);
    inputs in;
    in.x = random_bf16(size_t(c.m) * c.k, 1.f, rng);
    in.w = random_bf16(size_t(c.n) * c.k, 1.f / std::sqrt(float(c.k)), rng);
    in.bias = random_bf16(size_t(c.n), 1.f, rng);
    return in;
}

class SkinnyGemmBf16 : public ::testing::TestWithParam<skinny_case> {};

TEST_P(SkinnyGemmBf16, MatchesReference) {
    const auto c = GetParam();
    ASSERT_TRUE(skinny_gemm_bf16_supported(c.m, c.n, c.k));
    const inputs in = random_inputs(c, uint32_t(c.m * 31 + c.n + c.k + c.splits));
    const std::vector<float> got = run_skinny(c, in.x, in.w, in.bias);

    const std::vector<float> want = dense_reference(in.x, in.w, in.bias, c.bias, c.m, c.n, c.k);
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(rel_error(got, want), c.y_fp32 ? 1e-4 : kBf16Tolerance);
}

TEST(SkinnyGemmBf16, DeterministicAndIndependentOfOtherRows) {
    // 64 rows of x at the O shape; the same launch twice gives the same bits, and row 37 of x alone gives the bits
    // it has among the 64 (the split count depends on n and k only).
    const skinny_case many{64, 2048, 4096, true, false, 0};
    const inputs in = random_inputs(many, 5);
    const std::vector<float> a = run_skinny(many, in.x, in.w, {});
    const std::vector<float> b = run_skinny(many, in.x, in.w, {});
    EXPECT_EQ(a, b);
    const int32_t row = 37;
    const skinny_case one{1, many.n, many.k, true, false, 0};
    const std::vector<float> x_row(in.x.begin() + size_t(row) * many.k, in.x.begin() + size_t(row + 1) * many.k);
    const std::vector<float> alone = run_skinny(one, x_row, in.w, {});
    for (int32_t j = 0; j < many.n; ++j) ASSERT_EQ(alone[j], a[size_t(row) * many.n + j]) << "column " << j;
}

TEST(SkinnyGemmBf16, SplitCountChangesOnlyTheRounding) {
    const skinny_case base{24, 300, 1000, true, false, 1};
    const inputs in = random_inputs(base, 9);
    const std::vector<float> one = run_skinny(base, in.x, in.w, {});
    for (int32_t s = 2; s <= 8; ++s) {
        skinny_case c = base;
        c.splits = s;
        EXPECT_LT(rel_error(run_skinny(c, in.x, in.w, {}), one), 1e-5) << "splits " << s;
    }
}

TEST(SkinnyGemmBf16, Supported) {
    EXPECT_TRUE(skinny_gemm_bf16_supported(1, 5120, 2048));
    EXPECT_TRUE(skinny_gemm_bf16_supported(kSkinnyGemmMaxRows, 2048, 4096));
    EXPECT_TRUE(skinny_gemm_bf16_supported(kSkinnyGemmMaxRows, 1, 8));
    EXPECT_FALSE(skinny_gemm_bf16_supported(kSkinnyGemmMaxRows + 1, 2048, 2048));
    EXPECT_FALSE(skinny_gemm_bf16_supported(0, 2048, 2048));
    EXPECT_FALSE(skinny_gemm_bf16_supported(16, 2048, 2044));  // k not a multiple of 8
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SkinnyGemmBf16,
    ::testing::Values(skinny_case{9, 5120, 2048, false, false, 0}, skinny_case{16, 5120, 2048, false, false, 0},
                      skinny_case{32, 5120, 2048, false, true, 0}, skinny_case{64, 5120, 2048, false, false, 0},
                      skinny_case{64, 2048, 4096, false, false, 0}, skinny_case{48, 2048, 4096, false, true, 0},
                      skinny_case{1, 5120, 2048, false, false, 0}, skinny_case{5, 2048, 4096, false, false, 0},
                      skinny_case{8, 128, 2048, true, false, 0}, skinny_case{17, 130, 72, true, true, 0},
                      skinny_case{33, 1000, 136, false, true, 0}, skinny_case{63, 77, 8, true, false, 0},
                      skinny_case{12, 4100, 2056, false, false, 3}, skinny_case{40, 65, 4096, true, false, 8},
                      skinny_case{2, 3, 24, false, true, 1}),
    [](const auto& info) {
        const auto& c = info.param;
        return make_name("m", c.m, "_n", c.n, "_k", c.k, (c.y_fp32 ? "_f32" : "_bf16"), (c.bias ? "_bias" : ""), "_s",
                         c.splits);
    });

}  // namespace
}  // namespace zmoe::kernels::test
