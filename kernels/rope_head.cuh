#pragma once
// One (token, head) of launch_rope_qk_norm_kv with the per-head q/k norm (or none), done by one warp: shared by the
// rope kernel and the QKV GEMV's fused epilogue (gemv_bf16.cu), so both give the same bits.

#include "kernels/api.hpp"
#include "kernels/device_utils.cuh"

namespace zmoe::kernels::detail {

constexpr int kRopeMaxPairsPerLane = 4;  // head_dim <= 256

/// Head h (q heads first, then k heads) of token t: norm (p.norm per_head or none), rotate and store to q_out or,
/// with the V rows of the same KV head, to the cache at slot_mapping[t] (nothing for a slot < 0). Lane l holds the
/// rotation pairs (i, i + head_dim / 2) for i = l, l + 32, ...; the sum of squares runs over d = l, l + 32, ... of
/// the first half, then of the second (the order rope_qk_norm_kv_kernel uses too).
__device__ __forceinline__ void rope_one_head(const rope_qk_norm_kv_params& p, int32_t t, int32_t h, int lane) {
    const int32_t hd = p.head_dim, half = hd / 2;
    const int32_t q_size = p.num_q_heads * hd, kv_size = p.num_kv_heads * hd;
    const bf16* row = p.qkv + size_t(t) * (q_size + 2 * kv_size);
    const int32_t slot = p.slot_mapping[t];
    const bool is_q = h < p.num_q_heads;
    if (!is_q && slot < 0) return;
    const bf16* src = row + size_t(h) * hd;
    if (!is_q) {
        const int32_t kvh = h - p.num_q_heads;
        const bf16* v = row + q_size + kv_size + size_t(kvh) * hd;
        bf16* dst = p.v_cache + size_t(slot) * kv_size + size_t(kvh) * hd;
        for (int32_t i = lane; i < hd / 8; i += 32)
            reinterpret_cast<bf16x8*>(dst)[i] = reinterpret_cast<const bf16x8*>(v)[i];
    }
    float x1[kRopeMaxPairsPerLane], x2[kRopeMaxPairsPerLane];
#pragma unroll
    for (int m = 0; m < kRopeMaxPairsPerLane; ++m) {
        const int32_t i = lane + 32 * m;
        x1[m] = i < half ? __bfloat162float(src[i]) : 0.f;
        x2[m] = i < half ? __bfloat162float(src[i + half]) : 0.f;
    }
    if (p.norm == qk_norm_mode::per_head) {
        float ss = 0.f;
#pragma unroll
        for (int m = 0; m < kRopeMaxPairsPerLane; ++m) ss += x1[m] * x1[m];
#pragma unroll
        for (int m = 0; m < kRopeMaxPairsPerLane; ++m) ss += x2[m] * x2[m];
        const float inv = rsqrtf(warp_sum(ss) / float(hd) + p.eps);
        const bf16* w = is_q ? p.q_norm_weight : p.k_norm_weight;
#pragma unroll
        for (int m = 0; m < kRopeMaxPairsPerLane; ++m) {
            const int32_t i = lane + 32 * m;
            if (i >= half) break;
            x1[m] *= inv * __bfloat162float(w[i]);
            x2[m] *= inv * __bfloat162float(w[i + half]);
        }
    }
    const int32_t pos = p.positions[t];
    bf16* dst = is_q ? p.q_out + (size_t(t) * p.num_q_heads + h) * hd
                     : p.k_cache + size_t(slot) * kv_size + size_t(h - p.num_q_heads) * hd;
#pragma unroll
    for (int m = 0; m < kRopeMaxPairsPerLane; ++m) {
        const int32_t i = lane + 32 * m;
        if (i >= half) break;
        const float inv_freq = 1.0f / powf(p.rope_theta, float(2 * i) / float(hd));
        float sn, cs;
        sincosf(float(pos) * inv_freq, &sn, &cs);
        dst[i] = __float2bfloat16(x1[m] * cs - x2[m] * sn);
        dst[i + half] = __float2bfloat16(x2[m] * cs + x1[m] * sn);
    }
}

}  // namespace zmoe::kernels::detail
