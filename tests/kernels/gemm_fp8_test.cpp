// The block-scaled FP8 dense projection (launch_gemm_fp8) against the CPU arithmetic of the format (the W8A8 linear
// of workers/cpu_kernels.cpp's linear_rows_fp8, written out below on workers/fp8.hpp's codec) over m from 1 to 4096
// (both paths: the skinny kernel up to 64 rows, the grouped FP8 GEMM above where n and k allow, the skinny kernel
// over row slices where they do not), ragged n and k (not multiples of 128; k not a multiple of 16 or 4 takes the
// narrower copies); and the activation quantization fused into its producers (launch_rms_norm_fp8,
// launch_silu_mul_fp8) bit for bit against quantize_fp8_activation_row.

#include "kernels/gemm_fp8.hpp"

#include <cublasLt.h>

#include <cstring>
#include <optional>

#include "kernels/gemm_fp8_blas.hpp"
#include "kernels/gemm_fp8_sm90.hpp"
#include "kernels/silu_f32.hpp"
#include "tests/kernels/test_util.hpp"
#include "workers/fp8.hpp"

namespace zmoe::kernels::test {
namespace {

bool device_has_fp8_mma() {
    int dev = 0, major = 0, minor = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&dev));
    ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return major > 8 || (major == 8 && minor >= 9);
}

/// Activations [rows, cols] whose 128-channel groups have different magnitudes (a wrong group scale shows), an
/// all-zero group in some rows (scale 1, codes 0), BF16-representable.
std::vector<float> grouped_activations(int32_t rows, int32_t cols, std::mt19937& rng) {
    std::vector<float> x = random_bf16(size_t(rows) * cols, 1.f, rng);
    for (int32_t r = 0; r < rows; ++r)
        for (int32_t c = 0; c < cols; ++c) {
            const int32_t g = c / 128;
            const float mag = (r % 7 == 3 && g == 1) ? 0.f : std::ldexp(1.f, (r + 3 * g) % 9 - 4);
            x[size_t(r) * cols + c] = ref::round_bf16(x[size_t(r) * cols + c] * mag);
        }
    return x;
}

/// A weight [rows, cols] uniform in [-scale, scale) whose 128 x 128 blocks have different magnitudes (a wrong block
/// scale shows); xorshift, fast for the large shapes.
std::vector<float> blocky_weight(int32_t rows, int32_t cols, float scale, std::mt19937& rng) {
    uint64_t s = (uint64_t(rng()) << 32) | rng() | 1u;
    std::vector<float> w(size_t(rows) * cols);
    for (int32_t r = 0; r < rows; ++r)
        for (int32_t c = 0; c < cols; ++c) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            const float u = float(s >> 40) * (2.f / 16777216.f) - 1.f;  // [-1, 1)
            w[size_t(r) * cols + c] = u * scale * float(1 + (r / 128 + 2 * (c / 128)) % 4);
        }
    return w;
}

struct gemm_fp8_case {
    int32_t m, n, k;
};

/// One product: random weights and activations in the format (by the CPU codec), on the device, and the CPU
/// reference with each output's sum of |products|.
class fp8_problem {
  public:
    /// with_reference false: no CPU reference (check() unusable; for comparisons of device outputs only). scale_ld:
    /// the activation scales' leading dimension (0: fp8_scale_ld(m) + 4; cuBLASLt's layout needs m). seed: other
    /// data of the same shape (problems of one shape otherwise hold the same values).
    fp8_problem(int32_t m, int32_t n, int32_t k, bool with_reference = true, int32_t scale_ld = 0, uint32_t seed = 0)
        : m_(m), n_(n), k_(k) {
        const int32_t kbk = int32_t(fp8_blocks(k)), nbn = int32_t(fp8_blocks(n));
        std::mt19937 rng(uint32_t(m * 31 + n * 7 + k) + seed);
        // Weights: the checkpoint format, by the CPU codec.
        const std::vector<float> w = blocky_weight(n, k, 1.f / std::sqrt(float(k)), rng);
        std::vector<uint8_t> wq(size_t(n) * k);
        std::vector<float> ws(size_t(nbn) * kbk);
        quantize_fp8_blocks(w.data(), n, k, k, wq.data(), ws.data());
        // Activations quantized by the CPU (launch_fp8_quantize's bits, tested in moe_fp8_test), scales laid out
        // [kb][ld] with a leading dimension past fp8_scale_ld(m) (the kernel must use it, not m).
        const std::vector<float> x = grouped_activations(m, k, rng);
        ld_ = scale_ld > 0 ? scale_ld : fp8_scale_ld(m) + 4;
        std::vector<float> aq(size_t(m) * k), as_row(size_t(m) * kbk), as(size_t(kbk) * ld_, 0.f);
        std::vector<uint8_t> a_codes(size_t(m) * k);
        for (int32_t r = 0; r < m; ++r) {
            quantize_fp8_activation_row(x.data() + size_t(r) * k, k, aq.data() + size_t(r) * k,
                                        as_row.data() + size_t(r) * kbk);
            for (int32_t kb = 0; kb < kbk; ++kb) as[size_t(kb) * ld_ + r] = as_row[size_t(r) * kbk + kb];
            for (int32_t i = 0; i < k; ++i) a_codes[size_t(r) * k + i] = f32_to_e4m3(aq[size_t(r) * k + i]);
        }
        d_a_.emplace(upload(a_codes));
        d_as_.emplace(upload(as));
        d_w_.emplace(upload(wq));
        d_ws_.emplace(upload(ws));
        d_c_.emplace(size_t(m) * n);

        if (!with_reference) return;
        // The reference (linear_rows_fp8): per 128-wide K block an fp32 dot of the e4m3 values, added in fp32 scaled
        // by a_scale x w_scale; beside it the same sum of |products| (what the accumulation errors scale with).
        const float* table = e4m3_table();
        std::vector<float> wv(size_t(n) * k);
        for (size_t i = 0; i < wv.size(); ++i) wv[i] = table[wq[i]];
        ref_.resize(size_t(m) * n);
        mag_.resize(size_t(m) * n);
        for (int32_t r = 0; r < m; ++r)
            for (int32_t j = 0; j < n; ++j) {
                const float* ar = aq.data() + size_t(r) * k;
                const float* wr = wv.data() + size_t(j) * k;
                float acc = 0.f;
                double mag = 0;
                for (int32_t kb = 0; kb < kbk; ++kb) {
                    float d = 0.f, dm = 0.f;
                    for (int32_t i = kb * 128; i < std::min(k, kb * 128 + 128); ++i) {
                        d += ar[i] * wr[i];
                        dm += std::fabs(ar[i] * wr[i]);
                    }
                    const float sc = as_row[size_t(r) * kbk + kb] * ws[size_t(j / 128) * kbk + kb];
                    acc += d * sc;
                    mag += double(dm) * sc;
                }
                ref_[size_t(r) * n + j] = acc;
                mag_[size_t(r) * n + j] = mag;
            }
    }

