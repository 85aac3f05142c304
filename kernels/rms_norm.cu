// RMSNorm with fused residual add: one block per token, the row kept in registers between the two passes.
// Launched programmatically dependent (pdl.cuh): its launch overlaps the tail of the kernel before it.

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;
/// Vectors of 8 each thread holds: rows up to kThreads * 8 * kMaxVecs = 16384 wide.
constexpr int kMaxVecs = 8;

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const rms_norm_params p) {
    __shared__ float scratch[32];  // one partial sum per warp
    detail::pdl_wait();
    detail::pdl_launch_dependents();
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
#pragma unroll
    for (int i = 0; i < kMaxVecs; ++i) {
        const int32_t vec = threadIdx.x + i * kThreads;
        if (vec >= num_vecs) break;
        float w[8];
        detail::load_f32x8(p.weight + vec * 8, w);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[i][j] = v[i][j] * inv * w[j];
        detail::store_f32x8(p.out + row + vec * 8, v[i]);
    }
}

}  // namespace

void launch_rms_norm(const rms_norm_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.hidden % 8 == 0 && p.hidden <= kThreads * 8 * kMaxVecs,
                        "rms_norm: hidden must be a multiple of 8, at most 16384");
    if (p.num_tokens == 0) return;
    detail::launch_pdl(rms_norm_kernel, dim3(p.num_tokens), dim3(kThreads), 0, stream, p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
