#pragma once
// Softmax top-k of one token's router logits by one warp: the router kernel's and the few-token MoE path's.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/device_utils.cuh"

namespace zmoe::kernels::detail {

/// A float's bits as an unsigned key in the float's order (zero of either sign as +0).
__device__ __forceinline__ uint32_t order_key(float f) {
    const uint32_t u = __float_as_uint(f == 0.f ? 0.f : f);
    return (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;
}

/// probs = softmax(row[0, num_experts)); lane j < top_k gets the j-th largest (lower expert index first on ties)
/// in *id and its probability (renormalised over the top-k if asked) in *weight; other lanes get -1 and 0.
/// Expert e lives in lane e % 32, slot e / 32 (kPerLane * 32 >= num_experts). Every lane of the warp calls it.
/// kRedux: each round's warp-wide choice by two redux instructions (the largest order_key, then the lowest expert
/// holding it: the same choice) instead of a shuffle butterfly over (value, expert) pairs.
template <int kPerLane, bool kRedux = false>
__device__ __forceinline__ void warp_softmax_topk(const float* row, int32_t num_experts, int32_t top_k,
                                                  bool renormalize, int32_t* id, float* weight) {
    const int lane = threadIdx.x % 32;
    float v[kPerLane];
    float max_v = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int32_t e = i * 32 + lane;
        v[i] = e < num_experts ? row[e] : -INFINITY;
        max_v = fmaxf(max_v, v[i]);
    }
    max_v = warp_max(max_v);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) sum += i * 32 + lane < num_experts ? expf(v[i] - max_v) : 0.f;
    sum = warp_sum(sum);

    int32_t my_id = -1;
    float my_weight = 0.f;
    for (int j = 0; j < top_k; ++j) {
        float best = -INFINITY;
        int32_t best_id = INT32_MAX;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const int32_t e = i * 32 + lane;
            if (e < num_experts && (v[i] > best || (v[i] == best && e < best_id))) best = v[i], best_id = e;
        }
        if constexpr (kRedux) {
            const uint32_t key = order_key(best);
            const uint32_t top = __reduce_max_sync(kFullMask, key);
            best_id = int32_t(__reduce_min_sync(kFullMask, key == top ? uint32_t(best_id) : uint32_t(INT32_MAX)));
            best = __uint_as_float((top & 0x80000000u) != 0 ? top & 0x7fffffffu : ~top);
        } else {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ob = __shfl_xor_sync(kFullMask, best, o);
                const int32_t oi = __shfl_xor_sync(kFullMask, best_id, o);
                if (ob > best || (ob == best && oi < best_id)) best = ob, best_id = oi;
            }
        }
#pragma unroll
        for (int i = 0; i < kPerLane; ++i)
            if (i * 32 + lane == best_id) v[i] = -INFINITY;
        if (lane == j) my_id = best_id, my_weight = expf(best - max_v) / sum;
    }
    if (renormalize) my_weight /= warp_sum(lane < top_k ? my_weight : 0.f);
    *id = my_id;
    *weight = my_weight;
}

}  // namespace zmoe::kernels::detail
