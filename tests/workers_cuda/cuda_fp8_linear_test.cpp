// The CUDA executor's FP8 dense projections (fp8_linear_runner, workers/cuda/cuda_fp8_linear.*) alone, on the FP8
// fixtures' own weights and shapes (deepseek_v3_fp8: hidden 144, FFN widths 136 and 200, q LoRA 136: ragged
// 128-blocks, zero-padded to multiples of 16 on the device; qwen3_moe with --quantization fp8: q, k, v side by side),
// against the CPU backend's FP8 linear (linear / mlp_forward, workers/cpu_kernels.cpp) on the same BF16 input. Both
// quantize the same values with the same rule, so they differ only by the fp32 order of each K block's sum (the
// tensor cores' accumulation keeps fewer bits than fp32) and the output's BF16 rounding: an output within 1 BF16 step
// (2^-8 relative) plus 2^-12 of its sum of |terms| of the CPU's, element by element. A wrong scale block, a ragged
// block read past its end, padding that is not zero, or rows of the in-place write landing on the caller's rows
// would be off by O(the output). The MLP's SiLU * up is quantized again before the down projection: there an fp32
// order difference can flip an e4m3 rounding of the activation (one element of a row moved by 2^-3 of itself), so
// the MLP's outputs are held to a relative RMS bound instead, with the elementwise bound reported. The row counts
// reach kFp8BlasMaxRows: 129-512 rows take cuBLASLt where it takes the shape (uses_cublaslt, printed), else the
// grouped kernel; both are held to the same bounds, and a graph's replay to the eager call's bits.

#include "workers/cuda/cuda_fp8_linear.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "cuda_test_util.hpp"
#include "kernels/cuda_check.hpp"
#include "workers/cpu_kernels.hpp"
#include "workers/cuda/cuda_weights.hpp"
#include "workers/fp8.hpp"
#include "workers/model_weights.hpp"
#include "workers/moe_layer.hpp"
#include "workers/tensor_view.hpp"

