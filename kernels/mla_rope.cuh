#pragma once
// MLA's latent RMSNorm + RoPE (mla_rope_kv_params) as device steps that more than one kernel runs: the rope kernel
// of mla_attention.cu, and the few-token absorb kernel of mla_absorb_gemv.cu that takes the same work into its own
// launch at a decode step. Both run the very same arithmetic, so the two paths give the same bits.

#include "kernels/api.hpp"
#include "kernels/device_utils.cuh"

namespace zmoe::kernels::detail {

/// Threads that take part in a latent row's norm (its sum of squares is added in this many lanes' order, whatever
/// the block's size): the rope kernel's block.
constexpr int kMlaRopeRowThreads = 128;

__device__ __forceinline__ void mla_rope_pair_index(int32_t i, int32_t dim, bool interleave, int32_t& a, int32_t& b) {
    if (interleave) {
        a = 2 * i;
        b = 2 * i + 1;
    } else {
        a = i;
        b = i + dim / 2;
    }
}

/// cos / sin (times attention_factor) of pair `i` of the token at `pos`: the angle in fp32, sincos in double.
__device__ __forceinline__ void mla_rope_angle(const mla_rope_kv_params& p, int32_t pos, int32_t i, float& c,
                                               float& s) {
    const float angle = float(pos) * p.inv_freq[i];
    double sd, cd;
    sincos(double(angle), &sd, &cd);
    c = float(cd) * p.attention_factor;
    s = float(sd) * p.attention_factor;
}

/// Rotates pair `i` of head `h`'s q_pe of token `t` in place.
__device__ __forceinline__ void mla_rope_q_pair(const mla_rope_kv_params& p, int32_t t, int32_t h, int32_t i, float c,
                                                float s) {
    bf16* qh = p.q + (size_t(t) * p.num_heads + h) * (p.nope_dim + p.rope_dim) + p.nope_dim;
    int32_t a, b;
    mla_rope_pair_index(i, p.rope_dim, p.interleave, a, b);
    const float x1 = __bfloat162float(qh[a]), x2 = __bfloat162float(qh[b]);
    qh[a] = __float2bfloat16(x1 * c - x2 * s);
    qh[b] = __float2bfloat16(x2 * c + x1 * s);
}

/// Token t's cache row [bf16(RMSNorm(kv[:r]) * weight), bf16(rope(kv[r:]))] (no write for a slot < 0). Every thread
/// of the block calls it (it holds block barriers); threads 0 .. kMlaRopeRowThreads - 1 do the work. cos_s / sin_s
/// [rope_dim / 2] are the token's, written before the call by any thread. scratch: 32 floats.
__device__ __forceinline__ void mla_rope_kv_row(const mla_rope_kv_params& p, int32_t t, const float* cos_s,
                                                const float* sin_s, float* scratch) {
    const int32_t r = p.kv_lora_rank, half = p.rope_dim / 2, width = r + p.rope_dim;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const bool worker = tid < kMlaRopeRowThreads;
    const bf16* kv = p.kv + size_t(t) * width;
    float sum_sq = 0.f;
    if (worker)
        for (int32_t i = tid; i < r; i += kMlaRopeRowThreads) {
            const float x = __bfloat162float(kv[i]);
            sum_sq += x * x;
        }
    // block_sum over the kMlaRopeRowThreads workers (the same order as device_utils' block_sum over a block of them).
    sum_sq = warp_sum(sum_sq);
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0 && worker) scratch[warp] = sum_sq;
    __syncthreads();  // also: cos_s, sin_s are written
    float total = lane < kMlaRopeRowThreads / 32 ? scratch[lane] : 0.f;
    total = warp_sum(total);
    const float inv = rsqrtf(total / float(r) + p.eps);
    const int32_t slot = p.slot_mapping[t];
    if (!worker || slot < 0) return;
    bf16* row = p.cache + (size_t(slot / p.block_size) * p.block_size + slot % p.block_size) * width;
    for (int32_t i = tid; i < r; i += kMlaRopeRowThreads)
        row[i] = __float2bfloat16(__bfloat162float(kv[i]) * inv * __bfloat162float(p.kv_norm_weight[i]));
    for (int32_t i = tid; i < half; i += kMlaRopeRowThreads) {
        int32_t a, b;
        mla_rope_pair_index(i, p.rope_dim, p.interleave, a, b);
        const float x1 = __bfloat162float(kv[r + a]), x2 = __bfloat162float(kv[r + b]);
        row[r + a] = __float2bfloat16(x1 * cos_s[i] - x2 * sin_s[i]);
        row[r + b] = __float2bfloat16(x2 * cos_s[i] + x1 * sin_s[i]);
    }
}

}  // namespace zmoe::kernels::detail
