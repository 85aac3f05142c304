// Weighted combine of the expert outputs back into token order: one block per token, 16-byte accesses,
// the top-k rows summed in fp32 in top-k order (so the result does not depend on the permutation).

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kRowsAtOnce = 4;

__global__ void moe_combine_kernel(const moe_combine_params p) {
    const int32_t t = blockIdx.x;
    const int32_t* rows = p.dest_rows + size_t(t) * p.top_k;
    const float* weights = p.topk_weights + size_t(t) * p.top_k;
    for (int32_t vec = threadIdx.x; vec < p.hidden / 8; vec += blockDim.x) {
        float acc[8] = {};
        // kRowsAtOnce rows' loads in flight before their sums (the combine streams the expert outputs: one load at
        // a time per thread leaves it short of the copy bandwidth).
        for (int32_t j0 = 0; j0 < p.top_k; j0 += kRowsAtOnce) {
            float y[kRowsAtOnce][8];
#pragma unroll
            for (int jj = 0; jj < kRowsAtOnce; ++jj)
                if (j0 + jj < p.top_k) detail::load_f32x8(p.y + size_t(rows[j0 + jj]) * p.hidden + vec * 8, y[jj]);
#pragma unroll
            for (int jj = 0; jj < kRowsAtOnce; ++jj) {
                if (j0 + jj >= p.top_k) break;
                const float w = weights[j0 + jj];
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[i] += w * y[jj][i];
            }
        }
        detail::store_f32x8(p.out + size_t(t) * p.hidden + vec * 8, acc);
    }
}

}  // namespace

void launch_moe_combine(const moe_combine_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.hidden % 8 == 0, "moe_combine: hidden must be a multiple of 8");
    if (p.num_tokens == 0) return;
    moe_combine_kernel<<<p.num_tokens, 128, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
