// Activation quantization to block-scaled e4m3 per token and 128-channel group (launch_fp8_quantize), optionally
// writing each token's codes to its MoE permutation destinations: the gather of launch_moe_permute fused in, so the
// FP8 expert GEMMs read contiguous e4m3 rows. One warp per (token, group): each lane quantizes 4 channels.

#include <cuda_bf16.h>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 8;

__global__ void fp8_quantize_kernel(const fp8_quantize_params p) {
    const int32_t groups = (p.cols + 127) / 128;
    const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (w >= int64_t(p.num_tokens) * groups) return;
    const int32_t t = int32_t(w / groups), g = int32_t(w % groups);
    const int lane = threadIdx.x % 32;
    const int32_t c = g * 128 + lane * 4;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (c < p.cols) {
        const uint2 raw = *reinterpret_cast<const uint2*>(p.x + size_t(t) * p.cols + c);
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
        v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
    }
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = amax > 0.f ? amax / 448.f : 1.f;
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(v[1] / scale), "f"(v[0] / scale));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(v[3] / scale), "f"(v[2] / scale));
    const uint32_t codes = uint32_t(lo) | (uint32_t(hi) << 16);
    const int32_t copies = p.dest_rows != nullptr ? p.top_k : 1;
    for (int32_t j = 0; j < copies; ++j) {
        const int32_t row = p.dest_rows != nullptr ? p.dest_rows[size_t(t) * p.top_k + j] : t;
        if (c < p.cols) *reinterpret_cast<uint32_t*>(p.q + size_t(row) * p.cols + c) = codes;
        if (lane == 0) p.scales[size_t(g) * p.scale_ld + row] = scale;
    }
}

}  // namespace

void launch_fp8_quantize(const fp8_quantize_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.cols % 4 == 0 && p.top_k >= 1, "fp8_quantize: cols must be a multiple of 4, top_k >= 1");
    if (p.num_tokens == 0 || p.cols == 0) return;
    const int64_t warps = int64_t(p.num_tokens) * ((p.cols + 127) / 128);
    fp8_quantize_kernel<<<unsigned((warps + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