namespace zmoe::cuda {
namespace {

using namespace zmoe::cuda::testing;

constexpr int32_t kMaxRows = kFp8BlasMaxRows;
/// Decode steps' row counts (the skinny and wgmma kernels), the grouped kernel's or cuBLASLt's (129 and more).
constexpr int32_t kRowCounts[] = {1, 5, 17, 64, 100, 129, 200, 256, kMaxRows};
/// A row's relative RMS error from BF16 rounding of the output (2^-9 average, about 2^-9 / sqrt(3) RMS) and the
/// tensor cores' accumulation order: below 4e-3 (the kernel tests' bound, tests/kernels/gemm_fp8_test.cpp).
constexpr double kBf16RowRms = 4e-3;
/// An MLP quantizes SiLU * up again: where an fp32-order difference in gate or up decides an e4m3 rounding of the
/// activation, that element moves by one e4m3 step (2^-3 of it at most) and its row's output by about its share of
/// the row (1-3% on the fixtures, inter 48-200; up to a third of the rows have one on H100). Bound: no row past
/// kMlpFlipRowRms (a few flips); the rows past kBf16RowRms are printed.
constexpr double kMlpFlipRowRms = 0.06;

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& x) {
    std::vector<uint16_t> b(x.size());
    for (size_t i = 0; i < x.size(); ++i) b[i] = f32_to_bf16(x[i]);
    return b;
}

/// Rows of N(0, 1) BF16 values whose 128-channel groups differ in magnitude (a wrong group scale shows).
std::vector<float> activations(int32_t rows, int32_t cols, std::mt19937& rng) {
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<float> x(static_cast<size_t>(rows) * cols);
    for (int32_t r = 0; r < rows; ++r)
        for (int32_t c = 0; c < cols; ++c)
            x[static_cast<size_t>(r) * cols + c] =
                bf16_to_f32(f32_to_bf16(d(rng) * std::ldexp(1.f, (r + 3 * (c / 128)) % 5 - 2)));
    return x;
}

/// The comparison of a BF16 device output [rows, n] (row stride ld) with the CPU's fp32 one.
struct comparison {
    double worst_row = 0;   // max over rows of the row's relative RMS error
    int64_t rows_off = 0;   // rows whose relative RMS error exceeds kBf16RowRms
    int64_t beyond = 0;     // elements more than one BF16 step (2^-8 relative) from the CPU's
    double rms = 0;         // relative RMS error
    double worst_rel = 0;   // max |gpu - cpu| / max |cpu|
    int64_t corrupted = 0;  // guard rows / columns the call must not write, written
};

class CudaFp8Linear : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        const std::string param = GetParam();
        const bool flag = param.ends_with("_with_fp8_flag");
        const std::string name = flag ? param.substr(0, param.size() - std::string("_with_fp8_flag").size()) : param;
        config_ = model_config::load(fixture_dir(name));
        if (flag) config_.apply_quantization_flag("fp8");
        ASSERT_TRUE(config_.quantization.fp8());
        placement_ = expert_placement::initial(config_.num_moe_layers(), config_.num_experts, 0, 1);
        host_ = std::make_unique<model_weights>(fixture_dir(name), config_, placement_, 0);
        dev_ = cuda_weights::upload(*host_);
        runner_ = fp8_linear_runner(fp8_linear_dims_of(dev_, kMaxRows));
        ZMOE_CUDA_CHECK(cudaStreamCreate(&stream_));
    }
    void TearDown() override {
        if (stream_) cudaStreamDestroy(stream_);
    }

    /// y = x W^T through runner_.linear for m rows (y_rows rows writable, guard rows after them) against the CPU.
    /// room: y is [*, n_pad] with rows for whole 64-row tiles (the GEMM may write it in place), else a wider row
    /// stride and only m rows (through the scratch).
    comparison linear(const cuda_fp8_matrix& w, const std::vector<const matrix_view*>& parts, int32_t m, bool room,
                      std::mt19937& rng) {
        const int32_t k = w.k, ldy = room ? w.n_pad : w.n_pad + 8, y_rows = room ? (m + 63) / 64 * 64 : m;
        const std::vector<float> x = activations(m, k, rng);
        std::vector<float> want(static_cast<size_t>(m) * w.n);
        int32_t col = 0;
        for (const matrix_view* part : parts) {
            std::vector<float> y(static_cast<size_t>(m) * part->rows);
            zmoe::linear(pool_, x.data(), m, *part, nullptr, y.data());
            for (int32_t r = 0; r < m; ++r)
                std::memcpy(want.data() + static_cast<size_t>(r) * w.n + col,
                            y.data() + static_cast<size_t>(r) * part->rows,
                            static_cast<size_t>(part->rows) * sizeof(float));
            col += static_cast<int32_t>(part->rows);
        }
        EXPECT_EQ(col, w.n);
        return run_and_compare(x, m, y_rows, ldy, w.n, w.n_pad, want, [&](const kernels::bf16* dx, kernels::bf16* dy) {
            runner_.linear(w, dx, m, dy, ldy, y_rows, stream_);
        });
    }

    comparison mlp(const cuda_fp8_mlp& f, const mlp_weights& w, int32_t m, int32_t out_rows, std::mt19937& rng) {
        const int32_t H = static_cast<int32_t>(config_.hidden_size);
        const std::vector<float> x = activations(m, H, rng);
        std::vector<float> want(static_cast<size_t>(m) * H);
        mlp_forward(pool_, w, x.data(), m, want.data());
        return run_and_compare(x, m, out_rows, H, H, H, want, [&](const kernels::bf16* dx, kernels::bf16* dy) {
            runner_.mlp(f, dx, m, dy, out_rows, stream_);
        });
    }

    template <typename Call>
    comparison run_and_compare(const std::vector<float>& x, int32_t m, int32_t y_rows, int32_t ldy, int32_t n,
                               int32_t n_pad, const std::vector<float>& want, Call call) {
        // y has y_rows writable rows then 64 guard rows, all poisoned with a sentinel the call must keep outside
        // rows [0, y_rows) and columns [0, n_pad) (the padding's columns hold zeros when the GEMM writes in place).
        const size_t y_elems = static_cast<size_t>(y_rows + 64) * ldy;
        device_buffer dx(x.size() * 2), dy(y_elems * 2);
        const std::vector<uint16_t> xb = to_bf16_bits(x);
        ZMOE_CUDA_CHECK(cudaMemcpy(dx.as<void>(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
        constexpr uint16_t kSentinel = 0x7f81;  // a BF16 NaN no computation produces
        const std::vector<uint16_t> poison(y_elems, kSentinel);
        ZMOE_CUDA_CHECK(cudaMemcpy(dy.as<void>(), poison.data(), y_elems * 2, cudaMemcpyHostToDevice));
        call(dx.as<kernels::bf16>(), dy.as<kernels::bf16>());
        ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
        std::vector<uint16_t> yb(y_elems);
        ZMOE_CUDA_CHECK(cudaMemcpy(yb.data(), dy.as<void>(), y_elems * 2, cudaMemcpyDeviceToHost));
        comparison c;
        double err_sq = 0, ref_sq = 0, max_ref = 0, max_err = 0;
        for (int32_t r = 0; r < m; ++r) {
            double row_err = 0, row_ref = 0;
            for (int32_t j = 0; j < n; ++j) {
                const double e =
                    bf16_to_f32(yb[static_cast<size_t>(r) * ldy + j]) - want[static_cast<size_t>(r) * n + j];
                row_err += e * e;
                row_ref += double(want[static_cast<size_t>(r) * n + j]) * want[static_cast<size_t>(r) * n + j];
            }
            const double rel = std::sqrt(row_err / std::max(row_ref, 1e-30));
            c.worst_row = std::max(c.worst_row, rel);
            c.rows_off += rel > kBf16RowRms;
        }
        for (int32_t r = 0; r < m; ++r)
            for (int32_t j = 0; j < n; ++j) {
                const double ref = want[static_cast<size_t>(r) * n + j];
                const double got = bf16_to_f32(yb[static_cast<size_t>(r) * ldy + j]);
                const double err = std::abs(got - ref);
                err_sq += err * err;
                ref_sq += ref * ref;
                max_ref = std::max(max_ref, std::abs(ref));
                max_err = std::max(max_err, err);
                if (!(err <= std::ldexp(std::abs(ref), -8))) ++c.beyond;
            }
        for (size_t i = static_cast<size_t>(y_rows) * ldy; i < y_elems; ++i) c.corrupted += yb[i] != kSentinel;
        for (int32_t r = 0; r < m; ++r)
            for (int32_t j = n_pad; j < ldy; ++j) c.corrupted += yb[static_cast<size_t>(r) * ldy + j] != kSentinel;
        c.rms = std::sqrt(err_sq / std::max(ref_sq, 1e-30));
        c.worst_rel = max_err / std::max(max_ref, 1e-30);
        return c;
    }

    model_config config_;
    expert_placement placement_;
    std::unique_ptr<model_weights> host_;
    cuda_weights dev_;
    fp8_linear_runner runner_;
    thread_pool pool_{2};
    cudaStream_t stream_ = nullptr;
};

TEST_P(CudaFp8Linear, ProjectionsMatchTheCpuFp8Linear) {
    std::mt19937 rng(7);
    for (size_t l = 0; l < dev_.layers.size(); ++l) {
        const cuda_layer_fp8& f = dev_.layers[l].fp8;
        const attention_weights& a = host_->layers()[l].attn;
        std::vector<std::pair<std::string, std::pair<const cuda_fp8_matrix*, std::vector<const matrix_view*>>>> mats;
        if (f.qkv.size() == 1) mats.push_back({"qkv", {&f.qkv[0], {&a.q, &a.k, &a.v}}});
        if (f.qkv.size() == 3) {
            mats.push_back({"q", {&f.qkv[0], {&a.q}}});
            mats.push_back({"k", {&f.qkv[1], {&a.k}}});
            mats.push_back({"v", {&f.qkv[2], {&a.v}}});
        }
        if (!f.o.empty()) mats.push_back({"o", {&f.o, {&a.o}}});
        if (!f.q_a.empty()) mats.push_back({"q_a", {&f.q_a, {&a.mla.q_a}}});
        if (!f.q_b.empty()) mats.push_back({"q_b", {&f.q_b, {a.mla.q_a.empty() ? &a.q : &a.mla.q_b}}});
        if (!f.kv_a.empty()) mats.push_back({"kv_a", {&f.kv_a, {&a.mla.kv_a}}});
        for (const auto& [what, m] : mats) {
            comparison worst;
            for (const int32_t rows : kRowCounts)
                for (const bool room : {false, true}) {
                    const comparison c = linear(*m.first, m.second, rows, room, rng);
                    EXPECT_EQ(c.corrupted, 0) << what << " layer " << l << " m " << rows << " wrote outside its rows";
                    EXPECT_LT(c.rms, 4e-3) << what << " layer " << l << " m " << rows << (room ? " in place" : "");
                    EXPECT_LT(c.worst_rel, 1.5e-2)
                        << what << " layer " << l << " m " << rows << (room ? " in place" : "");
                    worst.beyond += c.beyond;
                    worst.rms = std::max(worst.rms, c.rms);
                    worst.worst_rel = std::max(worst.worst_rel, c.worst_rel);
                }
            std::printf(
                "[fp8 linear] %s layer %zu %s (n %d, k %d), m 1-%d (cuBLASLt at 256 rows: %s): %ld outputs beyond 1 "
                "BF16 step, worst rms %.3g, worst element %.3g of max |y|\n",
                GetParam().c_str(), l, what.c_str(), m.first->n, m.first->k, kMaxRows,
                runner_.uses_cublaslt(*m.first, 256) ? "yes" : "no", static_cast<long>(worst.beyond), worst.rms,
                worst.worst_rel);
        }
    }
}

TEST_P(CudaFp8Linear, MlpsMatchTheCpuFp8Mlp) {
    std::mt19937 rng(11);
    for (size_t l = 0; l < dev_.layers.size(); ++l) {
        const cuda_layer_fp8& f = dev_.layers[l].fp8;
        const layer_weights& hw = host_->layers()[l];
        std::vector<std::pair<std::string, std::pair<const cuda_fp8_mlp*, const mlp_weights*>>> mlps;
        if (!f.dense.empty()) mlps.push_back({"dense", {&f.dense, &hw.dense}});
        if (!f.shared.empty()) mlps.push_back({"shared", {&f.shared, &hw.moe.shared}});
        for (const auto& [what, m] : mlps)
            for (const int32_t rows : kRowCounts)
                for (const bool room : {false, true}) {
                    const int32_t out_rows = room ? (rows + 63) / 64 * 64 : rows;
                    const comparison c = mlp(*m.first, *m.second, rows, out_rows, rng);
                    std::printf(
                        "[fp8 mlp] %s layer %zu %s (inter %d) m %d out_rows %d: rms %.3g, worst row %.3g, %ld "
                        "row(s) past %.0e\n",
                        GetParam().c_str(), l, what.c_str(), m.first->gate_up.n, rows, out_rows, c.rms, c.worst_row,
                        static_cast<long>(c.rows_off), kBf16RowRms);
                    EXPECT_EQ(c.corrupted, 0) << what << " layer " << l << " m " << rows << " wrote outside its rows";
                    EXPECT_LT(c.worst_row, kMlpFlipRowRms) << what << " layer " << l << " m " << rows;
                }
    }
}

// The input norm with its quantization fused (rms_norm, then linear_normed from the codes it kept) gives the bits of
// the unfused path (the norm's BF16 output through linear, which quantizes it), for every projection of the layer
// input, including one between them that quantizes something else (MLA's q_b after q_a).
TEST_P(CudaFp8Linear, NormedProjectionsGiveTheUnfusedBits) {
    std::mt19937 rng(13);
    const int32_t H = static_cast<int32_t>(config_.hidden_size);
    for (const int32_t m : {1, 7, 64, 130, 256}) {
        const std::vector<uint16_t> xb = to_bf16_bits(activations(m, H, rng));
        device_buffer dx(xb.size() * 2), dn(xb.size() * 2);
        ZMOE_CUDA_CHECK(cudaMemcpy(dx.as<void>(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
        for (size_t l = 0; l < dev_.layers.size(); ++l) {
            const cuda_layer& w = dev_.layers[l];
            std::vector<const cuda_fp8_matrix*> mats;
            for (const cuda_fp8_matrix& q : w.fp8.qkv) mats.push_back(&q);
            if (!w.fp8.q_a.empty()) mats.push_back(&w.fp8.q_a);
            if (!w.fp8.kv_a.empty()) mats.push_back(&w.fp8.kv_a);
            runner_.rms_norm(dx.as<kernels::bf16>(), nullptr, w.input_norm.as<kernels::bf16>(), dn.as<kernels::bf16>(),
                             m, static_cast<float>(config_.rms_norm_eps), stream_);
            std::vector<std::vector<uint16_t>> fused, unfused;
            for (int pass = 0; pass < 2; ++pass)
                for (const cuda_fp8_matrix* f : mats) {
                    device_buffer dy(static_cast<size_t>(m) * f->n_pad * 2);
                    if (pass == 0) {
                        runner_.linear_normed(*f, m, dy.as<kernels::bf16>(), f->n_pad, m, stream_);
                        // Something else quantized in between (MLA's q_b of q_a's output) leaves the codes alone.
                        runner_.linear(*f, dn.as<kernels::bf16>(), m, dy.as<kernels::bf16>(), f->n_pad, m, stream_);
                        runner_.linear_normed(*f, m, dy.as<kernels::bf16>(), f->n_pad, m, stream_);
                    } else {
                        runner_.linear(*f, dn.as<kernels::bf16>(), m, dy.as<kernels::bf16>(), f->n_pad, m, stream_);
                    }
                    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
                    std::vector<uint16_t> y(static_cast<size_t>(m) * f->n_pad);
                    ZMOE_CUDA_CHECK(cudaMemcpy(y.data(), dy.as<void>(), y.size() * 2, cudaMemcpyDeviceToHost));
                    (pass == 0 ? fused : unfused).push_back(std::move(y));
                }
            // Columns [0, n) of each row (a call through the scratch copies only those).
            for (size_t i = 0; i < mats.size(); ++i)
                for (int32_t r = 0; r < m; ++r)
                    ASSERT_EQ(0, std::memcmp(fused[i].data() + static_cast<size_t>(r) * mats[i]->n_pad,
                                             unfused[i].data() + static_cast<size_t>(r) * mats[i]->n_pad,
                                             static_cast<size_t>(mats[i]->n) * 2))
                        << "layer " << l << " projection " << i << " m " << m << " row " << r;
        }
    }
}

int compute_major() {
    int dev = 0, major = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&dev));
    ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major;
}

/// A synthetic FP8 weight [n, k] (n, k multiples of 16: no padding) in the checkpoint format by the CPU codec: the
/// host codes and scales under a matrix_view (the CPU linear's operand) and their device copy.
struct synthetic_fp8 {
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    matrix_view view;
    cuda_fp8_matrix dev;

    synthetic_fp8(int32_t n, int32_t k, std::mt19937& rng)
        : codes(static_cast<size_t>(n) * k), scales(static_cast<size_t>(fp8_blocks(n) * fp8_blocks(k))) {
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        std::vector<float> w(static_cast<size_t>(n) * k);
        for (int32_t r = 0; r < n; ++r)  // 128 x 128 blocks of different magnitudes: a wrong block scale shows
            for (int32_t c = 0; c < k; ++c)
                w[static_cast<size_t>(r) * k + c] =
                    u(rng) * float(1 + (r / 128 + 2 * (c / 128)) % 4) / std::sqrt(static_cast<float>(k));
        quantize_fp8_blocks(w.data(), n, k, k, codes.data(), scales.data());
        view = {.type = dtype::f8_e4m3,
                .data = reinterpret_cast<const std::byte*>(codes.data()),
                .rows = n,
                .cols = k,
                .scale = scales.data()};
        dev.n = dev.n_pad = n;
        dev.k = dev.k_pad = k;
        dev.codes = device_buffer(codes.size());
        dev.scales = device_buffer(scales.size() * sizeof(float));
        ZMOE_CUDA_CHECK(cudaMemcpy(dev.codes.as<void>(), codes.data(), codes.size(), cudaMemcpyHostToDevice));
        ZMOE_CUDA_CHECK(
            cudaMemcpy(dev.scales.as<void>(), scales.data(), scales.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
};

// The dense shapes of Qwen3-30B-A3B and DeepSeek-V3 (K blocks a multiple of 4: what cuBLASLt's block-scale layout
// takes from the checkpoint's; the fixtures' 1-2 K blocks stay on the grouped kernel) and a ragged n, against the CPU
// FP8 linear at 129-512 rows, in place and through the scratch: on sm_90 the cuBLASLt path (asserted), elsewhere
// whichever the runner takes, under the same bounds. Synthetic weights: run for one fixture only (the CPU reference is
// slow).
TEST_P(CudaFp8Linear, ModelShapesAt129To512Rows) {
    if (GetParam() != "qwen3_moe_with_fp8_flag") GTEST_SKIP() << "synthetic weights: one fixture runs it";
    struct shape_case {
        const char* what;
        int32_t n, k;
        std::vector<int32_t> rows;
    };
    const std::vector<shape_case> cases = {
        {"ragged n", 272, 512, {129, 200, 256, kMaxRows}},
        {"Qwen3-30B-A3B q/k/v", 5120, 2048, {256}},
        {"Qwen3-30B-A3B o", 2048, 4096, {200}},
        {"DeepSeek-V3 kv_a", 576, 7168, {129}},
    };
    std::mt19937 rng(19);
    for (const shape_case& sc : cases) {
        const synthetic_fp8 w(sc.n, sc.k, rng);
        runner_ = fp8_linear_runner({.max_rows = kMaxRows, .hidden = sc.k, .max_k = sc.k, .max_n = sc.n});
        for (const int32_t rows : sc.rows)
            for (const bool room : {false, true}) {
                const comparison c = linear(w.dev, {&w.view}, rows, room, rng);
                std::printf(
                    "[fp8 linear] %s (n %d, k %d) m %d%s%s: rms %.3g, worst element %.3g of max |y|, %ld "
                    "beyond 1 BF16 step\n",
                    sc.what, sc.n, sc.k, rows, room ? " in place" : "",
                    runner_.uses_cublaslt(w.dev, rows) ? " (cuBLASLt)" : "", c.rms, c.worst_rel,
                    static_cast<long>(c.beyond));
                if (compute_major() == 9) {
                    EXPECT_TRUE(runner_.uses_cublaslt(w.dev, rows)) << sc.what << " m " << rows << " not on cuBLASLt";
                }
                EXPECT_EQ(c.corrupted, 0) << sc.what << " m " << rows << " wrote outside its rows";
                EXPECT_LT(c.rms, 4e-3) << sc.what << " m " << rows << (room ? " in place" : "");
                EXPECT_LT(c.worst_rel, 1.5e-2) << sc.what << " m " << rows << (room ? " in place" : "");
            }
    }
}

// A decode graph's replay of the projections and the MLP (captured after an eager call of the same shape: cuBLASLt's
// plans exist) writes the eager call's bits, at row counts of every kernel's. At 129-512 rows the fixtures run
// the grouped kernel on the scales laid out for cuBLASLt, not cuBLASLt itself: the fixtures' 1-2 K blocks are not its
// shapes (GemmFp8Blas.GraphReplayMatchesTheEagerLaunch replays cuBLASLt).
TEST_P(CudaFp8Linear, GraphReplayGivesTheEagerBits) {
    std::mt19937 rng(17);
    const int32_t H = static_cast<int32_t>(config_.hidden_size);
    const cuda_layer& w = dev_.layers.back();
    for (const int32_t m : {64, 129, 256, kMaxRows}) {
        const int32_t mp = (m + 63) / 64 * 64;
        const std::vector<uint16_t> xb = to_bf16_bits(activations(m, H, rng));
        device_buffer dx(xb.size() * 2);
        ZMOE_CUDA_CHECK(cudaMemcpy(dx.as<void>(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
        std::vector<const cuda_fp8_matrix*> mats;
        for (const cuda_fp8_matrix& q : w.fp8.qkv) mats.push_back(&q);
        if (!w.fp8.q_a.empty()) mats.push_back(&w.fp8.q_a);
        if (!w.fp8.kv_a.empty()) mats.push_back(&w.fp8.kv_a);
        const cuda_fp8_mlp* f = !w.fp8.dense.empty() ? &w.fp8.dense : !w.fp8.shared.empty() ? &w.fp8.shared : nullptr;
        // Outputs in place (mp rows of n_pad) and the MLP's [mp, H].
        std::vector<device_buffer> ys;
        for (const cuda_fp8_matrix* q : mats) ys.emplace_back(static_cast<size_t>(mp) * q->n_pad * 2);
        device_buffer out(static_cast<size_t>(mp) * H * 2);
        auto calls = [&] {
            for (size_t i = 0; i < mats.size(); ++i)
                runner_.linear(*mats[i], dx.as<kernels::bf16>(), m, ys[i].as<kernels::bf16>(), mats[i]->n_pad, mp,
                               stream_);
            if (f != nullptr) runner_.mlp(*f, dx.as<kernels::bf16>(), m, out.as<kernels::bf16>(), mp, stream_);
        };
        auto rows_of = [&] {
            ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
            std::vector<std::vector<uint16_t>> r;
            for (size_t i = 0; i < mats.size(); ++i) {
                std::vector<uint16_t> y(static_cast<size_t>(m) * mats[i]->n_pad);
                ZMOE_CUDA_CHECK(cudaMemcpy(y.data(), ys[i].as<void>(), y.size() * 2, cudaMemcpyDeviceToHost));
                r.push_back(std::move(y));
            }
            std::vector<uint16_t> o(static_cast<size_t>(m) * H);
            ZMOE_CUDA_CHECK(cudaMemcpy(o.data(), out.as<void>(), o.size() * 2, cudaMemcpyDeviceToHost));
            r.push_back(std::move(o));
            return r;
        };
        auto clear = [&] {
            for (device_buffer& y : ys) ZMOE_CUDA_CHECK(cudaMemset(y.as<void>(), 0xff, y.bytes()));
            ZMOE_CUDA_CHECK(cudaMemset(out.as<void>(), 0xff, out.bytes()));
        };
        clear();
        calls();
        const std::vector<std::vector<uint16_t>> eager = rows_of();
        clear();
        cudaGraph_t graph = nullptr;
        ZMOE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        calls();
        ZMOE_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        cudaGraphExec_t exec = nullptr;
        ZMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        ZMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
        const std::vector<std::vector<uint16_t>> replayed = rows_of();
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        for (size_t i = 0; i < eager.size(); ++i)
            EXPECT_EQ(eager[i], replayed[i]) << (i < mats.size() ? "projection " : "MLP ") << i << " m " << m;
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaFp8Linear,
                         ::testing::Values("deepseek_v3_fp8", "qwen3_moe_with_fp8_flag", "qwen2_moe_with_fp8_flag"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace zmoe::cuda