    /// The parameters over the device buffers, c poisoned (NaN: an unwritten element fails).
    gemm_fp8_params params() {
        d_c_->poison();
        return {.a = d_a_->get(),
                .a_scales = d_as_->get(),
                .a_scale_ld = ld_,
                .w = d_w_->get(),
                .w_scales = d_ws_->get(),
                .c = d_c_->get(),
                .m = m_,
                .n = n_,
                .k = k_};
    }

    /// launch_gemm_fp8_blas's parameters over the device buffers (the scales' leading dimension must be m), c
    /// poisoned.
    gemm_fp8_blas_params blas_params(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes) {
        EXPECT_EQ(ld_, m_) << "cuBLASLt reads the activation scales with leading dimension m";
        d_c_->poison();
        return {.handle = handle,
                .workspace = workspace,
                .workspace_bytes = workspace_bytes,
                .a = d_a_->get(),
                .a_scales = d_as_->get(),
                .w = d_w_->get(),
                .w_scales = d_ws_->get(),
                .c = d_c_->get(),
                .m = m_,
                .n = n_,
                .k = k_};
    }

    /// c against the reference. Where the GPU differs, and the tolerance that justifies:
    /// (1) BF16 rounding of c: the same on both sides unless (2) moves the fp32 sum across a rounding boundary,
    ///     then one BF16 step, at most 2^-8 |c|;
    /// (2) the tensor cores' accumulation inside a block (products exact; the FP8 units' sum keeps fewer bits than
    ///     fp32, about 13-14 on Hopper per DeepSeek-V3's report), the order of the sums (k32 steps, split-K ranks)
    ///     and fma in the promotion: at most 2^-12 of the sum of |products| (2^-13 relative rounding per addition
    ///     step for the handful of steps the hardware's tree has, with a factor 2 of margin).
    /// So |c - ref| <= 2^-8 |ref| + 2^-12 sum|products| per element, and the relative RMS error over the whole
    /// product below 4e-3 (BF16's 2^-9 average plus the accumulation's). A wrong scale, block, row, column or token
    /// gives errors of O(|ref|), beyond both.
    void check() {
        sync_and_check();
        const std::vector<float> c = download_bf16(*d_c_);
        double err_sq = 0, ref_sq = 0;
        int64_t bad = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            const double err = std::fabs(double(c[i]) - ref_[i]);
            err_sq += err * err;
            ref_sq += double(ref_[i]) * ref_[i];
            if (!(err <= std::ldexp(std::fabs(ref_[i]), -8) + std::ldexp(mag_[i], -12)) && ++bad <= 5)
                ADD_FAILURE() << "c[" << i / n_ << ", " << i % n_ << "] = " << c[i] << ", reference " << ref_[i]
                              << " (sum |products| " << mag_[i] << ")";
        }
        EXPECT_EQ(bad, 0);
        const double rms = std::sqrt(err_sq / std::max(ref_sq, 1e-30));
        EXPECT_LT(rms, 4e-3);
    }

    /// c as the last launch left it (after a sync).
    std::vector<float> output() {
        sync_and_check();
        return download_bf16(*d_c_);
    }

  private:
    int32_t m_, n_, k_, ld_ = 0;
    std::optional<device_buffer<uint8_t>> d_a_, d_w_;
    std::optional<device_buffer<float>> d_as_, d_ws_;
    std::optional<device_buffer<bf16>> d_c_;
    std::vector<float> ref_;
    std::vector<double> mag_;
};

