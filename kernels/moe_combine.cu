// Weighted combine of the expert outputs back into token order: one block per token, 16-byte accesses,
// the top-k rows summed in fp32 in top-k order (so the result does not depend on the permutation). Launched
// programmatically dependent (pdl.cuh): its launch overlaps the tail of the down GEMM.

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

__global__ void moe_combine_kernel(const moe_combine_params p) {
    detail::pdl_wait();  // the kernel before writes what this one reads
    detail::pdl_launch_dependents();
    const int32_t t = blockIdx.x;
    const int32_t* rows = p.dest_rows + size_t(t) * p.top_k;
    const float* weights = p.topk_weights + size_t(t) * p.top_k;
    for (int32_t vec = threadIdx.x; vec < p.hidden / 8; vec += blockDim.x) {
        float acc[8] = {};
        for (int32_t j = 0; j < p.top_k; ++j) {
            float y[8];
            detail::load_f32x8(p.y + size_t(rows[j]) * p.hidden + vec * 8, y);
            const float w = weights[j];
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] += w * y[i];
        }
        detail::store_f32x8(p.out + size_t(t) * p.hidden + vec * 8, acc);
    }
}

}  // namespace

void launch_moe_combine(const moe_combine_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.hidden % 8 == 0, "moe_combine: hidden must be a multiple of 8");
    if (p.num_tokens == 0) return;
    detail::launch_pdl(moe_combine_kernel, dim3(p.num_tokens), dim3(128), 0, stream, p);
}

}  // namespace zmoe::kernels
