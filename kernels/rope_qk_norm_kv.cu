// RoPE (neox rotate-half) fused with the q/k RMSNorm of Qwen3 (per head) or OLMoE (whole projection) and the
// write of K and V into the paged cache. One block per token: the whole-projection norm needs every head of the
// token before any head can be rotated. Both kernels are launched programmatically dependent (pdl.cuh).

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/decode_tuning.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;

/// RMSNorm over n values of shared memory with weight w[n], statistics over all n (the whole-projection norm).
__device__ void norm_span(float* v, int32_t n, const bf16* w, float eps, float* scratch) {
    float s = 0.f;
    for (int32_t i = threadIdx.x; i < n; i += kThreads) s += v[i] * v[i];
    const float inv = rsqrtf(detail::block_sum(s, scratch) / float(n) + eps);
    for (int32_t i = threadIdx.x; i < n; i += kThreads) v[i] *= inv * __bfloat162float(w[i]);
}

template <bool kEarly>
__global__ void __launch_bounds__(kThreads) rope_qk_norm_kv_kernel(const rope_qk_norm_kv_params p) {
    // qk: [(num_q_heads + num_kv_heads) * head_dim] fp32 = this token's q heads then k heads, 4 bytes each.
    extern __shared__ float qk[];
    __shared__ float scratch[32];
    // norm_early (decode_tuning.hpp, the default) triggers before the wait: the decode attention
    // after this short kernel launches now and loads its first K/V tiles under it.
    if constexpr (kEarly) detail::pdl_launch_dependents();
    detail::pdl_wait();
    if constexpr (!kEarly) detail::pdl_launch_dependents();
    const int32_t t = blockIdx.x, hd = p.head_dim;
    const int32_t num_heads = p.num_q_heads + p.num_kv_heads;
    const int32_t q_size = p.num_q_heads * hd, kv_size = p.num_kv_heads * hd;
    const bf16* row = p.qkv + size_t(t) * (q_size + 2 * kv_size);
    const int32_t slot = p.slot_mapping[t];

    for (int32_t vec = threadIdx.x; vec < (q_size + kv_size) / 8; vec += kThreads) {
        float v[8];
        detail::load_f32x8(row + vec * 8, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) qk[vec * 8 + j] = v[j];
    }
    if (slot >= 0) {
        const auto* src = reinterpret_cast<const detail::bf16x8*>(row + q_size + kv_size);
        auto* dst = reinterpret_cast<detail::bf16x8*>(p.v_cache + size_t(slot) * kv_size);
        for (int32_t vec = threadIdx.x; vec < kv_size / 8; vec += kThreads) dst[vec] = src[vec];
    }
    __syncthreads();

    if (p.norm == qk_norm_mode::per_head) {
        const int32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        for (int32_t h = warp; h < num_heads; h += kThreads / 32) {
            float* v = qk + h * hd;
            const bf16* w = h < p.num_q_heads ? p.q_norm_weight : p.k_norm_weight;
            float s = 0.f;
            for (int32_t d = lane; d < hd; d += 32) s += v[d] * v[d];
            const float inv = rsqrtf(detail::warp_sum(s) / float(hd) + p.eps);
            for (int32_t d = lane; d < hd; d += 32) v[d] *= inv * __bfloat162float(w[d]);
        }
    } else if (p.norm == qk_norm_mode::whole) {
        norm_span(qk, q_size, p.q_norm_weight, p.eps, scratch);
        norm_span(qk + q_size, kv_size, p.k_norm_weight, p.eps, scratch);
    }
    __syncthreads();

    const int32_t half = hd / 2, pos = p.positions[t];
    for (int32_t pair = threadIdx.x; pair < num_heads * half; pair += kThreads) {
        const int32_t h = pair / half, i = pair % half;
        const float inv_freq = 1.0f / powf(p.rope_theta, float(2 * i) / float(hd));
        float s, c;
        sincosf(float(pos) * inv_freq, &s, &c);
        const float x1 = qk[h * hd + i], x2 = qk[h * hd + i + half];
        const bf16 o1 = __float2bfloat16(x1 * c - x2 * s), o2 = __float2bfloat16(x2 * c + x1 * s);
        if (h < p.num_q_heads) {
            bf16* q = p.q_out + (size_t(t) * p.num_q_heads + h) * hd;
            q[i] = o1;
            q[i + half] = o2;
        } else if (slot >= 0) {
            bf16* k = p.k_cache + size_t(slot) * kv_size + (h - p.num_q_heads) * hd;
            k[i] = o1;
            k[i + half] = o2;
        }
    }
}

constexpr int kHeadWarps = 4;        // heads per block of the per-head kernel, one warp each
constexpr int kMaxPairsPerLane = 4;  // head_dim <= 256