class GemmFp8 : public ::testing::TestWithParam<gemm_fp8_case> {};

TEST_P(GemmFp8, MatchesCpuReference) {
    if (!device_has_fp8_mma()) GTEST_SKIP() << "FP8 mma needs compute capability 8.9 or later";
    const auto [m, n, k] = GetParam();
    fp8_problem problem(m, n, k);
    const gemm_fp8_params p = problem.params();
    ASSERT_TRUE(gemm_fp8_supported(p));
    launch_gemm_fp8(p, nullptr);
    problem.check();
}

// The skinny kernel's every launch configuration (MMA kind, rows per CTA, ring depth, cluster split) on one ragged
// shape, at
// row counts that fill the CTAs partly and need several token slices.
TEST(GemmFp8, SkinnyConfigurationsMatchCpuReference) {
    if (!device_has_fp8_mma()) GTEST_SKIP() << "FP8 mma needs compute capability 8.9 or later";
    for (const int32_t m : {5, 20, 64, 100}) {
        fp8_problem problem(m, 136, 1040);
        for (const auto mma : {detail::gemm_fp8_mma::e4m3, detail::gemm_fp8_mma::f16})
            for (const int32_t tokens : {8, 16, 32, 64})
                for (const int32_t stages : {4, 6, 8})
                    for (const int32_t splits : {1, 3, 8}) {
                        SCOPED_TRACE(make_name("m ", m, " mma ", int(mma), " tokens ", tokens, " stages ", stages,
                                               " splits ", splits));
                        detail::launch_gemm_fp8_skinny(
                            problem.params(),
                            {.splits = splits, .stages = stages, .tokens_per_cta = tokens, .mma = mma}, nullptr);
                        problem.check();
                        if (HasFailure()) return;
                    }
    }
}

/// Rows [0, m) of a and b where their bits differ.
int64_t differing(const std::vector<float>& a, const std::vector<float>& b, int32_t m, int32_t n) {
    int64_t d = 0;
    for (size_t i = 0; i < size_t(m) * n; ++i) d += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

// Batch invariance: a row's output bits depend on that row alone, not on how many rows share the launch (m) nor on
// what they hold. FP8 amplifies any difference: a BF16 step in one projection's output flips e4m3 roundings in the
// next quantization (docs/fp8.md), so a decode step that batched a sequence with others (or split the batch over
// expert-parallel ranks) would stray from one that did not. Up to kGemmFp8SkinnyMaxRows rows (the skinny kernel).
TEST(GemmFp8, ARowsBitsDoNotDependOnTheBatch) {
    if (!device_has_fp8_mma()) GTEST_SKIP() << "FP8 mma needs compute capability 8.9 or later";
    for (const auto& [n, k] : {std::pair{200, 144}, std::pair{576, 7168}, std::pair{2048, 1536}, std::pair{144, 136}}) {
        fp8_problem problem(kGemmFp8SkinnyMaxRows, n, k);
        launch_gemm_fp8(problem.params(), nullptr);
        const std::vector<float> all = problem.output();
        for (const int32_t m : {1, 5, 8, 9, 16, 17, 32, 33, 63}) {
            gemm_fp8_params p = problem.params();
            p.m = m;
            launch_gemm_fp8(p, nullptr);
            EXPECT_EQ(differing(problem.output(), all, m, n), 0)
                << "n " << n << " k " << k << ": rows of m = " << m << " vs the same rows of m = 64";
        }
    }
}

/// The grouped FP8 kernel's output for p as one group of p.m rows (the diagnostics compare other kernels' bits with
/// it).
std::vector<float> grouped_kernel_output(fp8_problem& problem, const gemm_fp8_params& p) {
    const device_buffer<int32_t> offsets = upload(std::vector<int32_t>{0, p.m});
    launch_grouped_gemm_fp8({.a = p.a,
                             .a_scales = p.a_scales,
                             .a_scale_ld = p.a_scale_ld,
                             .b = p.w,
                             .b_scales = p.w_scales,
                             .expert_offsets = offsets.get(),
                             .c = p.c,
                             .max_rows = p.m,
                             .n = p.n,
                             .k = p.k,
                             .num_experts = 1,
                             .row_align = 64},
                            nullptr);
    return problem.output();
}

// Diagnostic (prints, asserts nothing): whether the skinny kernel's MMA kinds give the grouped wgmma kernel's bits
// for the same rows (then a row's bits would not change at the 64-row switch either).
TEST(GemmFp8, SkinnyKindsAgainstTheGroupedKernelBits) {
    if (!device_has_fp8_mma()) GTEST_SKIP() << "FP8 mma needs compute capability 8.9 or later";
    int dev = 0, major = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&dev));
    ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major != 9) GTEST_SKIP() << "the grouped FP8 kernel needs sm_90";
    for (const auto& [n, k] : {std::pair{576, 7168}, std::pair{2048, 1536}, std::pair{272, 400}}) {
        const int32_t m = 128;
        fp8_problem problem(m, n, k);
        const gemm_fp8_params p = problem.params();
        const std::vector<float> grouped = grouped_kernel_output(problem, p);
        std::vector<float> e4m3_splits1;
        for (const auto mma : {detail::gemm_fp8_mma::e4m3, detail::gemm_fp8_mma::f16})
            for (const int32_t splits : {1, 4}) {
                detail::launch_gemm_fp8_skinny(problem.params(), {.splits = splits, .tokens_per_cta = 64, .mma = mma},
                                               nullptr);
                const std::vector<float> skinny = problem.output();
                if (mma == detail::gemm_fp8_mma::e4m3 && splits == 1) e4m3_splits1 = skinny;
                if (mma == detail::gemm_fp8_mma::f16 && splits == 1)
                    std::printf("[gemm fp8 bits] n %d k %d: skinny f16 vs e4m3 (splits 1): %ld differ\n", n, k,
                                static_cast<long>(differing(skinny, e4m3_splits1, m, n)));
                std::printf("[gemm fp8 bits] n %d k %d: skinny %s splits %d vs grouped: %ld of %ld elements differ\n",
                            n, k, mma == detail::gemm_fp8_mma::e4m3 ? "e4m3" : "f16", splits,
                            static_cast<long>(differing(skinny, grouped, m, n)), static_cast<long>(m) * n);
            }
    }
}

