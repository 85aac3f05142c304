// Weighted combine of the expert outputs back into token order: one block per token, a thread per 16-byte vector of
// the hidden row (grid-stride), the top-k rows summed in fp32 in top-k order (fused multiply-adds, so the result does
// not depend on the permutation). Each thread issues the loads of up to kRowsInFlight rows before summing them, so a
// token's rows arrive in one round trip rather than one after another (the loop over a runtime top-k otherwise waits
// for each row's load before the next). Launched programmatically dependent (pdl.cuh): its launch overlaps the tail
// of the down GEMM.

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kRowsInFlight = 8;
constexpr int kMaxThreads = 256;
constexpr int kMaxTopK = 64;  // the rows and weights of a token staged in shared memory

__global__ void __launch_bounds__(kMaxThreads) moe_combine_kernel(const moe_combine_params p) {
    __shared__ int32_t rows_s[kMaxTopK];
    __shared__ float weights_s[kMaxTopK];
    detail::pdl_wait();  // the kernel before writes what this one reads
    detail::pdl_launch_dependents();
    const int32_t t = blockIdx.x, K = p.top_k;
    for (int32_t j = threadIdx.x; j < K; j += blockDim.x) {
        rows_s[j] = p.dest_rows[size_t(t) * K + j];
        weights_s[j] = p.topk_weights[size_t(t) * K + j];
    }
    __syncthreads();
    for (int32_t vec = threadIdx.x; vec < p.hidden / 8; vec += blockDim.x) {
        float acc[8] = {};
        for (int32_t j0 = 0; j0 < K; j0 += kRowsInFlight) {
            uint4 y[kRowsInFlight];
#pragma unroll
            for (int jj = 0; jj < kRowsInFlight; ++jj)
                if (j0 + jj < K)
                    y[jj] = *reinterpret_cast<const uint4*>(p.y + size_t(rows_s[j0 + jj]) * p.hidden + vec * 8);
#pragma unroll
            for (int jj = 0; jj < kRowsInFlight; ++jj) {
                if (j0 + jj >= K) break;
                float v[8];
                detail::load_f32x8(reinterpret_cast<const bf16*>(&y[jj]), v);
                const float w = weights_s[j0 + jj];
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[i] = fmaf(w, v[i], acc[i]);
            }
        }
        detail::store_f32x8(p.out + size_t(t) * p.hidden + vec * 8, acc);
    }
}

}  // namespace

void launch_moe_combine(const moe_combine_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.hidden % 8 == 0, "moe_combine: hidden must be a multiple of 8");
    ZMOE_KERNEL_REQUIRE(p.top_k >= 1 && p.top_k <= kMaxTopK, "moe_combine: top_k in [1, 64]");
    if (p.num_tokens == 0) return;
    const int threads = std::clamp((p.hidden / 8 + 31) / 32 * 32, 32, kMaxThreads);
    detail::launch_pdl(moe_combine_kernel, dim3(p.num_tokens), dim3(threads), 0, stream, p);
}

}  // namespace zmoe::kernels
