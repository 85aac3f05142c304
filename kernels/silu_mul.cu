// SiLU(gate) * up for the dense MLPs (the shared experts and the dense layers), from one fused gate|up GEMM output;
// launched programmatically dependent (pdl.cuh).
// launch_silu_mul_fp8 quantizes the fp32 product per token and 128-channel group instead of rounding it to BF16
// (the down projection's FP8 operand): one warp per (token, group), 4 channels per lane, as launch_fp8_quantize.

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/pdl.cuh"
#include "kernels/silu_f32.hpp"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void silu_mul_kernel(const bf16* gu, bf16* out, int64_t total, int32_t n) {
    detail::pdl_wait();  // gate|up comes from the GEMM before
    detail::pdl_launch_dependents();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = i / n, j = i % n;
        const float g = __bfloat162float(gu[t * 2 * n + j]);
        const float u = __bfloat162float(gu[t * 2 * n + n + j]);
        out[i] = __float2bfloat16(g / (1.f + __expf(-g)) * u);
    }
}

constexpr int kQuantWarps = 8;

__global__ void __launch_bounds__(kQuantWarps * 32) silu_mul_fp8_kernel(const silu_mul_fp8_params p) {
    const int32_t groups = (p.n + 127) / 128;
    const int64_t w = int64_t(blockIdx.x) * kQuantWarps + threadIdx.x / 32;
    if (w >= int64_t(p.num_tokens) * groups) return;  // whole warps leave together
    const int32_t t = int32_t(w / groups), g = int32_t(w % groups);
    const int32_t c = g * 128 + (threadIdx.x % 32) * 4;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (c < p.n) {
        const bf16* row = p.gate_up + size_t(t) * 2 * p.n;
        const uint2 gate = *reinterpret_cast<const uint2*>(row + c);
        const uint2 up = *reinterpret_cast<const uint2*>(row + p.n + c);
        const float2 g01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&gate.x));
        const float2 g23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&gate.y));
        const float2 u01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&up.x));
        const float2 u23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&up.y));
        v[0] = silu_f32(g01.x) * u01.x;
        v[1] = silu_f32(g01.y) * u01.y;
        v[2] = silu_f32(g23.x) * u23.x;
        v[3] = silu_f32(g23.y) * u23.y;
    }
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = amax > 0.f ? amax / 448.f : 1.f;
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(v[1] / scale), "f"(v[0] / scale));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(v[3] / scale), "f"(v[2] / scale));
    if (c < p.n) *reinterpret_cast<uint32_t*>(p.q + size_t(t) * p.n + c) = uint32_t(lo) | (uint32_t(hi) << 16);
    if (threadIdx.x % 32 == 0) p.scales[size_t(g) * p.scale_ld + t] = scale;
}

}  // namespace

void launch_silu_mul_fp8(const silu_mul_fp8_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.n % 4 == 0 && p.scale_ld >= p.num_tokens && reinterpret_cast<uintptr_t>(p.q) % 4 == 0,
                        "silu_mul_fp8: n a multiple of 4, scale_ld >= num_tokens, q 4-byte aligned");
    const int64_t warps = int64_t(p.num_tokens) * ((p.n + 127) / 128);
    if (warps == 0) return;
    silu_mul_fp8_kernel<<<unsigned((warps + kQuantWarps - 1) / kQuantWarps), kQuantWarps * 32, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_silu_mul(const silu_mul_params& p, cudaStream_t stream) {
    const int64_t total = int64_t(p.num_tokens) * p.n;
    if (total == 0) return;
    const int grid = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535));
    detail::launch_pdl(silu_mul_kernel, dim3(grid), dim3(kThreads), 0, stream, p.gate_up, p.out, total, p.n);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
