#pragma once
// Block-scaled FP8 dense projections of the CUDA executor (docs/fp8.md): attention q/k/v/o, MLA q_a/q_b/kv_a/o,
// dense MLPs and shared experts, W8A8 with the CPU backend's arithmetic (linear_rows_fp8): the input quantized per
// token and 128-channel group (launch_fp8_quantize), then an FP8 GEMM that promotes each 128-wide K block's fp32
// product with the two scales. Every FP8 dense GEMM of the executor goes through fp8_linear_runner::gemm (one
// place to change the kernel): up to kGemmFp8SkinnyMaxRows rows (decode steps), and on sm_90 up to
// kGemmFp8Sm90MaxRoutedRows (128), launch_gemm_fp8, whose row results do not depend on the row count in
// that range (the skinny kernel up to 64 rows; on sm_90 one wgmma kernel from 1 to 128); beyond, and the
// MLPs' gate/up GEMM with SiLU * up quantized in its epilogue at every row count, launch_grouped_gemm_fp8 with one
// group of rows [0, m rounded up to 64). The products without SwiGLU of 129 to kFp8BlasMaxRows rows go
// through cuBLASLt's block-scaled FP8 instead (launch_gemm_fp8_blas, on the runner's own
// handle and workspace) over the same m rounded up to 64 rows, their inputs' scales laid out with that row count as
// leading dimension (cuBLASLt's layout); where cuBLASLt does not take a shape (gemm_fp8_blas_supported: its layout
// constraints, an algorithm), the grouped kernel.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <type_traits>

#include "kernels/api.hpp"
#include "kernels/gemm_fp8_blas.hpp"
#include "workers/cuda/cuda_weights.hpp"
#include "workers/cuda/device_buffer.hpp"

namespace zmoe::cuda {

/// Rows of the products the cuBLASLt path takes: [kFp8BlasMinRows, kFp8BlasMaxRows] (below, the sm_90 wgmma kernel
/// is faster; beyond, not measured).
constexpr int32_t kFp8BlasMinRows = 129;
constexpr int32_t kFp8BlasMaxRows = 512;

/// The widest FP8 dense projection of a model's weights, for sizing the scratch.
struct fp8_linear_dims {
    int32_t max_rows = 0;   ///< rows of the largest call (a step's tokens)
    int32_t hidden = 0;     ///< the layers' input width (rms_norm's)
    int32_t max_k = 0;      ///< widest padded input (k_pad)
    int32_t max_n = 0;      ///< widest padded output (n_pad)
    int32_t max_inter = 0;  ///< widest padded MLP FFN width (0: no FP8 MLP)
    bool pads_k = false;    ///< some weight's k_pad != k (its input is copied into a zero-padded scratch)
};

/// The FP8 dims of `w`'s linears for steps of at most max_rows tokens (all zero without FP8 dense linears).
fp8_linear_dims fp8_linear_dims_of(const cuda_weights& w, int32_t max_rows);

/// The scratch the FP8 dense projections share (allocated once: fixed addresses for the decode graphs). Every call
/// only enqueues work on the given stream (capturable) and uses the scratch, so calls on one stream never overlap.
class fp8_linear_runner {
  public:
    fp8_linear_runner() = default;
    /// Allocates on the current device; throws zmoe::error(out_of_memory).
    explicit fp8_linear_runner(const fp8_linear_dims& d);

    bool empty() const { return dims_.max_rows == 0; }

    /// y[r, 0:n] (row stride ldy elements) = x[r, 0:k] . w^T in W8A8 for r < m, BF16 out. x: [m, k] contiguous.
    /// y_rows: rows of y (from y) the call may overwrite, >= m: when they reach the rows the GEMM writes (m up to 64
    /// rows, on sm_90 up to 128; else m rounded up to 64) and y is a contiguous [*, n_pad], the GEMM
    /// writes y directly (rows m.. of the last 64 with values of no meaning); else through the scratch and one 2D copy.
    /// No bias (the caller adds it).
    void linear(const cuda_fp8_matrix& w, const kernels::bf16* x, int32_t m, kernels::bf16* y, int32_t ldy,
                int32_t y_rows, cudaStream_t stream) const;

    /// A layer's input norm with the FP8 quantization of its output fused (launch_rms_norm_fp8, bit for bit
    /// launch_rms_norm then launch_fp8_quantize): residual and out (BF16, the norm's output) as launch_rms_norm
    /// (x [m, hidden]; residual may be null), and the codes and scales of out kept in the runner for linear_normed
    /// until the next call (the projections of one layer input share one quantization).
    void rms_norm(const kernels::bf16* x, kernels::bf16* residual, const kernels::bf16* weight, kernels::bf16* out,
                  int32_t m, float eps, cudaStream_t stream) const;
    /// linear() of the last rms_norm's output (m its rows, w.k the hidden size), from the codes it kept: no
    /// quantization launch.
    void linear_normed(const cuda_fp8_matrix& w, int32_t m, kernels::bf16* y, int32_t ldy, int32_t y_rows,
                       cudaStream_t stream) const;