bool device_is_sm90() {
    int dev = 0, major = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&dev));
    ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major == 9;
}

class GemmFp8Sm90 : public ::testing::TestWithParam<gemm_fp8_case> {};

// The sm_90 kernel (launch_gemm_fp8's path for 1-128 rows on Hopper; it takes 1-512) with its automatic configuration,
// against the CPU arithmetic: ragged n and k (k a multiple of 16, its TMA maps' constraint), every tokens-per-CTA width
// and the 128-row slices past 128, the Qwen3-30B-A3B and DeepSeek-V3 dense shapes (k split over clusters of 2-8).
TEST_P(GemmFp8Sm90, MatchesCpuReference) {
    if (!device_is_sm90()) GTEST_SKIP() << "the kernel needs sm_90";
    const auto [m, n, k] = GetParam();
    fp8_problem problem(m, n, k);
    const gemm_fp8_params p = problem.params();
    ASSERT_TRUE(detail::gemm_fp8_sm90_applies(p));
    detail::launch_gemm_fp8_sm90(p, {}, nullptr);
    problem.check();
}

std::vector<gemm_fp8_case> sm90_cases() {
    std::vector<gemm_fp8_case> cases;
    for (const int32_t m : {1, 7, 8, 9, 16, 17, 33, 64, 65, 127, 128, 129, 256, 300, 512}) {
        cases.push_back({m, 200, 144});   // n % 64 != 0: a part-filled weight tile
        cases.push_back({m, 272, 400});   // k % 128 != 0: a zero-filled part of the last K block
        cases.push_back({m, 136, 1040});  // 9 K blocks over uneven split ranges
    }
    cases.push_back({64, 5120, 2048});  // Qwen3-30B-A3B: q/k/v, o
    cases.push_back({136, 2048, 4096});
    cases.push_back({130, 576, 7168});  // DeepSeek-V3: kv_a, q_a, shared down
    cases.push_back({40, 1536, 7168});
    cases.push_back({72, 7168, 2048});
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmFp8Sm90, ::testing::ValuesIn(sm90_cases()), [](const auto& info) {
    return make_name("m", info.param.m, "_n", info.param.n, "_k", info.param.k);
});

// Every launch configuration of the sm_90 kernel (tokens per CTA, math warpgroups, overlap, cluster split) on one
// ragged shape, at row counts that fill the CTAs partly and need several token slices; and that none but the split
// changes a bit of the output (the split may: it is not chosen by m).
TEST(GemmFp8Sm90, ConfigurationsMatchCpuReference) {
    if (!device_is_sm90()) GTEST_SKIP() << "the kernel needs sm_90";
    for (const int32_t m : {5, 20, 64, 100, 300}) {
        fp8_problem problem(m, 200, 1040);
        for (const int32_t splits : {1, 3, 8}) {
            std::vector<float> first;
            for (const int32_t tokens : {8, 16, 32, 64, 128, 256})
                for (const int32_t wgs : {1, 2})
                    for (const int32_t overlap : {1, 2}) {
                        SCOPED_TRACE(make_name("m ", m, " tokens ", tokens, " warpgroups ", wgs, " overlap ", overlap,
                                               " splits ", splits));
                        detail::launch_gemm_fp8_sm90(
                            problem.params(),
                            {.splits = splits, .tokens_per_cta = tokens, .math_warpgroups = wgs, .overlap = overlap},
                            nullptr);
                        problem.check();
                        const std::vector<float> out = problem.output();
                        if (first.empty())
                            first = out;
                        else
                            EXPECT_EQ(differing(out, first, m, 200), 0) << "bits differ from the first configuration";
                        if (HasFailure()) return;
                    }
        }
    }
}

