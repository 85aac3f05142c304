// MoE router: softmax over the gate logits and top-k selection, one warp per token with the experts spread over
// the lanes (expert e in lane e % 32, slot e / 32), plus per-expert token counts; optionally fused with the replica
// choice and EPLB load counts of launch_moe_route (the executor's decode steps: one launch instead of two).
// Launched programmatically dependent (pdl.cuh).

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/dispatch.cuh"
#include "kernels/pdl.cuh"
#include "kernels/router_softmax_topk.cuh"
#include "kernels/warp_topk.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 8;

template <int kPerLane>
__global__ void __launch_bounds__(kWarps * 32) router_topk_kernel(const router_topk_params p) {
    // [2][num_experts] int32: this block's choices of each expert (expert_counts), then its valid ones (load_counts).
    extern __shared__ int32_t hist[];
    int32_t* valid_hist = hist + p.num_experts;
    for (int32_t e = threadIdx.x; e < 2 * p.num_experts; e += blockDim.x) hist[e] = 0;
    detail::pdl_wait();  // the kernel before writes what this one reads
    detail::pdl_launch_dependents();
    __syncthreads();

    const int lane = threadIdx.x % 32;
    const int32_t t = blockIdx.x * kWarps + threadIdx.x / 32;
    if (t < p.num_tokens) {
        int32_t my_id;
        float my_weight;
        detail::warp_softmax_topk<kPerLane>(p.logits + size_t(t) * p.num_experts, p.num_experts, p.top_k, p.renormalize,
                                            &my_id, &my_weight);
        if (lane < p.top_k)
            detail::store_router_choice(p, t, lane, my_id, my_weight, p.expert_counts != nullptr ? hist : nullptr,
                                        p.load_counts != nullptr ? valid_hist : nullptr);
    }
    __syncthreads();
    for (int32_t e = threadIdx.x; e < p.num_experts; e += blockDim.x) {
        if (hist[e] != 0) atomicAdd(&p.expert_counts[e], hist[e]);
        if (valid_hist[e] != 0) atomicAdd(&p.load_counts[e], valid_hist[e]);
    }
}

}  // namespace

void launch_router_topk(const router_topk_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.top_k >= 1 && p.top_k <= 16 && p.top_k <= p.num_experts,
                        "router: top_k must be in [1, min(16, num_experts)]");
    if (p.expert_counts != nullptr)
        ZMOE_CUDA_CHECK(cudaMemsetAsync(p.expert_counts, 0, size_t(p.num_experts) * sizeof(int32_t), stream));
    if (p.num_tokens == 0) return;
    ZMOE_KERNEL_REQUIRE(p.replica_offsets == nullptr || (p.replica_slots != nullptr && p.slot_ids != nullptr),
                        "router: the fused replica choice needs replica_slots and slot_ids");
    const int blocks = (p.num_tokens + kWarps - 1) / kWarps;
    const size_t smem = 2 * size_t(p.num_experts) * sizeof(int32_t);
    DISPATCH_EXPERTS_PER_LANE(
        p.num_experts, kPerLane,
        detail::launch_pdl(router_topk_kernel<kPerLane>, dim3(blocks), dim3(kWarps * 32), smem, stream, p));
}

}  // namespace zmoe::kernels