    /// out[m, hidden] = down(silu(gate x) * up x) in FP8: x quantized, the gate/up GEMM with SiLU * up quantized in
    /// its epilogue (the CPU rounds to BF16 between gate/up and SiLU, here it stays fp32: the only difference), the
    /// down GEMM to BF16. out_rows as linear's y_rows.
    void mlp(const cuda_fp8_mlp& w, const kernels::bf16* x, int32_t m, kernels::bf16* out, int32_t out_rows,
             cudaStream_t stream) const;

    int64_t bytes() const { return bytes_; }

    /// Whether linear() of w over m rows runs on cuBLASLt: m within [kFp8BlasMinRows,
    /// kFp8BlasMaxRows], and gemm_fp8_blas_supported for w's shape (else the grouped kernel). Outside a capture (it
    /// may make the shape's cuBLASLt plan).
    bool uses_cublaslt(const cuda_fp8_matrix& w, int32_t m) const;

  private:
    struct blas_deleter {
        void operator()(cublasLtHandle_t h) const;
    };
    /// Whether products of m rows without SwiGLU try cuBLASLt (m in its range, a handle).
    bool blas_layout(int32_t m) const;
    /// The leading dimension of the activation scales of a call of m rows: m rounded up to 64 where blas_layout(m)
    /// (cuBLASLt's layout: the rows it computes; the grouped kernel takes it too), else scale_ld_.
    int32_t scale_ld(int32_t m) const;
    /// launch_gemm_fp8_blas's parameters for c[0:mp, n] = A . b^T (mp: m rounded up to 64).
    kernels::gemm_fp8_blas_params blas_params(const uint8_t* a, const float* a_scales, const uint8_t* b,
                                              const float* b_scales, int32_t m, int32_t n, int32_t k,
                                              kernels::bf16* c) const;

    /// c[0:m, n] = A (a_q, a_scales at scale_ld(m)) . b^T: the single place of the dense FP8 GEMM kernel's choice
    /// (rows_written: launch_gemm_fp8 up to 64 rows, and up to 128 where it routes to its wgmma kernel, writes rows
    /// [0, m); beyond, the grouped kernel with one group of m rounded up to 64 rows, or cuBLASLt over those rows).
    /// swiglu (always the grouped kernel): c_q / c_scales (at scale_ld(m)) out instead of c (b = gate rows then up
    /// rows).
    void gemm(const uint8_t* a, const float* a_scales, const uint8_t* b, const float* b_scales, int32_t m, int32_t n,
              int32_t k, kernels::bf16* c, uint8_t* c_q, float* c_scales, bool swiglu, cudaStream_t stream) const;
    /// x [m, k] quantized into a_q_ / a_scales_ (through the zero-padded copy when k_pad > k).
    void quantize(const kernels::bf16* x, int32_t m, int32_t k, int32_t k_pad, cudaStream_t stream) const;
    /// linear() from an already quantized A (codes [m, w.k_pad], scales [kb][scale_ld(m)]).
    void linear_from(const cuda_fp8_matrix& w, const uint8_t* a, const float* a_scales, int32_t m, kernels::bf16* y,
                     int32_t ldy, int32_t y_rows, cudaStream_t stream) const;

    fp8_linear_dims dims_;
    int32_t max_mp_ = 0, scale_ld_ = 0;
    int32_t num_sms_ = 0;               // of the device the runner was made on (the grouped kernel's tile choice)
    device_buffer offsets_;             // [max_mp / 64 + 1][2]: {0, 64 i}
    device_buffer a_q_, a_scales_;      // the quantized input
    device_buffer in_q_, in_scales_;    // rms_norm's output quantized: [max_mp, hidden], [ceil(hidden / 128)][ld(m)]
    device_buffer x_pad_;               // [max_mp, max_k] BF16: inputs whose k is padded
    device_buffer c_;                   // [max_mp, max_n] BF16: outputs that cannot land in place
    device_buffer act_q_, act_scales_;  // MLP: SiLU(gate) * up quantized
    // The cuBLASLt path's handle and workspace (max_rows >= kFp8BlasMinRows only).
    std::unique_ptr<std::remove_pointer_t<cublasLtHandle_t>, blas_deleter> blas_;
    device_buffer blas_workspace_;
    int64_t bytes_ = 0;
};

}  // namespace zmoe::cuda