/// Per-head norm (or none): one warp per (token, head), so a decode step spreads over many blocks. Lane l holds the
/// rotation pairs (i, i + head_dim / 2) for i = l, l + 32, ...; the sum of squares runs over the same elements in
/// the same order as rope_qk_norm_kv_kernel's (d = l, l + 32, ...), so both give the same bits.
template <bool kEarly>
__global__ void __launch_bounds__(kHeadWarps * 32) rope_per_head_kernel(const rope_qk_norm_kv_params p) {
    const int32_t t = blockIdx.x, hd = p.head_dim, half = hd / 2;
    const int lane = threadIdx.x % 32;
    // The rotation angles of this lane's pairs depend only on the position (the host's, copied before the step): they
    // are computed under the kernel before, ahead of the programmatic wait.
    float sn[kMaxPairsPerLane], cs[kMaxPairsPerLane];
    {
        const int32_t pos = p.positions[t];
#pragma unroll
        for (int m = 0; m < kMaxPairsPerLane; ++m) {
            const int32_t i = lane + 32 * m;
            const float inv_freq = 1.0f / powf(p.rope_theta, float(2 * i) / float(hd));
            sincosf(float(pos) * inv_freq, &sn[m], &cs[m]);
        }
    }
    // norm_early (decode_tuning.hpp, the default) triggers before the wait: the decode attention
    // after this short kernel launches now and loads its first K/V tiles under it.
    if constexpr (kEarly) detail::pdl_launch_dependents();
    detail::pdl_wait();
    if constexpr (!kEarly) detail::pdl_launch_dependents();
    const int32_t h = blockIdx.y * kHeadWarps + threadIdx.x / 32;
    if (h >= p.num_q_heads + p.num_kv_heads) return;
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
            reinterpret_cast<detail::bf16x8*>(dst)[i] = reinterpret_cast<const detail::bf16x8*>(v)[i];
    }
    float x1[kMaxPairsPerLane], x2[kMaxPairsPerLane];
#pragma unroll
    for (int m = 0; m < kMaxPairsPerLane; ++m) {
        const int32_t i = lane + 32 * m;
        x1[m] = i < half ? __bfloat162float(src[i]) : 0.f;
        x2[m] = i < half ? __bfloat162float(src[i + half]) : 0.f;
    }
    if (p.norm == qk_norm_mode::per_head) {
        float ss = 0.f;  // d = lane, lane + 32, ... over the whole head: the first half's elements, then the second's
#pragma unroll
        for (int m = 0; m < kMaxPairsPerLane; ++m) ss += x1[m] * x1[m];
#pragma unroll
        for (int m = 0; m < kMaxPairsPerLane; ++m) ss += x2[m] * x2[m];
        const float inv = rsqrtf(detail::warp_sum(ss) / float(hd) + p.eps);
        const bf16* w = is_q ? p.q_norm_weight : p.k_norm_weight;
#pragma unroll
        for (int m = 0; m < kMaxPairsPerLane; ++m) {
            const int32_t i = lane + 32 * m;
            if (i >= half) break;
            x1[m] *= inv * __bfloat162float(w[i]);
            x2[m] *= inv * __bfloat162float(w[i + half]);
        }
    }
    bf16* dst = is_q ? p.q_out + (size_t(t) * p.num_q_heads + h) * hd
                     : p.k_cache + size_t(slot) * kv_size + size_t(h - p.num_q_heads) * hd;
#pragma unroll
    for (int m = 0; m < kMaxPairsPerLane; ++m) {
        const int32_t i = lane + 32 * m;
        if (i >= half) break;
        dst[i] = __float2bfloat16(x1[m] * cs[m] - x2[m] * sn[m]);
        dst[i + half] = __float2bfloat16(x2[m] * cs[m] + x1[m] * sn[m]);
    }
}

}  // namespace

void launch_rope_qk_norm_kv(const rope_qk_norm_kv_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.head_dim % 8 == 0 && p.head_dim > 0, "rope: head_dim must be a multiple of 8");
    ZMOE_KERNEL_REQUIRE(p.norm == qk_norm_mode::none || (p.q_norm_weight && p.k_norm_weight),
                        "rope: q/k norm weights missing");
    if (p.num_tokens == 0) return;
    if (p.norm != qk_norm_mode::whole && p.head_dim <= 2 * 32 * kMaxPairsPerLane) {
        const int32_t heads = p.num_q_heads + p.num_kv_heads;
        detail::launch_pdl(
            current_decode_tuning().norm_early ? rope_per_head_kernel<true> : rope_per_head_kernel<false>,
            dim3(p.num_tokens, (heads + kHeadWarps - 1) / kHeadWarps), dim3(kHeadWarps * 32), 0, stream, p);
        ZMOE_CUDA_CHECK_LAUNCH();
        return;
    }
    const size_t smem = size_t(p.num_q_heads + p.num_kv_heads) * p.head_dim * sizeof(float);
    const auto kernel =
        current_decode_tuning().norm_early ? rope_qk_norm_kv_kernel<true> : rope_qk_norm_kv_kernel<false>;
    if (smem > 48 * 1024)
        ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    detail::launch_pdl(kernel, dim3(p.num_tokens), dim3(kThreads), smem, stream, p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
