// RMSNorm with fused residual add: one block per token, the row kept in registers between the two passes.
// Launched programmatically dependent (pdl.cuh): its launch overlaps the tail of the kernel before it.
// launch_rms_norm_fp8 quantizes the BF16 output to e4m3 per 128-channel group in the same pass: a group is 16
// consecutive vectors of 8, so it lives in 16 consecutive threads of one pass and its amax is a half-warp reduction.

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/decode_tuning.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;
/// Vectors of 8 each thread holds: rows up to kThreads * 8 * kMaxVecs = 16384 wide.
constexpr int kMaxVecs = 8;

template <bool kEarly>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const rms_norm_params p) {
    __shared__ float scratch[32];  // one partial sum per warp
    const int32_t num_vecs = p.hidden / 8;
    // The weights depend on no earlier kernel: loaded before the programmatic wait, under the kernel before, rather
    // than one memory round trip after the sum of squares.
    detail::bf16x8 w_raw[kMaxVecs];
#pragma unroll
    for (int i = 0; i < kMaxVecs; ++i) {
        const int32_t vec = threadIdx.x + i * kThreads;
        if (vec >= num_vecs) break;
        w_raw[i] = *reinterpret_cast<const detail::bf16x8*>(p.weight + vec * 8);
    }
    // norm_early (decode_tuning.hpp, the default) triggers before the wait: the projection after
    // this short kernel launches now and loads its weights under it.
    if constexpr (kEarly) detail::pdl_launch_dependents();
    detail::pdl_wait();
    if constexpr (!kEarly) detail::pdl_launch_dependents();
    const size_t row = size_t(blockIdx.x) * p.hidden;
    float v[kMaxVecs][8];
    float sum_sq = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxVecs; ++i) {
        const int32_t vec = threadIdx.x + i * kThreads;
        if (vec >= num_vecs) break;
        detail::load_f32x8(p.x + row + vec * 8, v[i]);
        if (p.residual) {
            float r[8];
            detail::load_f32x8(p.residual + row + vec * 8, r);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[i][j] = __bfloat162float(__float2bfloat16(v[i][j] + r[j]));
            detail::store_f32x8(p.residual + row + vec * 8, v[i]);
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) sum_sq += v[i][j] * v[i][j];
    }
    const float inv = rsqrtf(detail::block_sum(sum_sq, scratch) / float(p.hidden) + p.eps);
#pragma unroll
    for (int i = 0; i < kMaxVecs; ++i) {
        const int32_t vec = threadIdx.x + i * kThreads;
        if (vec >= num_vecs) break;
        float w[8];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(w_raw[i].h[j]);
            w[2 * j] = f.x, w[2 * j + 1] = f.y;
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) v[i][j] = v[i][j] * inv * w[j];
        detail::store_f32x8(p.out + row + vec * 8, v[i]);
    }
}

template <bool kEarly>
__global__ void __launch_bounds__(kThreads) rms_norm_fp8_kernel(const rms_norm_fp8_params p) {
    __shared__ float scratch[32];  // one partial sum per warp
    // norm_early (decode_tuning.hpp, the default) triggers before the wait: the projection after
    // this short kernel launches now and loads its weights under it.
    if constexpr (kEarly) detail::pdl_launch_dependents();
    detail::pdl_wait();
    if constexpr (!kEarly) detail::pdl_launch_dependents();
    const size_t row = size_t(blockIdx.x) * p.hidden;
    const int32_t num_vecs = p.hidden / 8;
    float v[kMaxVecs][8];
    float sum_sq = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxVecs; ++i) {
        const int32_t vec = threadIdx.x + i * kThreads;
        if (vec >= num_vecs) break;
        detail::load_f32x8(p.x + row + vec * 8, v[i]);
        if (p.residual) {
            float r[8];
            detail::load_f32x8(p.residual + row + vec * 8, r);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[i][j] = __bfloat162float(__float2bfloat16(v[i][j] + r[j]));
            detail::store_f32x8(p.residual + row + vec * 8, v[i]);
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) sum_sq += v[i][j] * v[i][j];
    }
    const float inv = rsqrtf(detail::block_sum(sum_sq, scratch) / float(p.hidden) + p.eps);
    // Every thread of a warp takes part in each pass's half-warp shuffles; vectors past the row count as zero.
    const int32_t passes = (num_vecs + kThreads - 1) / kThreads;
#pragma unroll
    for (int i = 0; i < kMaxVecs; ++i) {
        if (i >= passes) break;
        const int32_t vec = threadIdx.x + i * kThreads;
        const bool active = vec < num_vecs;
        float o[8];
        float amax = 0.f;
        if (active) {
            float w[8];
            detail::load_f32x8(p.weight + vec * 8, w);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                // The BF16 output value, exactly as launch_rms_norm stores it.
                o[j] = __bfloat162float(__float2bfloat16(v[i][j] * inv * w[j]));
                amax = fmaxf(amax, fabsf(o[j]));
            }
            if (p.out != nullptr) detail::store_f32x8(p.out + row + vec * 8, o);
        }
#pragma unroll
        for (int off = 8; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(detail::kFullMask, amax, off));
        if (!active) continue;
        const float scale = amax > 0.f ? amax / 448.f : 1.f;
        uint32_t codes[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            uint16_t lo, hi;
            asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
                : "=h"(lo)
                : "f"(o[4 * h + 1] / scale), "f"(o[4 * h] / scale));
            asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
                : "=h"(hi)
                : "f"(o[4 * h + 3] / scale), "f"(o[4 * h + 2] / scale));
            codes[h] = uint32_t(lo) | (uint32_t(hi) << 16);
        }
        *reinterpret_cast<uint2*>(p.q + row + vec * 8) = make_uint2(codes[0], codes[1]);
        if (vec % 16 == 0) p.scales[size_t(vec / 16) * p.scale_ld + blockIdx.x] = scale;
    }
}

}  // namespace

void launch_rms_norm_fp8(const rms_norm_fp8_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.hidden % 8 == 0 && p.hidden <= kThreads * 8 * kMaxVecs,
                        "rms_norm_fp8: hidden must be a multiple of 8, at most 16384");
    ZMOE_KERNEL_REQUIRE(p.scale_ld >= p.num_tokens && reinterpret_cast<uintptr_t>(p.q) % 8 == 0,
                        "rms_norm_fp8: scale_ld >= num_tokens, q 8-byte aligned");
    if (p.num_tokens == 0) return;
    detail::launch_pdl(current_decode_tuning().norm_early ? rms_norm_fp8_kernel<true> : rms_norm_fp8_kernel<false>,
                       dim3(p.num_tokens), dim3(kThreads), 0, stream, p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_rms_norm(const rms_norm_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.hidden % 8 == 0 && p.hidden <= kThreads * 8 * kMaxVecs,
                        "rms_norm: hidden must be a multiple of 8, at most 16384");
    if (p.num_tokens == 0) return;
    detail::launch_pdl(current_decode_tuning().norm_early ? rms_norm_kernel<true> : rms_norm_kernel<false>,
                       dim3(p.num_tokens), dim3(kThreads), 0, stream, p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
