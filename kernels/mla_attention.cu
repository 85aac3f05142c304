// Multi-head latent attention (DeepSeek-V2/V3) in the absorbed form over a paged cache of latents: the latent
// norm + RoPE + cache write, the query absorption into the latent space, the attention over the latents (online
// softmax, one block per (token, head), its warps splitting the positions), and the value up-projection.

#include <algorithm>
#include <cmath>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/mla_gemm.hpp"
#include "kernels/mla_rope.cuh"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

using detail::kFullMask;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTokensPerBlock = 8;  // absorb / v_up: tokens sharing one pass over a head's weights
constexpr int kMaxChunks = 4;       // attention: 8-element chunks of a cache row per lane (rows <= 1024)
constexpr int kMaxSlices = 256;     // absorb / v_up: at most this many (head, column slice) blocks per token tile

// ---------------------------------------------------------------------------------------------------------
// Latent RMSNorm + RoPE of k_pe (cache write) and of every head's q_pe.

/// The step token of row i of a row-listed launch (all tokens, in order, without a list).
__device__ __forceinline__ int32_t token_of(const int32_t* rows, int32_t i) { return rows != nullptr ? rows[i] : i; }

__global__ void __launch_bounds__(kThreads) mla_rope_kv_kernel(const mla_rope_kv_params p) {
    static_assert(kThreads == detail::kMlaRopeRowThreads);
    __shared__ float scratch[32];
    __shared__ float cos_s[64], sin_s[64];
    const int32_t t = blockIdx.x;
    const int32_t half = p.rope_dim / 2;
    const int32_t pos = p.positions[t];
    for (int32_t i = threadIdx.x; i < half; i += blockDim.x) detail::mla_rope_angle(p, pos, i, cos_s[i], sin_s[i]);
    // The positions are the host's (copied before the step): the angles above run under the kernel before; kv and q
    // come from it.
    detail::pdl_wait();
    detail::pdl_launch_dependents();
    if (blockIdx.y > 0) {  // q_pe of kThreads (head, pair) items, one each: one round trip, not one per item
        const int32_t item = (blockIdx.y - 1) * kThreads + threadIdx.x;
        __syncthreads();  // cos_s, sin_s
        if (item >= p.num_heads * half) return;
        detail::mla_rope_q_pair(p, t, item / half, item % half, cos_s[item % half], sin_s[item % half]);
        return;
    }
    detail::mla_rope_kv_row(p, t, cos_s, sin_s, scratch);
}

// ---------------------------------------------------------------------------------------------------------
// q_lat = W_k^T q_nope: one block per (head, tile of tokens), a thread per latent column.

__global__ void __launch_bounds__(kThreads) mla_q_absorb_kernel(const mla_absorb_params p) {
    __shared__ float q_s[kTokensPerBlock][256];
    const int32_t h = blockIdx.x, t0 = blockIdx.y * kTokensPerBlock;
    const int32_t n = min(kTokensPerBlock, p.num_tokens - t0);
    const int32_t dn = p.nope_dim, r = p.kv_lora_rank, qk = dn + p.rope_dim;
    for (int32_t idx = threadIdx.x; idx < kTokensPerBlock * dn; idx += blockDim.x) {
        const int32_t tt = idx / dn, d = idx % dn;
        q_s[tt][d] =
            tt < n ? __bfloat162float(p.q[(size_t(token_of(p.rows, t0 + tt)) * p.num_heads + h) * qk + d]) : 0.f;
    }
    __syncthreads();
    const bf16* wk = p.kv_b + size_t(h) * (dn + p.v_dim) * r;
    for (int32_t i = blockIdx.z * blockDim.x + threadIdx.x; i < r; i += gridDim.z * blockDim.x) {
        float acc[kTokensPerBlock] = {};
        for (int32_t d = 0; d < dn; ++d) {
            const float w = __bfloat162float(wk[size_t(d) * r + i]);
#pragma unroll
            for (int tt = 0; tt < kTokensPerBlock; ++tt) acc[tt] += q_s[tt][d] * w;
        }
        for (int tt = 0; tt < n; ++tt) p.q_lat[(size_t(token_of(p.rows, t0 + tt)) * p.num_heads + h) * r + i] = acc[tt];
    }
}

// ---------------------------------------------------------------------------------------------------------
// Attention over the latents: one block per (token, head); warp w takes positions j = w, w + kWarps, ...; lane l
// holds the 8-element chunks c = l + 32 k of the cache row (latent chunks first, then the rope chunks).

