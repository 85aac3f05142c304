// Paged attention for decode steps (one query token per sequence), split over the KV in fixed chunks of keys.
//
// One block per (sequence, KV head, chunk of kDecodeAttentionChunk keys); four warps take 32 keys at a time. In the
// score phase lane j owns key j of its warp's tile: it reads the key's K row once (16-byte loads) and scores every
// query head of the GQA group against it (q in shared memory, pre-scaled by scale * log2 e). An online softmax in
// fp32 per head follows (warp max / sum), then the V phase: each lane owns head_dim / 32 output dimensions of every
// head of the group, and the tile's V rows are read coalesced, one per key. The four warps' states are merged in
// warp order (deterministic); a sequence spanning several chunks writes (o, m, l) per chunk and a second kernel
// merges them in chunk order.

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKeyBatch = 8;  // K vectors (8 bf16 each) loaded before they are used

template <int N>
__device__ __forceinline__ void load_bf16_n(const bf16* src, float (&v)[N]) {
    if constexpr (N == 8) {
        detail::load_f32x8(src, v);
    } else if constexpr (N == 4) {
        const uint2 u = *reinterpret_cast<const uint2*>(src);
        const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
        const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
        v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
    } else {
        static_assert(N == 2);
        const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src));
        v[0] = a.x, v[1] = a.y;
    }
}

template <int kHeadDim, int kGroup>
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(const decode_attention_params p) {
    constexpr int kDL = kHeadDim / 32;  // output dimensions per lane
    __shared__ float q_s[kGroup][kHeadDim];
    __shared__ float o_s[kGroup][kHeadDim];
    __shared__ float m_s[kWarps][kGroup], l_s[kWarps][kGroup];
    __shared__ float m_tot[kGroup], l_tot[kGroup];

    const int32_t seq = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t kv_len = p.start_pos[seq] + 1;
    const int32_t k_begin = split * kDecodeAttentionChunk;
    if (k_begin >= kv_len) return;  // nothing to do: the merge reads only the chunks that hold keys
    const int32_t k_end = min(kv_len, k_begin + kDecodeAttentionChunk);
    const int32_t* table = p.block_tables + size_t(seq) * p.max_blocks_per_seq;
    const float scale_log2 = p.scale * 1.4426950408889634f;

    const size_t head0 = size_t(seq) * p.num_q_heads + size_t(kvh) * kGroup;  // the group's first query head
    const bf16* q = p.q + head0 * kHeadDim;
    for (int i = threadIdx.x; i < kGroup * kHeadDim; i += kThreads) {
        (&q_s[0][0])[i] = __bfloat162float(q[i]) * scale_log2;
        (&o_s[0][0])[i] = 0.f;
    }
    __syncthreads();

    float m[kGroup], l[kGroup], acc[kGroup][kDL];
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
        m[h] = -INFINITY;
        l[h] = 0.f;
#pragma unroll
        for (int i = 0; i < kDL; ++i) acc[h][i] = 0.f;
    }

    for (int32_t t0 = k_begin + warp * 32; t0 < k_end; t0 += kWarps * 32) {
        const int32_t key = t0 + lane;
        const bool valid = key < k_end;
        unsigned long long row = 0;  // element offset of this key's (slot, kv head) row
        float s[kGroup];
#pragma unroll
        for (int h = 0; h < kGroup; ++h) s[h] = 0.f;
        if (valid) {
            const size_t slot = size_t(table[key / p.block_size]) * p.block_size + key % p.block_size;
            row = (slot * p.num_kv_heads + kvh) * kHeadDim;
            const bf16* k = p.k_cache + row;
#pragma unroll
            for (int d0 = 0; d0 < kHeadDim; d0 += 8 * kKeyBatch) {
                detail::bf16x8 kv[kKeyBatch];
#pragma unroll
                for (int b = 0; b < kKeyBatch; ++b)
                    if (d0 + b * 8 < kHeadDim) kv[b] = *reinterpret_cast<const detail::bf16x8*>(k + d0 + b * 8);
#pragma unroll
                for (int b = 0; b < kKeyBatch; ++b) {
                    if (d0 + b * 8 >= kHeadDim) break;
#pragma unroll
                    for (int j2 = 0; j2 < 4; ++j2) {
                        const float2 kf = __bfloat1622float2(kv[b].h[j2]);
                        const int d = d0 + b * 8 + 2 * j2;
#pragma unroll
                        for (int h = 0; h < kGroup; ++h) s[h] += q_s[h][d] * kf.x + q_s[h][d + 1] * kf.y;
                    }
                }
            }
        }

        float pr[kGroup];
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
            const float score = valid ? s[h] : -INFINITY;
            const float m_new = fmaxf(m[h], detail::warp_max(score));  // finite: lane 0's key is valid
            const float alpha = exp2f(m[h] - m_new);                   // 0 while m[h] is -inf
            pr[h] = valid ? exp2f(score - m_new) : 0.f;
            l[h] = l[h] * alpha + detail::warp_sum(pr[h]);
            m[h] = m_new;
#pragma unroll
            for (int i = 0; i < kDL; ++i) acc[h][i] *= alpha;
        }

        const int32_t n_keys = min(32, k_end - t0);
