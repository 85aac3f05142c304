#pragma once
// The dense BF16 GEMMs of the CUDA forward pass (y = x . w^T): one call that picks the kernel by shape, the GEMV or
// the skinny tensor-core GEMM for decode steps' few rows, cuBLASLt otherwise. Used by the step executor and the MLA
// attention runner alike.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace zmoe::cuda {

class fp8_linear_runner;

/// The cuBLASLt handle and scratch the executor's GEMMs use, and its FP8 projections' runner (for the FP8 ones).
struct gemm_context {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    const fp8_linear_runner* fp8 = nullptr;
    /// The FP8 runner holds the layer's normed input quantized (fp8_linear_runner::rms_norm): FP8 projections of it
    /// start from those codes.
    bool xn_quantized = false;
};

/// Row-major y[m, n] = x[m, k] . w[n, k]^T (+ bias [n], BF16 outputs only), fp32 accumulate, y BF16 or fp32: one row,
/// and a few rows of router-sized and LM-head-sized GEMMs, as one streaming pass over the weights (launch_gemv_bf16,
/// the bias added on the way); up to 16 rows of at most 4 096 outputs on the skinny tensor-core GEMM (bias fused);
/// otherwise cuBLASLt (+ a bias launch). Only launches on `stream` (capturable). m == 0 is a no-op.
void linear_bf16(const gemm_context& g, const void* x, const void* w, void* y, int32_t m, int32_t n, int32_t k,
                 bool y_fp32, const void* bias, cudaStream_t stream);

}  // namespace zmoe::cuda
