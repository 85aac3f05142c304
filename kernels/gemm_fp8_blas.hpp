#pragma once
// The block-scaled FP8 dense projection through cuBLASLt (CUDA 13): e4m3 operands with the format's scales
// (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F on the weights, VEC128_32F on the activations), BF16 out. Beside
// launch_gemm_fp8 rather than behind it: it needs a cuBLASLt handle and a workspace. On H100 it is faster than the
// grouped FP8 kernel with one group from 129 to 512 rows at the Qwen3-30B-A3B shapes (docs/kernels.md, FP8 dense
// projections).

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/api.hpp"

namespace zmoe::kernels {

struct gemm_fp8_blas_params {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;  // [workspace_bytes] device scratch for cuBLASLt
    size_t workspace_bytes = 0;
    const uint8_t* a = nullptr;       // [m, k] e4m3 activations (row-major), 16-byte aligned
    const float* a_scales = nullptr;  // [ceil(k / 128), m]: launch_fp8_quantize's layout with scale_ld == m
    const uint8_t* w = nullptr;       // [n, k] e4m3 weights (the checkpoint layout), 16-byte aligned
    const float* w_scales = nullptr;  // [ceil(n / 128), ceil(k / 128)] weight_scale_inv (see k)
    bf16* c = nullptr;                // [m, n], 16-byte aligned
    int32_t m = 0;                    ///< a multiple of 4 (the activation scales' leading dimension is m)
    int32_t n = 0;                    ///< a multiple of 16
    /// A multiple of 16 with ceil(k / 128) a multiple of 4: cuBLASLt reads the 128 x 128 block scales with their
    /// K-block count rounded up to 4 as leading dimension (as TransformerEngine pads them), which is the checkpoint's
    /// unpadded layout only then (every Qwen3 and DeepSeek-V3 dense projection: 12-128 K blocks).
    int32_t k = 0;
};

/// True when p is well formed (its field comments; m, n, k > 0, every pointer set) and cuBLASLt has an algorithm for
/// its shape on the current device (asked once per handle, shape and workspace size, the answer kept: the first
/// call for a shape must come outside a stream capture, as launch_gemm_bf16's). cuBLASLt 13 refuses one row.
bool gemm_fp8_blas_supported(const gemm_fp8_blas_params& p);

/// c = bf16(acc), the arithmetic of launch_gemm_fp8 (linear_rows_fp8): per 128-wide K block an fp32 dot on the
/// tensor cores, promoted with a_scale[kb, r] * w_scale[j / 128, kb] into an fp32 sum (cuBLASLt's own order of the
/// promotion's products; on H100 bit for bit launch_gemm_fp8 from 256 rows, within 5e-3 of max |c| below). Writes
/// rows [0, m) of c. Only enqueues on `stream` (capturable once the shape's plan exists: see
/// gemm_fp8_blas_supported); the plan's descriptor holds the scale pointers, set at every call under a lock. Aborts
/// unless gemm_fp8_blas_supported(p).
void launch_gemm_fp8_blas(const gemm_fp8_blas_params& p, cudaStream_t stream);

}  // namespace zmoe::kernels