#pragma unroll 8
        for (int j = 0; j < 32; ++j) {
            if (j >= n_keys) break;
            const unsigned long long vrow = __shfl_sync(detail::kFullMask, row, j);
            float v[kDL];
            load_bf16_n<kDL>(p.v_cache + vrow + lane * kDL, v);
#pragma unroll
            for (int h = 0; h < kGroup; ++h) {
                const float pj = __shfl_sync(detail::kFullMask, pr[h], j);
#pragma unroll
                for (int i = 0; i < kDL; ++i) acc[h][i] += pj * v[i];
            }
        }
    }

    // Merge the warps: a warp that saw no key has m = -inf and l = 0.
    if (lane == 0) {
#pragma unroll
        for (int h = 0; h < kGroup; ++h) m_s[warp][h] = m[h], l_s[warp][h] = l[h];
    }
    __syncthreads();
    if (threadIdx.x < kGroup) {
        const int h = threadIdx.x;
        float mx = -INFINITY, sum = 0.f;
        for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_s[w][h]);
        for (int w = 0; w < kWarps; ++w)
            if (m_s[w][h] != -INFINITY) sum += l_s[w][h] * exp2f(m_s[w][h] - mx);
        m_tot[h] = mx;
        l_tot[h] = sum;
    }
    __syncthreads();
    for (int w = 0; w < kWarps; ++w) {
        if (warp == w) {
#pragma unroll
            for (int h = 0; h < kGroup; ++h) {
                const float f = m[h] == -INFINITY ? 0.f : exp2f(m[h] - m_tot[h]);
#pragma unroll
                for (int i = 0; i < kDL; ++i) o_s[h][lane * kDL + i] += acc[h][i] * f;
            }
        }
        __syncthreads();
    }

    if (p.num_splits == 1) {
        for (int v = threadIdx.x; v < kGroup * kHeadDim / 8; v += kThreads) {
            const int h = v / (kHeadDim / 8), d = (v % (kHeadDim / 8)) * 8;
            const float inv = l_tot[h] > 0.f ? 1.f / l_tot[h] : 0.f;
            float o[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) o[i] = o_s[h][d + i] * inv;
            detail::store_f32x8(p.out + (head0 + h) * kHeadDim + d, o);
        }
        return;
    }
    for (int i = threadIdx.x; i < kGroup * (kHeadDim + 2); i += kThreads) {
        const int h = i / (kHeadDim + 2), d = i % (kHeadDim + 2);
        float* part = p.workspace + ((head0 + h) * p.num_splits + split) * (kHeadDim + 2);
        part[d] = d < kHeadDim ? o_s[h][d] : d == kHeadDim ? m_tot[h] : l_tot[h];
    }
}

