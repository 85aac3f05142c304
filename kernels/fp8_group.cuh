#pragma once
// One 128-channel group of a row quantized to e4m3 by a warp, 4 channels per lane: the arithmetic of
// launch_fp8_quantize (fp8_quantize.cu) and of the CPU reference quantize_fp8_activation_row (workers/fp8.hpp), for
// the kernels that quantize on the way somewhere else (the expert-parallel FP8 dispatch). Bit for bit the same as
// launch_fp8_quantize: tests/kernels/ep_fp8_test.cpp compares the two.

#include <cuda_bf16.h>

#include <cstdint>

namespace zmoe::kernels {

/// The 4 BF16 values of channels [c, c + 4) of `row` as fp32; zeros at or past `cols` (c a multiple of 4, cols too).
__device__ __forceinline__ void fp8_load4(const __nv_bfloat16* row, int32_t c, int32_t cols, float v[4]) {
    v[0] = v[1] = v[2] = v[3] = 0.f;
    if (c >= cols) return;
    const uint2 raw = *reinterpret_cast<const uint2*>(row + c);
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
}

/// Every lane of a full warp holds 4 values of one group (zeros past the row's end). Returns this lane's 4 e4m3
/// codes, little-endian in channel order, and sets `scale` (the same in every lane): amax / 448 over the group (1
/// for an all-zero group), codes = e4m3(v / scale) rounded to nearest even and saturated.
__device__ __forceinline__ uint32_t fp8_quantize_group4(const float v[4], float& scale) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    scale = amax > 0.f ? amax / 448.f : 1.f;
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(v[1] / scale), "f"(v[0] / scale));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(v[3] / scale), "f"(v[2] / scale));
    return uint32_t(lo) | (uint32_t(hi) << 16);
}

}  // namespace zmoe::kernels
