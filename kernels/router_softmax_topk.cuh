#pragma once
// What the softmax router stores for one (token, k) choice: launch_router_topk's kernel and router_gemm_topk.cu's fused
// GEMM + top-k kernel both end with it.

#include <cstdint>

#include "kernels/api.hpp"

namespace zmoe::kernels::detail {

/// Stores choice j of token t (expert id, its weight) in p's outputs; with p.replica_offsets, also its slot by
/// launch_moe_route's rule (the token's index in the batch picks the replica). Counts the choice in counts[id] when
/// counts is set (p.expert_counts' tally) and, when the token is valid, in valid_counts[id] (p.load_counts' tally);
/// either array may be the caller's shared-memory histogram or the global one.
__device__ __forceinline__ void store_router_choice(const router_topk_params& p, int32_t t, int32_t j, int32_t id,
                                                    float weight, int32_t* counts, int32_t* valid_counts) {
    const size_t a = size_t(t) * p.top_k + j;
    p.topk_ids[a] = id;
    p.topk_weights[a] = weight;
    if (counts != nullptr) atomicAdd(&counts[id], 1);
    if (p.replica_offsets == nullptr) return;
    const int32_t first = p.replica_offsets[id], n = p.replica_offsets[id + 1] - first;
    p.slot_ids[a] = p.replica_slots[first + t % n];
    const int32_t num_valid = p.num_valid != nullptr ? *p.num_valid : p.num_tokens;
    if (valid_counts != nullptr && t < num_valid) atomicAdd(&valid_counts[id], 1);
}

}  // namespace zmoe::kernels::detail
