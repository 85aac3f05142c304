// launch_gemv_bf16 (the small-M dense path) against ref::gemm (+ bias): 1 to kGemvMaxRows rows, the decode shapes
// of Qwen3-30B-A3B (QKV, O, router with fp32 logits), odd row counts, short and long k, one to four rows a warp; and
// the result does not depend on the grid (a row's bits are the same alone and among many); at one row of x, variant
// gemv_wave (the default there) gives the eight-warp kernel's bits (ZMOE_DECODE_TUNING=none).

#include "tests/kernels/dense_gemm_test_util.hpp"
#include "tests/kernels/tuning_scope.hpp"

namespace zmoe::kernels::test {
namespace {

struct gemv_case {
    int32_t m, n, k;
    bool y_fp32;
    bool bias;
};

std::vector<float> run_gemv(const gemv_case& c, const std::vector<float>& x, const std::vector<float>& w,
                            const std::vector<float>& bias) {
    return run_dense_bf16(gemv_bf16_params{.m = c.m, .n = c.n, .k = c.k, .y_fp32 = c.y_fp32}, c.bias, x, w, bias,
                          launch_gemv_bf16);
}

class GemvBf16 : public ::testing::TestWithParam<gemv_case> {};

TEST_P(GemvBf16, MatchesReference) {
    const auto c = GetParam();
    ASSERT_TRUE(gemv_bf16_supported(c.m, c.n, c.k));
    std::mt19937 rng(c.m * 31 + c.n + c.k);
    const auto x = random_bf16(size_t(c.m) * c.k, 1.f, rng);
    const auto w = random_bf16(size_t(c.n) * c.k, 1.f / std::sqrt(float(c.k)), rng);
    const auto bias = random_bf16(size_t(c.n), 1.f, rng);
    const std::vector<float> got = run_gemv(c, x, w, bias);

    const std::vector<float> want = dense_reference(x, w, bias, c.bias, c.m, c.n, c.k);
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(rel_error(got, want), c.y_fp32 ? 1e-4 : kBf16Tolerance);
}

TEST(GemvBf16, RowDoesNotDependOnTheGrid) {
    // 9000 rows run on a grid-stride loop; the same weights' row 8191 alone must give the same bits.
    const gemv_case many{2, 9000, 1024, true, false};
    std::mt19937 rng(3);
    const auto x = random_bf16(size_t(many.m) * many.k, 1.f, rng);
    const auto w = random_bf16(size_t(many.n) * many.k, 0.03f, rng);
    const std::vector<float> all = run_gemv(many, x, w, {});
    const int32_t row = 8191;
    const gemv_case one{2, 1, 1024, true, false};
    const std::vector<float> w_row(w.begin() + size_t(row) * many.k, w.begin() + size_t(row + 1) * many.k);
    const std::vector<float> alone = run_gemv(one, x, w_row, {});
    for (int32_t i = 0; i < many.m; ++i) EXPECT_EQ(alone[i], all[size_t(i) * many.n + row]) << "row of x " << i;
}

TEST(GemvBf16, WaveVariantEqualsTheMeasuredKernelBitForBit) {
    // One row of x (the only one gemv_wave takes): one to four rows a warp, blocks of four warps instead of eight, the
    // first chunks loaded before the wait; a lane's chunks and the warp reduction are in the same order, so every
    // output bit is the same as the eight-warp kernel's.
    // Rows per warp on H100/H200 (132 multiprocessors; ptxas at sm_90a: 96 registers at one row of x and R = 1 or 2,
    // 118 at R = 4, so 5 / 5 / 4 blocks of four warps a multiprocessor): 2 048 rows R = 1, 5 120 R = 2, 8 000 R = 4
    // (over the 5 280 two rows a warp hold, within the 8 448 four do), 9 000 R = 2 (past a wave at four); 3 000 rows of
    // k 12 288 are longer than a warp's loads before the wait (the rest through L2).
    for (const gemv_case c : {gemv_case{1, 5120, 2048, false, false}, gemv_case{1, 2048, 4096, false, true},
                              gemv_case{1, 8000, 2048, false, true}, gemv_case{1, 9000, 2048, true, false},
                              gemv_case{1, 3000, 12288, true, true}, gemv_case{1, 151669, 64, false, false}}) {
        std::mt19937 rng(c.m + c.n + c.k);
        const auto x = random_bf16(size_t(c.m) * c.k, 1.f, rng);
        const auto w = random_bf16(size_t(c.n) * c.k, 1.f / std::sqrt(float(c.k)), rng);
        const auto bias = random_bf16(size_t(c.n), 1.f, rng);
        std::vector<float> measured, wave;
        {
            const tuning_scope off({});
            measured = run_gemv(c, x, w, bias);
        }
        {
            const tuning_scope on({.gemv_wave = true});
            wave = run_gemv(c, x, w, bias);
        }
        EXPECT_EQ(measured, wave) << "m " << c.m << " n " << c.n << " k " << c.k;
    }
}

TEST(GemvBf16, Supported) {
    EXPECT_TRUE(gemv_bf16_supported(1, 151669, 2048));
    EXPECT_TRUE(gemv_bf16_supported(kGemvMaxRows, 2048, 4096));
    EXPECT_FALSE(gemv_bf16_supported(kGemvMaxRows + 1, 2048, 2048));
    EXPECT_FALSE(gemv_bf16_supported(1, 2048, 2044));                // k not a multiple of 8
    EXPECT_FALSE(gemv_bf16_supported(kGemvMaxRows, 128, 8 * 4096));  // x beyond 64 KB of shared memory
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvBf16,
                         ::testing::Values(gemv_case{1, 5120, 2048, false, false},
                                           gemv_case{1, 2048, 4096, false, false}, gemv_case{1, 128, 2048, true, false},
                                           gemv_case{2, 4608, 2048, false, true}, gemv_case{3, 1000, 768, false, false},
                                           gemv_case{4, 50001, 256, true, false}, gemv_case{5, 33, 8, false, true},
                                           gemv_case{6, 777, 136, true, true}, gemv_case{7, 3, 4096, false, true},
                                           gemv_case{8, 4096, 4096, false, false}, gemv_case{8, 129, 2048, true, false},
                                           // At one row of x (gemv_wave), 8 000 rows take four rows a warp (9 000
                                           // are past a wave even at four), and k 12 288 is longer than a warp's
                                           // loads before the wait (the rest through L2).
                                           gemv_case{1, 8000, 2048, false, true}, gemv_case{1, 9000, 2048, false, true},
                                           gemv_case{3, 7001, 6144, true, false},
                                           gemv_case{1, 3000, 12288, false, false}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("m", c.m, "_n", c.n, "_k", c.k, (c.y_fp32 ? "_f32" : "_bf16"),
                                              (c.bias ? "_bias" : ""));
                         });

}  // namespace
}  // namespace zmoe::kernels::test