__global__ void __launch_bounds__(kThreads) mla_attention_kernel(const mla_attention_params p) {
    __shared__ float m_s[kWarps], l_s[kWarps];
    __shared__ float acc_s[kWarps][1024];
    const int32_t t = token_of(p.rows, blockIdx.x), h = blockIdx.y;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int32_t r = p.kv_lora_rank, width = r + p.rope_dim;
    const int32_t latent_chunks = r / 8, chunks = width / 8;

    // The token's sequence and position.
    int32_t s = 0;
    while (s + 1 < p.num_seqs && p.query_start[s + 1] <= t) ++s;
    const int32_t pos = p.start_pos[s] + (t - p.query_start[s]);
    const int32_t* table = p.block_tables + size_t(s) * p.max_blocks_per_seq;

    // The query: q_lat (fp32) for the latent chunks, q_pe (BF16) for the rope chunks.
    float qv[kMaxChunks][8];
    const float* ql = p.q_lat + (size_t(t) * p.num_heads + h) * r;
    const bf16* qpe = p.q + (size_t(t) * p.num_heads + h) * (p.nope_dim + p.rope_dim) + p.nope_dim;
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
        const int32_t c = lane + 32 * k;
#pragma unroll
        for (int e = 0; e < 8; ++e) qv[k][e] = 0.f;
        if (c < latent_chunks) {
#pragma unroll
            for (int e = 0; e < 8; ++e) qv[k][e] = ql[c * 8 + e];
        } else if (c < chunks) {
#pragma unroll
            for (int e = 0; e < 8; ++e) qv[k][e] = __bfloat162float(qpe[(c - latent_chunks) * 8 + e]);
        }
    }

    float m = -INFINITY, l = 0.f;
    float acc[kMaxChunks][8] = {};
    for (int32_t j = warp; j <= pos; j += kWarps) {
        const bf16* row = p.cache + (size_t(table[j / p.block_size]) * p.block_size + j % p.block_size) * width;
        float cv[kMaxChunks][8];
        float dot = 0.f;
#pragma unroll
        for (int k = 0; k < kMaxChunks; ++k) {
            const int32_t c = lane + 32 * k;
            if (c < chunks) {
                detail::load_f32x8(row + c * 8, cv[k]);
#pragma unroll
                for (int e = 0; e < 8; ++e) dot += qv[k][e] * cv[k][e];
            }
        }
        const float score = detail::warp_sum(dot) * p.scale;
        const float m_new = fmaxf(m, score);
        const float corr = expf(m - m_new), pj = expf(score - m_new);
        l = l * corr + pj;
#pragma unroll
        for (int k = 0; k < kMaxChunks; ++k) {
            const int32_t c = lane + 32 * k;
            if (c < latent_chunks) {
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[k][e] = acc[k][e] * corr + pj * cv[k][e];
            }
        }
        m = m_new;
    }
    if (lane == 0) m_s[warp] = m, l_s[warp] = l;
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
        const int32_t c = lane + 32 * k;
        if (c < latent_chunks) {
#pragma unroll
            for (int e = 0; e < 8; ++e) acc_s[warp][c * 8 + e] = acc[k][e];
        }
    }
    __syncthreads();
    float big_m = -INFINITY;
    for (int w = 0; w < kWarps; ++w) big_m = fmaxf(big_m, m_s[w]);
    float f[kWarps], denom = 0.f;
    for (int w = 0; w < kWarps; ++w) {
        f[w] = l_s[w] > 0.f ? expf(m_s[w] - big_m) : 0.f;
        denom += f[w] * l_s[w];
    }
    const float inv = 1.f / denom;
    float* out = p.o_lat + (size_t(t) * p.num_heads + h) * r;
    for (int32_t i = threadIdx.x; i < r; i += blockDim.x) {
        float v = 0.f;
        for (int w = 0; w < kWarps; ++w) v += f[w] * acc_s[w][i];
        out[i] = v * inv;
    }
}

// ---------------------------------------------------------------------------------------------------------
// out = W_v o_lat: one block per (head, tile of tokens), a warp per output column.

