// Paged attention for decode steps (one query token per sequence), split over the KV in chunks whose size depends on
// the sequence's length only (decode_attention_chunk), in one launch.
//
// Blocks of four warps over (split, KV head, sequence); a block runs chunks split, split + num_splits, ... of its
// sequence one after another (num_splits sized to the batch). The group's G query heads share every K/V row: a tile of
// keys is copied once into shared memory (cp.async, K and V in separate groups so that the V copy overlaps the
// scores, and the next tile's K copy overlaps this tile's PV), then
//   scores:  each thread scores one key against min(G, 4) heads, q read as fp32 broadcasts from shared memory;
//   softmax: online, in fp32 and base 2 (q is pre-scaled by scale * log2 e), warp w takes heads w, w + 4, ...;
//   PV:      each thread owns two output dimensions of min(G, 4) heads, reading the probabilities of its heads as
//            one broadcast vector per key.
// A sequence that fits one chunk writes its output directly. Otherwise every chunk writes (o, m, l) to the
// workspace and the block whose arrival completes its (sequence, KV head) merges them in chunk order
// (deterministic, and the same bits whatever the grid), then re-arms the counter. Launched programmatically
// dependent (pdl.cuh).

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/// Waits for all but the newest committed group of this thread's copies.
__device__ __forceinline__ void cp_async_wait_all_but_newest() { asm volatile("cp.async.wait_group 1;\n" ::); }

template <int kHeadDim, int kGroup>
struct tile_config {
    static constexpr int kTile = kHeadDim <= 128 ? 64 : 32;  // keys per shared-memory tile
    static constexpr int kStride = kHeadDim + 8;             // bf16 per K/V row in shared memory (bank spread)
    static constexpr int kHeads = kGroup < 4 ? kGroup : 4;   // heads per thread, scores and PV
    static constexpr int kHeadBlocks = kGroup / kHeads;
    static constexpr int kScoreItems = kTile * kHeadBlocks;  // (key, head block)
    static constexpr int kScorePerThread = (kScoreItems + kThreads - 1) / kThreads;
    static constexpr int kPvItems = kHeadBlocks * (kHeadDim / 2);  // (head block, dimension pair)
    static constexpr int kPvPerThread = (kPvItems + kThreads - 1) / kThreads;
    // Dynamic shared memory, bytes: K tile [kTile][kStride] bf16 | V tile [kTile][kStride] bf16 |
    // q [kGroup][kHeadDim] fp32 | probabilities [kTile][kGroup] fp32.
    static constexpr size_t kKvBytes = size_t(kTile) * kStride * 2;
    static constexpr size_t kQBytes = size_t(kGroup) * kHeadDim * 4;
    static constexpr size_t kPBytes = size_t(kTile) * kGroup * 4;
    static constexpr size_t kSmemBytes = 2 * kKvBytes + kQBytes + kPBytes;
    static_assert(kKvBytes % 16 == 0 && kQBytes % 16 == 0, "16-byte aligned regions");
    static_assert(kHeadDim / 2 >= 32, "a warp's PV items share one head block");
};