// Batch invariance over the sm_90 kernel's whole range: a row's bits depend on that row alone from 1 to
// kGemmFp8Sm90MaxRows rows, across the automatic tokens-per-CTA widths (8 to 128) and the 128-row slices. Where
// launch_gemm_fp8 routes to the kernel (up to 128 rows) it gives the same bits.
TEST(GemmFp8Sm90, ARowsBitsDoNotDependOnTheBatch) {
    if (!device_is_sm90()) GTEST_SKIP() << "the kernel needs sm_90";
    const int32_t max_m = detail::kGemmFp8Sm90MaxRows;
    for (const auto& [n, k] : {std::pair{200, 144}, std::pair{576, 7168}, std::pair{2048, 1536}, std::pair{272, 400}}) {
        fp8_problem problem(max_m, n, k, /*with_reference=*/false);
        detail::launch_gemm_fp8_sm90(problem.params(), {}, nullptr);
        const std::vector<float> all = problem.output();
        gemm_fp8_params at_max = problem.params();
        at_max.m = detail::kGemmFp8Sm90MaxRoutedRows;
        ASSERT_TRUE(detail::gemm_fp8_sm90_routed(at_max));
        launch_gemm_fp8(at_max, nullptr);
        EXPECT_EQ(differing(problem.output(), all, at_max.m, n), 0) << "launch_gemm_fp8 took another kernel";
        for (const int32_t m : {1, 5, 8, 9, 16, 17, 32, 33, 63, 64, 65, 100, 128, 129, 255, 256, 257, 511}) {
            gemm_fp8_params p = problem.params();
            p.m = m;
            detail::launch_gemm_fp8_sm90(p, {}, nullptr);
            EXPECT_EQ(differing(problem.output(), all, m, n), 0)
                << "n " << n << " k " << k << ": rows of m = " << m << " vs the same rows of m = " << max_m;
            gemm_fp8_params q = problem.params();  // c poisoned again: the rows must be launch_gemm_fp8's own
            q.m = m;
            EXPECT_EQ(detail::gemm_fp8_sm90_routed(q), m <= detail::kGemmFp8Sm90MaxRoutedRows);
            if (detail::gemm_fp8_sm90_routed(q)) {
                launch_gemm_fp8(q, nullptr);
                EXPECT_EQ(differing(problem.output(), all, m, n), 0) << "launch_gemm_fp8 at m = " << m;
            }
        }
    }
}

// Diagnostic (prints, asserts nothing): whether the sm_90 kernel without a split of k gives the grouped kernel's bits
// (the same e4m3 wgmma with the operands swapped), and with the split launch_gemm_fp8 picks.
TEST(GemmFp8Sm90, BitsAgainstTheGroupedKernel) {
    if (!device_is_sm90()) GTEST_SKIP() << "the kernel needs sm_90";
    for (const auto& [n, k] : {std::pair{576, 7168}, std::pair{2048, 1536}, std::pair{272, 400}}) {
        const int32_t m = 128;
        fp8_problem problem(m, n, k, /*with_reference=*/false);
        const gemm_fp8_params p = problem.params();
        const std::vector<float> grouped = grouped_kernel_output(problem, p);
        for (const int32_t splits : {1, 0}) {
            detail::launch_gemm_fp8_sm90(problem.params(), {.splits = splits}, nullptr);
            std::printf("[gemm fp8 bits] n %d k %d: sm90 splits %d vs grouped: %ld of %ld elements differ\n", n, k,
                        splits == 0 ? detail::gemm_fp8_sm90_choice(p).splits : splits,
                        static_cast<long>(differing(problem.output(), grouped, m, n)), static_cast<long>(m) * n);
        }
    }
}

// cuBLASLt's block-scaled FP8 (launch_gemm_fp8_blas: the CUDA worker's FP8 dense projections of 129-512 rows, over
// m rounded up to 64) against the CPU arithmetic with launch_gemm_fp8's tolerance: the
// Qwen3-30B-A3B and DeepSeek-V3 dense shapes at 132-512 rows (one row count each: the CPU reference is slow), and
// ragged ones (n, k not multiples of 128; K blocks a multiple of 4, its layout's constraint) at every row count.
class GemmFp8Blas : public ::testing::TestWithParam<gemm_fp8_case> {
  protected:
    void SetUp() override {
        if (!device_is_sm90()) GTEST_SKIP() << "the block-scaled FP8 path is measured and used on sm_90 only";
        ZMOE_CUBLAS_CHECK(cublasLtCreate(&handle_));
    }
    void TearDown() override {
        if (handle_ != nullptr) cublasLtDestroy(handle_);
    }
    cublasLtHandle_t handle_ = nullptr;
    device_buffer<uint8_t> ws_{32u << 20};
};

