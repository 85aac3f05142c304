#pragma once
// Weight quantization to the block-scaled FP8 format on the device (docs/fp8.md): what workers/fp8.hpp's
// quantize_fp8_blocks computes on the host, bit for bit, for weights generated on the GPU (`--load-format dummy`
// with FP8) that never exist on the host.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/api.hpp"

namespace zmoe::kernels {

struct fp8_weight_quantize_params {
    const bf16* w = nullptr;  // [rows, cols] row-major
    int64_t rows = 0;
    int32_t cols = 0;
    uint8_t* codes = nullptr;  // [rows, codes_ld]: columns [0, cols) written, the rest left as they are
    int32_t codes_ld = 0;      ///< >= cols
    float* scales = nullptr;   // [ceil(rows / 128), ceil(cols / 128)]
};

/// Per 128 x 128 block of w (ragged edge blocks included): scale = amax / 448 in fp32 (1 for an all-zero block),
/// code = e4m3(w / scale) with an IEEE division, rounded to nearest even and saturated to +-448: the bits of
/// quantize_fp8_blocks (workers/fp8.hpp) for the same BF16 values. Non-finite weights are the caller's problem.
void launch_fp8_weight_quantize(const fp8_weight_quantize_params& p, cudaStream_t stream);

struct fp8_weight_dequantize_params {
    const uint8_t* codes = nullptr;  // [rows, cols] e4m3
    const float* scales = nullptr;   // [ceil(rows / 128), ceil(cols / 128)]
    int64_t rows = 0;
    int32_t cols = 0;
    bf16* w = nullptr;  // [rows, cols] out
};

/// w = bf16(e4m3(code) * scale of its block), the product in fp32: what the CPU backend's fp32 dequantization
/// (matrix_view::row_to_f32) rounded to BF16 gives (MLA's kv_b of an FP8 model on the device).
void launch_fp8_weight_dequantize(const fp8_weight_dequantize_params& p, cudaStream_t stream);

}  // namespace zmoe::kernels