template <int kHeadDim, int kGroup>
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(const decode_attention_params p) {
    using C = tile_config<kHeadDim, kGroup>;
    constexpr int kHeads = C::kHeads, kTile = C::kTile, kStride = C::kStride;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* k_s = reinterpret_cast<bf16*>(smem);
    bf16* v_s = reinterpret_cast<bf16*>(smem + C::kKvBytes);
    float* q_s = reinterpret_cast<float*>(smem + 2 * C::kKvBytes);
    float* p_s = reinterpret_cast<float*>(smem + 2 * C::kKvBytes + C::kQBytes);
    __shared__ float m_run[kGroup], l_run[kGroup], alpha_s[kGroup];
    __shared__ float chunk_w[kGroup][kDecodeAttentionMaxChunks];  // merge: 2^(m_c - M) per head and chunk
    __shared__ float inv_sum[kGroup];
    __shared__ int32_t slot_s[C::kTile];  // the cache slot of each key of the tile being copied
    __shared__ bool merge_here;

    detail::pdl_wait();  // the query and this step's K/V rows come from the kernel before
    detail::pdl_launch_dependents();
    const int32_t split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t kv_len = p.start_pos[seq] + 1;
    const int32_t chunk = decode_attention_chunk(kv_len);
    const int32_t num_chunks = (kv_len + chunk - 1) / chunk;
    if (num_chunks > p.max_chunks) __trap();  // max_chunks below decode_attention_splits(kv_len)
    if (split >= num_chunks) return;          // an idle block: this sequence has fewer chunks than the grid
    const int32_t* table = p.block_tables + size_t(seq) * p.max_blocks_per_seq;
    const size_t head0 = size_t(seq) * p.num_q_heads + size_t(kvh) * kGroup;  // the group's first query head
    // A chunk's unnormalised state when the sequence has several: [num_seqs * num_q_heads][max_chunks][head_dim + 2].
    const size_t row = kHeadDim + 2;
    auto part = [&](int head, int32_t c) { return p.workspace + ((head0 + head) * p.max_chunks + c) * row; };

    const float scale_log2 = p.scale * 1.4426950408889634f;
    for (int i = threadIdx.x; i < kGroup * kHeadDim; i += kThreads)
        q_s[i] = __bfloat162float(p.q[head0 * kHeadDim + i]) * scale_log2;

    // This block's chunks: split, split + num_splits, ... (the chunking depends on kv_len only, the grid does not).
    int32_t my_chunks = 0;
    for (int32_t c = split; c < num_chunks; c += p.num_splits, ++my_chunks) {
        const int32_t k_begin = c * chunk, k_end = min(kv_len, k_begin + chunk);
        // The cache slots of a tile's keys, one block-table read per key, all in flight at once (the copies then
        // issue back to back instead of each waiting on its table read).
        auto find_slots = [&](int32_t t0) {
            for (int j = threadIdx.x; j < min(kTile, k_end - t0); j += kThreads) {
                const int32_t key = t0 + j;
                slot_s[j] = table[key / p.block_size] * p.block_size + key % p.block_size;
            }
            __syncthreads();
        };
        auto load_tile = [&](bf16* dst, const bf16* cache, int32_t t0) {  // the tile of find_slots(t0)
            const int32_t n = min(kTile, k_end - t0);
            for (int i = threadIdx.x; i < n * (kHeadDim / 8); i += kThreads) {
                const int j = i / (kHeadDim / 8), piece = i % (kHeadDim / 8);
                cp_async_16(dst + j * kStride + piece * 8,
                            cache + (size_t(slot_s[j]) * p.num_kv_heads + kvh) * kHeadDim + piece * 8);
            }
            cp_async_commit();
        };
        find_slots(k_begin);
        load_tile(k_s, p.k_cache, k_begin);
        load_tile(v_s, p.v_cache, k_begin);
        if (threadIdx.x < kGroup) m_run[threadIdx.x] = -INFINITY, l_run[threadIdx.x] = 0.f;

        float acc[C::kPvPerThread][kHeads][2];
#pragma unroll
        for (int r = 0; r < C::kPvPerThread; ++r)
#pragma unroll
            for (int h = 0; h < kHeads; ++h) acc[r][h][0] = acc[r][h][1] = 0.f;

        for (int32_t t0 = k_begin; t0 < k_end; t0 += kTile) {
            const int32_t n = min(kTile, k_end - t0);
            const bool more = t0 + kTile < k_end;
            cp_async_wait_all_but_newest();  // this tile's K (its V may still be in flight)
            __syncthreads();

            // Scores of (key j, heads hb * kHeads ...) into p_s[j][h].
#pragma unroll
            for (int r = 0; r < C::kScorePerThread; ++r) {
                const int item = threadIdx.x + r * kThreads;
                const int j = item % kTile, hb = item / kTile;
                if (item >= C::kScoreItems || j >= n) continue;
                float s[kHeads];
#pragma unroll
                for (int h = 0; h < kHeads; ++h) s[h] = 0.f;
                const bf16* krow = k_s + j * kStride;
                const float* q0 = q_s + hb * kHeads * kHeadDim;
#pragma unroll 4
                for (int d = 0; d < kHeadDim; d += 8) {
                    float kf[8];
                    detail::load_f32x8(krow + d, kf);
#pragma unroll
                    for (int h = 0; h < kHeads; ++h) {
                        const float4 qa = *reinterpret_cast<const float4*>(q0 + h * kHeadDim + d);
                        const float4 qb = *reinterpret_cast<const float4*>(q0 + h * kHeadDim + d + 4);
                        s[h] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] +
                                qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
                    }
                }
#pragma unroll
                for (int h = 0; h < kHeads; ++h) p_s[j * kGroup + hb * kHeads + h] = s[h];
            }
            __syncthreads();

            // Online softmax over the tile's n keys, one warp per head.
            for (int h = warp; h < kGroup; h += kWarps) {
                float mx = -INFINITY;
                for (int j = lane; j < n; j += 32) mx = fmaxf(mx, p_s[j * kGroup + h]);
                mx = detail::warp_max(mx);
                const float m_old = m_run[h];
                const float m_new = fmaxf(m_old, mx);  // finite: the tile holds at least one key
                float sum = 0.f;
                for (int j = lane; j < n; j += 32) {
                    const float e = exp2f(p_s[j * kGroup + h] - m_new);
                    p_s[j * kGroup + h] = e;
                    sum += e;
                }
                sum = detail::warp_sum(sum);
                if (lane == 0) {
                    const float a = exp2f(m_old - m_new);  // 0 on the first tile (m_old = -inf)
                    alpha_s[h] = a;
                    l_run[h] = l_run[h] * a + sum;
                    m_run[h] = m_new;
                }
            }
            __syncthreads();  // probabilities ready; the K tile and the slots are free (this tile's V is issued)
            if (more) {
                find_slots(t0 + kTile);
                load_tile(k_s, p.k_cache, t0 + kTile);
            } else {
                cp_async_commit();  // an empty group keeps the count uniform
            }
            cp_async_wait_all_but_newest();  // this tile's V
            __syncthreads();

            // PV: (head block hb, dimensions 2 pair, 2 pair + 1).
#pragma unroll
            for (int r = 0; r < C::kPvPerThread; ++r) {
                const int item = threadIdx.x + r * kThreads;
                if (item >= C::kPvItems) continue;
                const int pair = item % (kHeadDim / 2), hb = item / (kHeadDim / 2);
#pragma unroll
                for (int h = 0; h < kHeads; ++h) {
                    const float a = alpha_s[hb * kHeads + h];
                    acc[r][h][0] *= a;
                    acc[r][h][1] *= a;
                }
                const bf16* vcol = v_s + pair * 2;
                const float* pcol = p_s + hb * kHeads;
#pragma unroll 4
                for (int j = 0; j < n; ++j) {
                    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(vcol + j * kStride));
                    float pr[kHeads];
                    if constexpr (kHeads == 4) {
                        const float4 p4 = *reinterpret_cast<const float4*>(pcol + j * kGroup);
                        pr[0] = p4.x, pr[1] = p4.y, pr[2] = p4.z, pr[3] = p4.w;
                    } else {
#pragma unroll
                        for (int h = 0; h < kHeads; ++h) pr[h] = pcol[j * kGroup + h];
                    }
#pragma unroll
                    for (int h = 0; h < kHeads; ++h) {
                        acc[r][h][0] += pr[h] * v.x;
                        acc[r][h][1] += pr[h] * v.y;
                    }
                }
            }
            __syncthreads();  // the V tile and the probabilities are free
            if (more)
                load_tile(v_s, p.v_cache, t0 + kTile);  // the slots of find_slots(t0 + kTile)
            else
                cp_async_commit();
        }

        // One chunk: the output itself. Several: this chunk's state.