__global__ void __launch_bounds__(kThreads) mla_v_up_kernel(const mla_v_up_params p) {
    extern __shared__ float o_s[];  // [kTokensPerBlock, kv_lora_rank]
    const int32_t h = blockIdx.x, t0 = blockIdx.y * kTokensPerBlock;
    const int32_t n = min(kTokensPerBlock, p.num_tokens - t0);
    const int32_t r = p.kv_lora_rank;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int32_t idx = threadIdx.x; idx < kTokensPerBlock * r; idx += blockDim.x) {
        const int32_t tt = idx / r, i = idx % r;
        o_s[idx] = tt < n ? p.o_lat[(size_t(token_of(p.rows, t0 + tt)) * p.num_heads + h) * r + i] : 0.f;
    }
    __syncthreads();
    const bf16* wv = p.kv_b + (size_t(h) * (p.nope_dim + p.v_dim) + p.nope_dim) * r;
    for (int32_t e = blockIdx.z * kWarps + warp; e < p.v_dim; e += gridDim.z * kWarps) {
        float acc[kTokensPerBlock] = {};
        for (int32_t i = lane; i < r; i += 32) {
            const float w = __bfloat162float(wv[size_t(e) * r + i]);
#pragma unroll
            for (int tt = 0; tt < kTokensPerBlock; ++tt) acc[tt] += o_s[tt * r + i] * w;
        }
#pragma unroll
        for (int tt = 0; tt < kTokensPerBlock; ++tt) acc[tt] = detail::warp_sum(acc[tt]);
        if (lane == 0)
            for (int tt = 0; tt < n; ++tt)
                p.out[size_t(token_of(p.rows, t0 + tt)) * p.num_heads * p.v_dim + size_t(h) * p.v_dim + e] =
                    __float2bfloat16(acc[tt]);
    }
}

}  // namespace

void launch_mla_rope_kv(const mla_rope_kv_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.rope_dim % 2 == 0 && p.rope_dim <= 128, "mla_rope_kv: rope_dim must be even and <= 128");
    ZMOE_KERNEL_REQUIRE(p.kv_lora_rank > 0, "mla_rope_kv: kv_lora_rank must be positive");
    if (p.num_tokens == 0) return;
    // Per token: block 0 the latent row (norm, RoPE of k_pe, the cache write), the others q_pe, kThreads pairs each.
    const int32_t q_blocks = (p.num_heads * (p.rope_dim / 2) + kThreads - 1) / kThreads;
    // Programmatic where the projections before it are few-token kernels (mla_decode.cu has the measurement).
    const dim3 grid(p.num_tokens, 1 + q_blocks);
    if (p.num_tokens <= kMlaAbsorbGemvMaxTokens)
        detail::launch_pdl(mla_rope_kv_kernel, grid, dim3(kThreads), 0, stream, p);
    else
        mla_rope_kv_kernel<<<grid, kThreads, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_mla_q_absorb(const mla_absorb_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.nope_dim > 0 && p.nope_dim <= 256, "mla_q_absorb: nope_dim must be in [1, 256]");
    if (p.num_tokens == 0) return;
    // Column slices over blockIdx.z: more blocks for the few tokens of a decode step (same sums per column).
    const dim3 grid(p.num_heads, (p.num_tokens + kTokensPerBlock - 1) / kTokensPerBlock,
                    std::max(1, std::min((p.kv_lora_rank + kThreads - 1) / kThreads, kMaxSlices / p.num_heads)));
    mla_q_absorb_kernel<<<grid, kThreads, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_mla_attention(const mla_attention_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.kv_lora_rank % 8 == 0 && p.rope_dim % 8 == 0 && p.kv_lora_rank + p.rope_dim <= 1024,
                        "mla_attention: kv_lora_rank and rope_dim must be multiples of 8, their sum <= 1024");
    if (p.num_tokens == 0) return;
    const dim3 grid(p.num_tokens, p.num_heads);
    mla_attention_kernel<<<grid, kThreads, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_mla_v_up(const mla_v_up_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.kv_lora_rank > 0 && p.kv_lora_rank <= 1024, "mla_v_up: kv_lora_rank must be in [1, 1024]");
    if (p.num_tokens == 0) return;
    // Output-column slices over blockIdx.z (same warp sums per column).
    const dim3 grid(p.num_heads, (p.num_tokens + kTokensPerBlock - 1) / kTokensPerBlock,
                    std::max(1, std::min((p.v_dim + 4 * kWarps - 1) / (4 * kWarps), kMaxSlices / p.num_heads)));
    const size_t smem = size_t(kTokensPerBlock) * p.kv_lora_rank * sizeof(float);
    mla_v_up_kernel<<<grid, kThreads, smem, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
