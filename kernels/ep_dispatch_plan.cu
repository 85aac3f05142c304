// The fixed-capacity expert-parallel dispatch plan: one block scans the (token, k) choices in order, chunk by chunk,
// and gives each the next free row of its destination rank's send window.

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads) ep_dispatch_plan_kernel(const ep_dispatch_plan_params p) {
    // Shared memory: per warp and destination rank the choices of this chunk (then their exclusive prefix over
    // warps), the chunk's total per rank, and the rows given out per rank before this chunk.
    __shared__ int32_t warp_counts[kWarps][kMaxEpRanks];
    __shared__ int32_t chunk_total[kMaxEpRanks];
    __shared__ int32_t base[kMaxEpRanks];
    __shared__ int32_t overflowed;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t W = p.num_ranks, C = p.capacity, S = p.slots_per_rank;
    for (int64_t i = tid; i < int64_t(W) * C; i += kThreads) {
        p.send_token[i] = 0;
        p.send_slot[i] = S;
    }
    if (tid < W) base[tid] = 0;
    if (tid == 0) overflowed = 0;
    __syncthreads();  // the unused-row fill above is ordered before the chunk writes below (block scope)
    const int64_t TK = int64_t(p.num_tokens) * p.top_k;
    const unsigned lanes_below = (1u << lane) - 1u;
    for (int64_t c0 = 0; c0 < TK; c0 += kThreads) {
        const int64_t i = c0 + tid;
        const int32_t slot = i < TK ? p.slot_ids[i] : -1;
        const int32_t dst = slot >= 0 ? slot / S : -1;
        int32_t rank_in_warp = 0;
        for (int d = 0; d < W; ++d) {
            const unsigned mask = __ballot_sync(detail::kFullMask, dst == d);
            if (lane == 0) warp_counts[warp][d] = __popc(mask);
            if (dst == d) rank_in_warp = __popc(mask & lanes_below);
        }
        __syncthreads();
        if (tid < W) {
            int32_t run = 0;
            for (int w = 0; w < kWarps; ++w) {
                const int32_t v = warp_counts[w][tid];
                warp_counts[w][tid] = run;
                run += v;
            }
            chunk_total[tid] = run;
        }
        __syncthreads();
        if (dst >= 0) {
            const int32_t pos = base[dst] + warp_counts[warp][dst] + rank_in_warp;
            if (pos < C) {
                const int64_t row = int64_t(dst) * C + pos;
                p.send_token[row] = static_cast<int32_t>(i / p.top_k);
                p.send_slot[row] = slot % S;
                p.src_row[i] = static_cast<int32_t>(row);
            } else {
                p.src_row[i] = 0;
                overflowed = 1;
            }
        }
        __syncthreads();
        if (tid < W) base[tid] += chunk_total[tid];
        __syncthreads();
    }
    if (tid < W && p.send_counts != nullptr) p.send_counts[tid] = base[tid];
    if (tid == 0 && overflowed) *p.overflow = 1;
}

}  // namespace

void launch_ep_dispatch_plan(const ep_dispatch_plan_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.num_ranks >= 1 && p.num_ranks <= kMaxEpRanks, "ep_dispatch_plan: num_ranks in [1, 32]");
    ZMOE_KERNEL_REQUIRE(p.capacity >= 1 && p.slots_per_rank >= 1, "ep_dispatch_plan: capacity and slots >= 1");
    ZMOE_KERNEL_REQUIRE(p.overflow != nullptr, "ep_dispatch_plan: overflow flag required");
    ep_dispatch_plan_kernel<<<1, kThreads, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