#pragma unroll
        for (int r = 0; r < C::kPvPerThread; ++r) {
            const int item = threadIdx.x + r * kThreads;
            if (item >= C::kPvItems) continue;
            const int pair = item % (kHeadDim / 2), hb = item / (kHeadDim / 2);
#pragma unroll
            for (int h = 0; h < kHeads; ++h) {
                const int head = hb * kHeads + h;
                if (num_chunks == 1) {
                    const float inv = 1.f / l_run[head];  // > 0: the chunk holds a key
                    *reinterpret_cast<__nv_bfloat162*>(p.out + (head0 + head) * kHeadDim + pair * 2) =
                        __floats2bfloat162_rn(acc[r][h][0] * inv, acc[r][h][1] * inv);
                } else {
                    *reinterpret_cast<float2*>(part(head, c) + pair * 2) = make_float2(acc[r][h][0], acc[r][h][1]);
                }
            }
        }
        if (num_chunks > 1 && threadIdx.x < kGroup) {
            part(threadIdx.x, c)[kHeadDim] = m_run[threadIdx.x];
            part(threadIdx.x, c)[kHeadDim + 1] = l_run[threadIdx.x];
        }
        __syncthreads();  // m_run / l_run are read above before the next chunk resets them
    }
    if (num_chunks == 1) return;

    // Publish the states, then count arrivals: the block whose chunks complete the count merges (threadfence
    // reduction), in chunk order.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t* counter = p.merge_counters + size_t(seq) * p.num_kv_heads + kvh;
        const int32_t arrived = atomicAdd(counter, my_chunks) + my_chunks;
        merge_here = arrived == num_chunks;
        if (merge_here) atomicExch(counter, 0);  // every chunk of this launch has counted: re-arm for the next
    }
    __syncthreads();
    if (!merge_here) return;
    __threadfence();

    if (threadIdx.x < kGroup) {
        const int h = threadIdx.x;
        float mx = -INFINITY;
        for (int32_t c = 0; c < num_chunks; ++c) mx = fmaxf(mx, __ldcg(part(h, c) + kHeadDim));
        float sum = 0.f;
        for (int32_t c = 0; c < num_chunks; ++c) {
            const float w = exp2f(__ldcg(part(h, c) + kHeadDim) - mx);
            chunk_w[h][c] = w;
            sum += __ldcg(part(h, c) + kHeadDim + 1) * w;
        }
        inv_sum[h] = 1.f / sum;
    }
    __syncthreads();
    for (int item = threadIdx.x; item < kGroup * (kHeadDim / 2); item += kThreads) {
        const int h = item / (kHeadDim / 2), pair = item % (kHeadDim / 2);
        float o0 = 0.f, o1 = 0.f;
        for (int32_t c = 0; c < num_chunks; ++c) {
            const float2 o = __ldcg(reinterpret_cast<const float2*>(part(h, c) + pair * 2));
            o0 += o.x * chunk_w[h][c];
            o1 += o.y * chunk_w[h][c];
        }
        *reinterpret_cast<__nv_bfloat162*>(p.out + (head0 + h) * kHeadDim + pair * 2) =
            __floats2bfloat162_rn(o0 * inv_sum[h], o1 * inv_sum[h]);
    }
}