TEST_P(GemmFp8Blas, MatchesCpuReference) {
    const auto [m, n, k] = GetParam();
    fp8_problem problem(m, n, k, /*with_reference=*/true, /*scale_ld=*/m);
    const gemm_fp8_blas_params p = problem.blas_params(handle_, ws_.get(), ws_.size());
    ASSERT_TRUE(gemm_fp8_blas_supported(p)) << "cuBLASLt has no block-scaled FP8 algorithm for this shape";
    launch_gemm_fp8_blas(p, nullptr);
    problem.check();
}

std::vector<gemm_fp8_case> blas_cases() {
    std::vector<gemm_fp8_case> cases;
    for (const int32_t m : {132, 192, 200, 256, 320, 512}) {
        cases.push_back({m, 208, 400});   // n, k ragged in 128: a part-filled scale block, a zero-filled K block part
        cases.push_back({m, 576, 1008});  // 8 K blocks, the last ragged; n = 4.5 scale blocks (DeepSeek-V3's kv_a)
    }
    cases.push_back({256, 5120, 2048});  // Qwen3-30B-A3B: q/k/v
    cases.push_back({200, 2048, 4096});  // o
    cases.push_back({512, 576, 7168});   // DeepSeek-V3: kv_a
    cases.push_back({192, 1536, 7168});  // q_a
    cases.push_back({132, 7168, 2048});  // shared expert's down
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmFp8Blas, ::testing::ValuesIn(blas_cases()), [](const auto& info) {
    return make_name("m", info.param.m, "_n", info.param.n, "_k", info.param.k);
});

// Its launches replayed from a CUDA graph (the decode graphs' use: the plan made by an eager call first) compute what
// the eager launch does, for two weights of one shape (the scale pointers set per launch, captured per node: the two
// problems hold different values, so a node reading the other's activation scales fails its check; their weights'
// block scales are about equal, each block's amax being near its bound).
TEST_F(GemmFp8Blas, GraphReplayMatchesTheEagerLaunch) {
    fp8_problem first(256, 272, 400, /*with_reference=*/true, /*scale_ld=*/256);
    fp8_problem second(256, 272, 400, /*with_reference=*/true, /*scale_ld=*/256, /*seed=*/1);
    cudaStream_t stream = nullptr;
    ZMOE_CUDA_CHECK(cudaStreamCreate(&stream));
    launch_gemm_fp8_blas(first.blas_params(handle_, ws_.get(), ws_.size()), stream);
    const std::vector<float> eager = first.output();
    const gemm_fp8_blas_params p1 = first.blas_params(handle_, ws_.get(), ws_.size());
    const gemm_fp8_blas_params p2 = second.blas_params(handle_, ws_.get(), ws_.size());
    cudaGraph_t graph = nullptr;
    ZMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    launch_gemm_fp8_blas(p1, stream);
    launch_gemm_fp8_blas(p2, stream);
    ZMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    ZMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    ZMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(differing(first.output(), eager, 256, 272), 0) << "the replay differs from the eager launch";
    first.check();
    second.check();
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
}

TEST_F(GemmFp8Blas, RefusesWhatItsLayoutCannotTake) {
    fp8_problem problem(256, 272, 400, /*with_reference=*/false, /*scale_ld=*/256);
    gemm_fp8_blas_params p = problem.blas_params(handle_, ws_.get(), ws_.size());
    EXPECT_TRUE(gemm_fp8_blas_supported(p));
    gemm_fp8_blas_params odd = p;
    odd.m = 130;  // not a multiple of 4: the scales' leading dimension is m
    EXPECT_FALSE(gemm_fp8_blas_supported(odd));
    odd = p;
    odd.n = 200;  // not a multiple of 16
    EXPECT_FALSE(gemm_fp8_blas_supported(odd));
    odd = p;
    odd.k = 144;  // 2 K blocks: cuBLASLt's block-scale layout pads them to 4, the checkpoint's does not
    EXPECT_FALSE(gemm_fp8_blas_supported(odd));
    odd = p;
    odd.handle = nullptr;
    EXPECT_FALSE(gemm_fp8_blas_supported(odd));
}