/// Merges a sequence's chunks, in chunk order: out = sum_c o_c 2^(m_c - M) / sum_c l_c 2^(m_c - M).
__global__ void decode_attention_merge_kernel(const decode_attention_params p) {
    const int32_t seq = blockIdx.x, head = blockIdx.y, D = p.head_dim;
    const int32_t chunks = (p.start_pos[seq] + kDecodeAttentionChunk) / kDecodeAttentionChunk;  // ceil(kv_len / chunk)
    const float* base = p.workspace + (size_t(seq) * p.num_q_heads + head) * p.num_splits * (D + 2);
    float mx = -INFINITY, sum = 0.f;
    for (int32_t c = 0; c < chunks; ++c) mx = fmaxf(mx, base[c * (D + 2) + D]);
    for (int32_t c = 0; c < chunks; ++c) sum += base[c * (D + 2) + D + 1] * exp2f(base[c * (D + 2) + D] - mx);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.f;
        for (int32_t c = 0; c < chunks; ++c) o += base[c * (D + 2) + d] * exp2f(base[c * (D + 2) + D] - mx);
        p.out[(size_t(seq) * p.num_q_heads + head) * D + d] = __float2bfloat16(o * inv);
    }
}

template <int kHeadDim>
void launch_for_head_dim(const decode_attention_params& p, int32_t group, cudaStream_t stream) {
    const dim3 grid(p.num_seqs, p.num_kv_heads, p.num_splits);
    switch (group) {
        case 1: decode_attention_kernel<kHeadDim, 1><<<grid, kThreads, 0, stream>>>(p); break;
        case 2: decode_attention_kernel<kHeadDim, 2><<<grid, kThreads, 0, stream>>>(p); break;
        case 4: decode_attention_kernel<kHeadDim, 4><<<grid, kThreads, 0, stream>>>(p); break;
        case 8: decode_attention_kernel<kHeadDim, 8><<<grid, kThreads, 0, stream>>>(p); break;
        case 16: decode_attention_kernel<kHeadDim, 16><<<grid, kThreads, 0, stream>>>(p); break;
        default: ZMOE_KERNEL_REQUIRE(false, "decode_attention: group must be 1, 2, 4, 8 or 16");
    }
}

}  // namespace

bool decode_attention_supported(int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim) {
    if (num_kv_heads <= 0 || num_q_heads % num_kv_heads != 0) return false;
    const int32_t group = num_q_heads / num_kv_heads;
    return (head_dim == 64 || head_dim == 128 || head_dim == 256) &&
           (group == 1 || group == 2 || group == 4 || group == 8 || group == 16);
}

int32_t decode_attention_splits(int32_t max_kv_len) {
    return std::max<int32_t>(1, (max_kv_len + kDecodeAttentionChunk - 1) / kDecodeAttentionChunk);
}

size_t decode_attention_workspace_bytes(int32_t num_seqs, int32_t num_q_heads, int32_t head_dim, int32_t num_splits) {
    return num_splits <= 1 ? 0 : size_t(num_seqs) * num_q_heads * num_splits * (head_dim + 2) * sizeof(float);
}

void launch_decode_attention(const decode_attention_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(decode_attention_supported(p.num_q_heads, p.num_kv_heads, p.head_dim),
                        "decode_attention: head_dim 64/128/256 and a group of 1, 2, 4, 8 or 16 query heads");
    ZMOE_KERNEL_REQUIRE(p.num_splits >= 1 && p.block_size > 0, "decode_attention: num_splits and block_size >= 1");
    ZMOE_KERNEL_REQUIRE(p.num_splits == 1 || p.workspace != nullptr, "decode_attention: split KV needs a workspace");
    if (p.num_seqs == 0) return;
    const int32_t group = p.num_q_heads / p.num_kv_heads;
    switch (p.head_dim) {
        case 64: launch_for_head_dim<64>(p, group, stream); break;
        case 128: launch_for_head_dim<128>(p, group, stream); break;
        default: launch_for_head_dim<256>(p, group, stream); break;
    }
    ZMOE_CUDA_CHECK_LAUNCH();
    if (p.num_splits > 1) {
        decode_attention_merge_kernel<<<dim3(p.num_seqs, p.num_q_heads), 128, 0, stream>>>(p);
        ZMOE_CUDA_CHECK_LAUNCH();
    }
}

}  // namespace zmoe::kernels