template <int kHeadDim, int kGroup>
void launch_one(const decode_attention_params& p, cudaStream_t stream) {
    constexpr size_t smem = tile_config<kHeadDim, kGroup>::kSmemBytes;
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(decode_attention_kernel<kHeadDim, kGroup>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    detail::launch_pdl(decode_attention_kernel<kHeadDim, kGroup>, dim3(p.num_splits, p.num_kv_heads, p.num_seqs),
                       dim3(kThreads), smem, stream, p);
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

int32_t decode_attention_grid_splits(int32_t num_seqs, int32_t num_kv_heads, int32_t max_chunks) {
    // Enough blocks to fill the GPU a few times over, no more: a block runs its chunks one after another, so few
    // sequences split wide and many do not pay for idle blocks.
    constexpr int64_t kTargetBlocks = 1024;
    const int64_t pairs = std::max<int64_t>(int64_t(num_seqs) * num_kv_heads, 1);
    return int32_t(std::clamp<int64_t>((kTargetBlocks + pairs - 1) / pairs, 1, std::max(max_chunks, 1)));
}

int32_t decode_attention_splits(int32_t max_kv_len) {
    // Up to kDecodeAttentionMaxChunks * kDecodeAttentionMinChunk keys every chunk is the minimum, so the count
    // grows with the length; beyond, it stays at most kDecodeAttentionMaxChunks.
    const int32_t chunks = (max_kv_len + kDecodeAttentionMinChunk - 1) / kDecodeAttentionMinChunk;
    return std::clamp<int32_t>(chunks, 1, kDecodeAttentionMaxChunks);
}

size_t decode_attention_workspace_bytes(int32_t num_seqs, int32_t num_q_heads, int32_t head_dim, int32_t max_chunks) {
    return max_chunks <= 1 ? 0 : size_t(num_seqs) * num_q_heads * max_chunks * (head_dim + 2) * sizeof(float);
}

void launch_decode_attention(const decode_attention_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(decode_attention_supported(p.num_q_heads, p.num_kv_heads, p.head_dim),
                        "decode_attention: head_dim 64/128/256 and a group of 1, 2, 4, 8 or 16 query heads");
    ZMOE_KERNEL_REQUIRE(
        p.max_chunks >= 1 && p.max_chunks <= kDecodeAttentionMaxChunks && p.num_splits >= 1 && p.block_size > 0,
        "decode_attention: max_chunks in [1, kDecodeAttentionMaxChunks], num_splits, block_size >= 1");
    ZMOE_KERNEL_REQUIRE(p.max_chunks == 1 || (p.workspace != nullptr && p.merge_counters != nullptr),
                        "decode_attention: split KV needs a workspace and merge counters");
    ZMOE_KERNEL_REQUIRE(p.num_seqs <= 65535, "decode_attention: at most 65535 sequences");
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
}

}  // namespace zmoe::kernels
