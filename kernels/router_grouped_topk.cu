// Group-limited MoE routers of DeepSeek-V2 (softmax, groups scored by their best expert) and DeepSeek-V3
// (noaux_tc: sigmoid, selection on sigmoid + e_score_correction_bias, groups scored by their top-2 sum): one warp
// per token, the selection scores in shared memory, groups and experts chosen by warp-wide argmax rounds.

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/dispatch.cuh"

namespace zmoe::kernels {
namespace {

using detail::kFullMask;

constexpr int kWarps = 4;

/// Warp-wide argmax of (v, id): the highest v, lower id first on ties; every lane gets the winner.
__device__ __forceinline__ void warp_argmax(float& v, int32_t& id) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(kFullMask, v, o);
        const int32_t oi = __shfl_xor_sync(kFullMask, id, o);
        if (ov > v || (ov == v && oi < id)) v = ov, id = oi;
    }
}

template <int kPerLane>
__global__ void __launch_bounds__(kWarps * 32) router_grouped_kernel(const router_grouped_params p) {
    extern __shared__ float choice_s[];  // [kWarps, num_experts]: selection scores
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int32_t t = blockIdx.x * kWarps + warp;
    if (t >= p.num_tokens) return;
    const int32_t E = p.num_experts, per_group = E / p.n_group;
    const bool sigmoid = p.scoring == router_scoring::sigmoid;
    float* choice = choice_s + size_t(warp) * E;
    const float* row = p.logits + size_t(t) * E;

    // Selection scores (softmax: the logits) and, for softmax, the max and the sum of exp.
    float max_l = -INFINITY;
    for (int32_t e = lane; e < E; e += 32) {
        const float l = row[e];
        max_l = fmaxf(max_l, l);
        choice[e] = sigmoid ? 1.f / (1.f + expf(-l)) + (p.bias ? p.bias[e] : 0.f) : l;
    }
    max_l = detail::warp_max(max_l);
    float sum = 0.f;
    if (!sigmoid)
        for (int32_t e = lane; e < E; e += 32) sum += expf(row[e] - max_l);
    sum = detail::warp_sum(sum);
    __syncwarp();

    // Group scores, lane g for group g; then the topk_group best groups as a bit mask.
    float gscore = -INFINITY;
    if (lane < p.n_group) {
        const float* g = choice + lane * per_group;
        float a = -INFINITY, b = -INFINITY;  // the best two
        for (int32_t i = 0; i < per_group; ++i) {
            const float x = g[i];
            if (x > a) {
                b = a;
                a = x;
            } else if (x > b) {
                b = x;
            }
        }
        gscore = sigmoid ? a + b : a;
    }
    uint32_t kept = 0;
    for (int32_t j = 0; j < p.topk_group; ++j) {
        float v = gscore;
        int32_t id = lane < p.n_group ? lane : INT32_MAX;
        warp_argmax(v, id);
        kept |= 1u << id;
        if (lane == id) gscore = -INFINITY;
    }

    // Top-k over the kept groups' experts; lane j ends up holding the j-th choice.
    float v[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int32_t e = i * 32 + lane;
        v[i] = e < E && (kept >> (e / per_group) & 1u) ? choice[e] : -INFINITY;
    }
    int32_t my_id = -1;
    float my_weight = 0.f;
    for (int32_t j = 0; j < p.top_k; ++j) {
        float best = -INFINITY;
        int32_t best_id = INT32_MAX;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const int32_t e = i * 32 + lane;
            if (e < E && (v[i] > best || (v[i] == best && e < best_id))) best = v[i], best_id = e;
        }
        warp_argmax(best, best_id);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i)
            if (i * 32 + lane == best_id) v[i] = -INFINITY;
        if (lane == j) my_id = best_id;
    }
    if (lane < p.top_k) {
        const float l = row[my_id];
        my_weight = sigmoid ? 1.f / (1.f + expf(-l)) : expf(l - max_l) / sum;
    }
    if (p.renormalize) {
        const float total = detail::warp_sum(lane < p.top_k ? my_weight : 0.f);
        my_weight /= sigmoid ? total + 1e-20f : total;
    }
    if (lane < p.top_k) {
        p.topk_ids[size_t(t) * p.top_k + lane] = my_id;
        p.topk_weights[size_t(t) * p.top_k + lane] = my_weight * p.scaling;
    }
}

}  // namespace

void launch_router_grouped(const router_grouped_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.n_group >= 1 && p.n_group <= 32 && p.num_experts % p.n_group == 0,
                        "router_grouped: n_group must be in [1, 32] and divide num_experts");
    ZMOE_KERNEL_REQUIRE(p.topk_group >= 1 && p.topk_group <= p.n_group, "router_grouped: topk_group in [1, n_group]");
    ZMOE_KERNEL_REQUIRE(p.top_k >= 1 && p.top_k <= 16 && p.top_k <= p.topk_group * (p.num_experts / p.n_group),
                        "router_grouped: top_k must be in [1, 16] and fit in the kept groups");
    ZMOE_KERNEL_REQUIRE(p.scoring != router_scoring::sigmoid || p.num_experts / p.n_group >= 2,
                        "router_grouped: sigmoid groups need at least 2 experts");
    if (p.num_tokens == 0) return;
    const int blocks = (p.num_tokens + kWarps - 1) / kWarps;
    const size_t smem = size_t(kWarps) * p.num_experts * sizeof(float);
    DISPATCH_EXPERTS_PER_LANE(p.num_experts, kPerLane,
                              router_grouped_kernel<kPerLane><<<blocks, kWarps * 32, smem, stream>>>(p));
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
