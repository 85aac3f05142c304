#pragma once
// Device helpers of the few-token FP8 expert kernels (moe_decode_fp8.cu, moe_decode_one_launch.cu): e4m3 dot products
// in fp32 and the per-128-channel-group activation quantization into shared memory. Both files sum with these, which
// is what keeps their results equal bit for bit. Included by .cu files only.

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace zmoe::kernels::detail::fp8_decode {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxTopK = 16;
constexpr int kGroup = 8;  // down: choices whose rows are in flight together

__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t v) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3);
    return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

/// sum_i w[i] * a[i] over 16 e4m3 pairs, in fp32 (every e4m3 value and product is exact in fp32).
__device__ __forceinline__ float dot16(const uint4& w, const uint4& a) {
    const uint32_t wv[4] = {w.x, w.y, w.z, w.w}, av[4] = {a.x, a.y, a.z, a.w};
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const float2 wf = e4m3x2_to_float2(wv[i] >> (16 * half)), af = e4m3x2_to_float2(av[i] >> (16 * half));
            s = fmaf(wf.x, af.x, s);
            s = fmaf(wf.y, af.y, s);
        }
    return s;
}

/// Quantizes rows [rows, cols] of fp32 values (get(r, c)) per 128-channel group into q (codes, [rows, cols]) and s
/// ([rows, groups]) in shared memory: one warp per (row, group), as launch_fp8_quantize. A warp loads up to kBatch
/// of its items before reducing any, so their loads are in flight together (the down kernel's 8 choices x 6 groups
/// of act were six dependent L2 round trips per warp one item at a time). Ends with __syncthreads.
template <int kBatch, typename Get>
__device__ __forceinline__ void quantize_to_smem(Get&& get, int32_t rows, int32_t cols, uint8_t* q, float* s) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t groups = (cols + 127) / 128, items = rows * groups;
    for (int32_t w0 = warp; w0 < items; w0 += kWarps * kBatch) {
        float v[kBatch][4];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int32_t w = w0 + b * kWarps, c = (w % groups) * 128 + lane * 4;
            v[b][0] = v[b][1] = v[b][2] = v[b][3] = 0.f;
            if (w < items && c < cols) get(w / groups, c, v[b]);
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int32_t w = w0 + b * kWarps;
            if (w >= items) break;  // the same for the whole warp
            const int32_t r = w / groups, g = w % groups, c = g * 128 + lane * 4;
            float amax = fmaxf(fmaxf(fabsf(v[b][0]), fabsf(v[b][1])), fmaxf(fabsf(v[b][2]), fabsf(v[b][3])));
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            const float scale = amax > 0.f ? amax / 448.f : 1.f;
            uint16_t lo, hi;
            asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(v[b][1] / scale), "f"(v[b][0] / scale));
            asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(v[b][3] / scale), "f"(v[b][2] / scale));
            if (c < cols) *reinterpret_cast<uint32_t*>(q + size_t(r) * cols + c) = uint32_t(lo) | (uint32_t(hi) << 16);
            if (lane == 0) s[r * groups + g] = scale;
        }
    }
    __syncthreads();
}

}  // namespace zmoe::kernels::detail::fp8_decode
