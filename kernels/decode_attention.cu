// Paged attention for decode steps (one query token per sequence), split over the KV in fixed chunks of keys.
//
// One block per (sequence, KV head, chunk of kDecodeAttentionChunk keys); four warps take 32 keys at a time. Lane j
// owns key j of its warp's tile: it starts the copy of the key's V row into shared memory (cp.async), reads the K
// row (16-byte loads, all in flight) and scores every query head of the GQA group against it (q in shared memory,
// pre-scaled by scale * log2 e, read as broadcast float4). An online softmax in fp32 per head follows (warp max /
// sum; the probabilities go to shared memory), then the V phase: each lane owns head_dim / 32 output dimensions of
// every head of the group and reads the tile's V rows from shared memory. So a tile costs one memory round trip. The
// four warps' states are merged in warp order (deterministic); a sequence spanning several chunks writes (o, m, l) per
// chunk and a second kernel merges them in chunk order.

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

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

__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src));
}

/// Bytes of dynamic shared memory: each warp's V tile, [32 keys][head_dim + 8] bf16 (the pad spreads the rows'
/// 16-byte chunks over the banks).
template <int kHeadDim>
constexpr size_t v_tile_bytes() {
    return size_t(kWarps) * 32 * (kHeadDim + 8) * sizeof(bf16);
}

template <int kHeadDim, int kGroup>
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(const decode_attention_params p) {
    constexpr int kDL = kHeadDim / 32;                                // output dimensions per lane
    constexpr int kVStride = kHeadDim + 8;                            // bf16 per row of a V tile
    constexpr int kKeyBatch = kHeadDim / 8 < 16 ? kHeadDim / 8 : 16;  // K vectors in flight per lane
    __shared__ __align__(16) float q_s[kGroup][kHeadDim];
    __shared__ float o_s[kGroup][kHeadDim];
    __shared__ __align__(16) float p_s[kWarps][32][kGroup];
    __shared__ float m_s[kWarps][kGroup], l_s[kWarps][kGroup];
    __shared__ float m_tot[kGroup], l_tot[kGroup];
    extern __shared__ __align__(16) unsigned char smem[];

    const int32_t seq = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    bf16* v_s = reinterpret_cast<bf16*>(smem) + size_t(warp) * 32 * kVStride;
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
        // Lane j owns key t0 + j: its V row goes to shared memory (cp.async) while its K row is scored.
        const int32_t key = t0 + lane;
        const bool valid = key < k_end;
        float s[kGroup];
#pragma unroll
        for (int h = 0; h < kGroup; ++h) s[h] = 0.f;
        if (valid) {
            const size_t slot = size_t(table[key / p.block_size]) * p.block_size + key % p.block_size;
            const size_t row = (slot * p.num_kv_heads + kvh) * kHeadDim;
#pragma unroll
            for (int c = 0; c < kHeadDim / 8; ++c) cp_async_16(v_s + lane * kVStride + c * 8, p.v_cache + row + c * 8);
            const bf16* k = p.k_cache + row;
#pragma unroll
            for (int d0 = 0; d0 < kHeadDim; d0 += 8 * kKeyBatch) {
                detail::bf16x8 kv[kKeyBatch];
#pragma unroll
                for (int b = 0; b < kKeyBatch; ++b) kv[b] = *reinterpret_cast<const detail::bf16x8*>(k + d0 + b * 8);
#pragma unroll
                for (int b = 0; b < kKeyBatch; ++b) {
                    float kf[8];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float2 f = __bfloat1622float2(kv[b].h[e]);
                        kf[2 * e] = f.x, kf[2 * e + 1] = f.y;
                    }
                    const int d = d0 + b * 8;
#pragma unroll
                    for (int h = 0; h < kGroup; ++h) {
                        const float4 qa = *reinterpret_cast<const float4*>(&q_s[h][d]);
                        const float4 qb = *reinterpret_cast<const float4*>(&q_s[h][d + 4]);
                        s[h] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] +
                                qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
                    }
                }
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);

#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
            const float score = valid ? s[h] : -INFINITY;
            const float m_new = fmaxf(m[h], detail::warp_max(score));  // finite: lane 0's key is valid
            const float alpha = exp2f(m[h] - m_new);                   // 0 while m[h] is -inf
            const float pr = valid ? exp2f(score - m_new) : 0.f;
            p_s[warp][lane][h] = pr;
            l[h] = l[h] * alpha + detail::warp_sum(pr);
            m[h] = m_new;
#pragma unroll
            for (int i = 0; i < kDL; ++i) acc[h][i] *= alpha;
        }
        asm volatile("cp.async.wait_group 0;\n" ::);
        __syncwarp();

        const int32_t n_keys = min(32, k_end - t0);
#pragma unroll 4
        for (int j = 0; j < n_keys; ++j) {
            float v[kDL];
            load_bf16_n<kDL>(v_s + j * kVStride + lane * kDL, v);
#pragma unroll
            for (int h = 0; h < kGroup; ++h) {
                const float pj = p_s[warp][j][h];
#pragma unroll
                for (int i = 0; i < kDL; ++i) acc[h][i] += pj * v[i];
            }
        }
        __syncwarp();  // the next tile overwrites this warp's V rows and probabilities
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

template <int kHeadDim, int kGroup>
void launch_one(const decode_attention_params& p, cudaStream_t stream) {
    // Static and dynamic shared memory together pass 48 KB for the larger groups: always opt in.
    constexpr size_t smem = v_tile_bytes<kHeadDim>();
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(decode_attention_kernel<kHeadDim, kGroup>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    decode_attention_kernel<kHeadDim, kGroup>
        <<<dim3(p.num_seqs, p.num_kv_heads, p.num_splits), kThreads, smem, stream>>>(p);
}

template <int kHeadDim>
void launch_for_head_dim(const decode_attention_params& p, int32_t group, cudaStream_t stream) {
    switch (group) {
        case 1:
            launch_one<kHeadDim, 1>(p, stream);
            break;
        case 2:
            launch_one<kHeadDim, 2>(p, stream);
            break;
        case 4:
            launch_one<kHeadDim, 4>(p, stream);
            break;
        case 8:
            launch_one<kHeadDim, 8>(p, stream);
            break;
        case 16:
            launch_one<kHeadDim, 16>(p, stream);
            break;
        default:
            ZMOE_KERNEL_REQUIRE(false, "decode_attention: group must be 1, 2, 4, 8 or 16");
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
        case 64:
            launch_for_head_dim<64>(p, group, stream);
            break;
        case 128:
            launch_for_head_dim<128>(p, group, stream);
            break;
        default:
            launch_for_head_dim<256>(p, group, stream);
            break;
    }
    ZMOE_CUDA_CHECK_LAUNCH();
    if (p.num_splits > 1) {
        decode_attention_merge_kernel<<<dim3(p.num_seqs, p.num_q_heads), 128, 0, stream>>>(p);
        ZMOE_CUDA_CHECK_LAUNCH();
    }
}

}  // namespace zmoe::kernels