std::vector<gemm_fp8_case> gemm_cases() {
    std::vector<gemm_fp8_case> cases;
    for (const int32_t m : {1, 2, 3, 8, 16, 33, 64, 65, 128, 1000, 4096}) {
        cases.push_back({m, 200, 144});  // the fixtures' ragged dims: n % 16 != 0 (the skinny kernel at every m)
        cases.push_back({m, 160, 200});  // k % 16 != 0: 4-byte copies
        cases.push_back({m, 72, 138});   // k % 4 != 0: byte copies
        cases.push_back({m, 272, 400});  // n, k multiples of 16, ragged in 128: the grouped kernel past 64 rows
        if (m <= 64) cases.push_back({m, 576, 7168});  // DeepSeek-V3's kv_a: k split over a cluster
        if (m <= 16) cases.push_back({m, 2048, 1536});
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmFp8, ::testing::ValuesIn(gemm_cases()), [](const auto& info) {
    return make_name("m", info.param.m, "_n", info.param.n, "_k", info.param.k);
});

TEST(GemmFp8, EmptyProductsAreNoOpsAndZeroKIsZero) {
    if (!device_has_fp8_mma()) GTEST_SKIP() << "FP8 mma needs compute capability 8.9 or later";
    device_buffer<bf16> d_c(3 * 5);
    d_c.poison();
    launch_gemm_fp8({.a_scale_ld = 4, .c = d_c.get(), .m = 0, .n = 5, .k = 7}, nullptr);
    launch_gemm_fp8({.a_scale_ld = 4, .c = d_c.get(), .m = 3, .n = 0, .k = 7}, nullptr);
    sync_and_check();
    for (const float v : download_bf16(d_c)) EXPECT_TRUE(std::isnan(v));
    launch_gemm_fp8({.a_scale_ld = 4, .c = d_c.get(), .m = 3, .n = 5, .k = 0}, nullptr);
    sync_and_check();
    for (const float v : download_bf16(d_c)) EXPECT_EQ(v, 0.f);
    EXPECT_FALSE(gemm_fp8_supported({.a_scale_ld = 2, .c = d_c.get(), .m = 3, .n = 5, .k = 0}));
}

/// Codes and scales of a launch against quantize_fp8_activation_row of `values` (the fp32 values the kernel
/// quantized), bit for bit.
void expect_quantized_as_cpu(const std::vector<float>& values, int32_t rows, int32_t cols,
                             const std::vector<uint8_t>& q, const std::vector<float>& scales, int32_t ld) {
    const int32_t groups = int32_t(fp8_blocks(cols));
    std::vector<float> qv(cols), sv(groups);
    int64_t mismatches = 0;
    for (int32_t r = 0; r < rows; ++r) {
        quantize_fp8_activation_row(values.data() + size_t(r) * cols, cols, qv.data(), sv.data());
        for (int32_t g = 0; g < groups; ++g) {
            uint32_t got, want;
            std::memcpy(&got, &scales[size_t(g) * ld + r], 4);
            std::memcpy(&want, &sv[g], 4);
            if (got != want && ++mismatches <= 5)
                ADD_FAILURE() << "scale of row " << r << " group " << g << ": " << scales[size_t(g) * ld + r]
                              << ", CPU " << sv[g];
        }
        for (int32_t c = 0; c < cols; ++c) {
            const uint8_t want = f32_to_e4m3(qv[c]);  // qv is exact in e4m3: its code
            if (q[size_t(r) * cols + c] != want && ++mismatches <= 5)
                ADD_FAILURE() << "code of row " << r << " col " << c << ": " << int(q[size_t(r) * cols + c]) << ", CPU "
                              << int(want) << " (value " << values[size_t(r) * cols + c] << ")";
        }
    }
    EXPECT_EQ(mismatches, 0);
}

struct norm_fp8_case {
    int32_t num_tokens, hidden;
    bool residual, bf16_out;
};

class RmsNormFp8 : public ::testing::TestWithParam<norm_fp8_case> {};

// The fused kernel's BF16 output and residual equal launch_rms_norm's bit for bit; its codes and scales are the CPU
// quantization of that BF16 output.
TEST_P(RmsNormFp8, IsRmsNormThenTheCpuQuantizationBitForBit) {
    const auto c = GetParam();
    const int32_t T = c.num_tokens, H = c.hidden, ld = fp8_scale_ld(T), groups = int32_t(fp8_blocks(H));
    std::mt19937 rng(T * 3 + H);
    std::vector<float> x = grouped_activations(T, H, rng);
    x[0] = 0.f;                                                           // rows with zeros, and
    for (int32_t i = 0; i < H && T > 2; ++i) x[size_t(2) * H + i] = 0.f;  // a zero row (all groups scale 1)
    const std::vector<float> residual = random_bf16(size_t(T) * H, 2.f, rng);
    const std::vector<float> weight = random_bf16(H, 1.5f, rng);
    auto d_x = upload_bf16(x), d_w = upload_bf16(weight);
    auto d_res_a = upload_bf16(residual), d_res_b = upload_bf16(residual);
    device_buffer<bf16> d_out_a(size_t(T) * H), d_out_b(size_t(T) * H);
    device_buffer<uint8_t> d_q(size_t(T) * H);
    device_buffer<float> d_s(size_t(groups) * ld);
    d_out_b.poison();
    d_q.poison(0x7f);
    d_s.poison();
    launch_rms_norm({.x = d_x.get(),
                     .residual = c.residual ? d_res_a.get() : nullptr,
                     .weight = d_w.get(),
                     .out = d_out_a.get(),
                     .num_tokens = T,
                     .hidden = H},
                    nullptr);
    launch_rms_norm_fp8({.x = d_x.get(),
                         .residual = c.residual ? d_res_b.get() : nullptr,
                         .weight = d_w.get(),
                         .out = c.bf16_out ? d_out_b.get() : nullptr,
                         .q = d_q.get(),
                         .scales = d_s.get(),
                         .scale_ld = ld,
                         .num_tokens = T,
                         .hidden = H},
                        nullptr);
    sync_and_check();
    const std::vector<float> want_out = download_bf16(d_out_a);
    if (c.bf16_out) {
        const std::vector<float> got = download_bf16(d_out_b);
        EXPECT_EQ(std::memcmp(got.data(), want_out.data(), got.size() * 4), 0) << "BF16 output";
    } else {
        for (const float v : download_bf16(d_out_b)) ASSERT_TRUE(std::isnan(v)) << "out written though nullptr";
    }
    if (c.residual) {
        const std::vector<float> a = download_bf16(d_res_a), b = download_bf16(d_res_b);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "residual";
    }
    expect_quantized_as_cpu(want_out, T, H, download(d_q), download(d_s), ld);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormFp8,
                         ::testing::Values(norm_fp8_case{1, 144, false, true}, norm_fp8_case{7, 2048, true, false},
                                           norm_fp8_case{33, 7168, true, true}, norm_fp8_case{3, 16384, false, false},
                                           norm_fp8_case{5, 200, true, true}, norm_fp8_case{300, 4096, true, false}),
                         [](const auto& info) {
                             return make_name("t", info.param.num_tokens, "_h", info.param.hidden,
                                              info.param.residual ? "_residual" : "",
                                              info.param.bf16_out ? "_out" : "");
                         });

// exp_f32 (the host/device-identical exp of silu_f32) is an accurate exp: within 2 ulp of the double-precision
// exp over the range an activation meets, exactly inf / 0 / subnormal at the edges.
TEST(SiluF32, ExpIsAccurate) {
    for (float x = -103.f; x < 88.7f; x += 0.0137f) {
        const double want = std::exp(double(x));
        const float got = exp_f32(x);
        const double ulp = std::ldexp(1.0, std::max(std::ilogb(want), -126) - 23);
        ASSERT_LE(std::fabs(got - want), 2 * ulp) << "x " << x;
    }
    EXPECT_EQ(exp_f32(0.f), 1.f);
    EXPECT_EQ(exp_f32(100.f), INFINITY);
    EXPECT_EQ(exp_f32(-200.f), 0.f);
    EXPECT_TRUE(std::isnan(exp_f32(NAN)));
    EXPECT_EQ(silu_f32(-200.f), -0.f);
    EXPECT_EQ(silu_f32(200.f), 200.f);
}

struct silu_fp8_case {
    int32_t num_tokens, n;
};

class SiluMulFp8 : public ::testing::TestWithParam<silu_fp8_case> {};

// act = silu_f32(gate) * up in fp32 on the host (the same bits as the kernel's), quantized by the CPU codec: codes
// and scales bit for bit.
TEST_P(SiluMulFp8, QuantizesTheFp32ActivationAsTheCpu) {
    const auto [T, n] = GetParam();
    const int32_t ld = fp8_scale_ld(T) + 4, groups = int32_t(fp8_blocks(n));
    std::mt19937 rng(T * 5 + n);
    std::vector<float> gu = random_bf16(size_t(T) * 2 * n, 6.f, rng);
    // Edges of the exp: large |gate| (silu ~ gate or ~ -0), subnormal e^-g territory, zeros; a zero row.
    const float edges[] = {-100.f, 100.f, -90.f, 90.f, 0.f, -0.f, -87.5f, 1e-30f};
    for (size_t i = 0; i < std::size(edges) && i < size_t(n); ++i) gu[i] = ref::round_bf16(edges[i]);
    if (T > 1)
        for (int32_t j = 0; j < 2 * n; ++j) gu[size_t(1) * 2 * n + j] = 0.f;
    auto d_gu = upload_bf16(gu);
    device_buffer<uint8_t> d_q(size_t(T) * n);
    device_buffer<float> d_s(size_t(groups) * ld);
    d_q.poison(0x7f);
    d_s.poison();
    launch_silu_mul_fp8(
        {.gate_up = d_gu.get(), .q = d_q.get(), .scales = d_s.get(), .scale_ld = ld, .num_tokens = T, .n = n}, nullptr);
    sync_and_check();
    std::vector<float> act(size_t(T) * n);
    for (int32_t t = 0; t < T; ++t)
        for (int32_t j = 0; j < n; ++j)
            act[size_t(t) * n + j] = silu_f32(gu[size_t(t) * 2 * n + j]) * gu[size_t(t) * 2 * n + n + j];
    expect_quantized_as_cpu(act, T, n, download(d_q), download(d_s), ld);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SiluMulFp8,
                         ::testing::Values(silu_fp8_case{1, 136}, silu_fp8_case{9, 2048}, silu_fp8_case{33, 200},
                                           silu_fp8_case{4, 18432}, silu_fp8_case{257, 768}),
                         [](const auto& info) { return make_name("t", info.param.num_tokens, "_n", info.param.n); });

}  // namespace
}  // namespace zmoe::kernels::test
