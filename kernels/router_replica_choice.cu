// MoE replica routing on the device: each (token, k) choice of a logical expert becomes the physical slot of one
// of its replicas, by the same deterministic rule the CPU runner and expert_placement::pick use (the token's index
// in the batch modulo the replica count), and the per-expert load counts EPLB reads are accumulated on the device.

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxExperts = 1024;

__global__ void __launch_bounds__(kThreads) moe_route_kernel(const moe_route_params p) {
    __shared__ int32_t hist[kMaxExperts];  // this block's counted choices per expert
    for (int32_t e = threadIdx.x; e < p.num_experts; e += kThreads) hist[e] = 0;
    __syncthreads();
    const int32_t a = blockIdx.x * kThreads + threadIdx.x;
    const int32_t num_valid = p.num_valid != nullptr ? *p.num_valid : p.num_tokens;
    if (a < p.num_tokens * p.top_k) {
        const int32_t t = a / p.top_k;
        const int32_t e = p.topk_ids[a];
        const int32_t first = p.replica_offsets[e], n = p.replica_offsets[e + 1] - first;
        p.slot_ids[a] = p.replica_slots[first + t % n];
        if (t < num_valid && p.expert_counts != nullptr) atomicAdd(&hist[e], 1);
    }
    __syncthreads();
    if (p.expert_counts == nullptr) return;
    for (int32_t e = threadIdx.x; e < p.num_experts; e += kThreads)
        if (hist[e] != 0) atomicAdd(&p.expert_counts[e], hist[e]);
}

}  // namespace

void launch_moe_route(const moe_route_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.num_experts >= 1 && p.num_experts <= kMaxExperts, "moe_route: num_experts in [1, 1024]");
    const int32_t n = p.num_tokens * p.top_k;
    if (n == 0) return;
    moe_route_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
