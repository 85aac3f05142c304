// MoE router: softmax over the gate logits and top-k selection, one warp per token with the experts spread over
// the lanes (expert e in lane e % 32, slot e / 32), plus per-expert token counts for the permutation plan and EPLB.

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/warp_topk.cuh"
#include "kernels/dispatch.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 8;

template <int kPerLane>
__global__ void __launch_bounds__(kWarps * 32) router_topk_kernel(const router_topk_params p) {
    extern __shared__ int32_t hist[];  // [num_experts] int32: this block's tokens routed to each expert
    for (int32_t e = threadIdx.x; e < p.num_experts; e += blockDim.x) hist[e] = 0;
    __syncthreads();

    const int lane = threadIdx.x % 32;
    const int32_t t = blockIdx.x * kWarps + threadIdx.x / 32;
    if (t < p.num_tokens) {
        int32_t my_id;
        float my_weight;
        detail::warp_softmax_topk<kPerLane>(p.logits + size_t(t) * p.num_experts, p.num_experts, p.top_k,
                                            p.renormalize, &my_id, &my_weight);
        if (lane < p.top_k) {
            p.topk_ids[size_t(t) * p.top_k + lane] = my_id;
            p.topk_weights[size_t(t) * p.top_k + lane] = my_weight;
            atomicAdd(&hist[my_id], 1);
        }
    }
    __syncthreads();
    for (int32_t e = threadIdx.x; e < p.num_experts; e += blockDim.x)
        if (hist[e] != 0) atomicAdd(&p.expert_counts[e], hist[e]);
}

}  // namespace

void launch_router_topk(const router_topk_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.top_k >= 1 && p.top_k <= 16 && p.top_k <= p.num_experts,
                        "router: top_k must be in [1, min(16, num_experts)]");
    ZMOE_CUDA_CHECK(cudaMemsetAsync(p.expert_counts, 0, size_t(p.num_experts) * sizeof(int32_t), stream));
    if (p.num_tokens == 0) return;
    const int blocks = (p.num_tokens + kWarps - 1) / kWarps;
    const size_t smem = size_t(p.num_experts) * sizeof(int32_t);
    DISPATCH_EXPERTS_PER_LANE(p.num_experts, kPerLane,
                              router_topk_kernel<kPerLane><<<blocks, kWarps * 32, smem, stream>>>(p));
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
