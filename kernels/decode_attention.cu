// Paged attention for decode steps (one query token per sequence), split over the KV (flash-decoding), on tensor
// cores, in two launches: the chunks, then their combine.
//
// The split is chosen by the step's shape: num_splits blocks per (sequence, KV head) (decode_attention_splits: about
// one wave of blocks for the batch, so a few long sequences still fill the GPU), and a sequence's keys are cut into at
// most num_splits chunks of decode_attention_chunk(kv_len, num_splits) keys, one chunk a block. The chunking is a
// function of the sequence's length and the launch's num_splits only, so a graph captured for a batch size serves every
// KV length, and the result does not depend on the other sequences of the batch.
//
// Chunk pass: blocks of four warps over (chunk, KV head, sequence). Inside a chunk, warp w takes the 16-key tiles w,
// w + 4, ... and runs them on its own, with no block barrier:
//   loads:   a kStages-deep cp.async pipeline per warp into the warp's own shared memory (K and V of one tile per
//            stage, keys past the chunk zero-filled); the block-table reads for a tile are issued a tile ahead;
//   scores:  S = Q K^T with mma.sync m16n8k16 (BF16 in, fp32 accumulate): the M side holds the group's query heads
//            (rows past the group are zero), N the tile's 16 keys, K the head dimension; Q stays in registers;
//   softmax: online, in fp32 and base 2, on the accumulator registers (a row's four lanes reduce by shuffles);
//   PV:      O += P V with the probabilities rounded to BF16 as the A operand straight from the score registers, V
//            read transposed by ldmatrix.
// The four warps' states then meet in shared memory and merge in warp order. A sequence of one chunk writes its output
// directly; otherwise each chunk writes its normalised output and its log-sum-exp (base 2) to the workspace.
// Combine pass (only when num_splits > 1): one block per (query head, sequence) weighs the chunks' outputs by their
// log-sum-exps, in chunk order (deterministic). Both launched programmatically dependent (pdl.cuh); for one sequence
// (variant combine_early, decode_tuning.hpp, the default there) the combine lets the next kernel launch before it
// waits for the chunk pass (H100, 32 000 tokens, with gemv_wave: 5.05 -> 4.91 ms a step at batch 1; at batch 4 the
// pair cost ~0.26 ms, so there the combine triggers after its wait).

#include <algorithm>
#include <type_traits>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/decode_attention.hpp"
#include "kernels/decode_tuning.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/mma_sm80.cuh"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int32_t kSplitRound = 8;  // decode_attention_splits: from this many splits up, a multiple of it
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = 16;  // keys per warp tile: the K side of one PV MMA, the N side of two QK^T MMAs
static_assert(kDecodeAttentionMinChunk % (kWarps * kKeys) == 0 && kDecodeAttentionChunkAlign % (kWarps * kKeys) == 0,
              "a full chunk gives every warp whole tiles");

/// 16 bytes global -> shared, asynchronously; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/// Waits until at most kPending of this thread's newest committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

/// Four 8x8 BF16 matrices from shared memory (lanes 8i..8i+7 give matrix i's row addresses), plain or transposed.
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* row) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
    if constexpr (kTrans)
        detail::ldmatrix_x4_trans(a, r);
    else
        detail::ldmatrix_x4(a, r);
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

/// The bits of two adjacent BF16 values of row `row` (zero for a row past the group: an MMA row with no head).
template <int kGroup>
__device__ __forceinline__ uint32_t load_pair(const bf16* q, int row, int col, int head_dim) {
    return row < kGroup ? *reinterpret_cast<const uint32_t*>(q + row * head_dim + col) : 0u;
}

template <int kHeadDim, int kStageCount>
struct tile_config {
    static constexpr int kStages = kStageCount;   // tiles in flight per warp
    static constexpr int kStride = kHeadDim + 8;  // bf16 per K/V row in shared memory: ldmatrix rows hit distinct banks
    static constexpr int kTileElems = kKeys * kStride;
    static constexpr int kOStride = kHeadDim + 8;  // fp32 per row of a warp's output state
    // Dynamic shared memory, bytes: per warp [kStages][K tile, V tile][kKeys][kStride] bf16; once a warp's tiles are
    // done its region holds its output state [16][kOStride] fp32 (rows past the group unused).
    static constexpr size_t kWarpBytes = size_t(kStages) * 2 * kTileElems * 2;
    static constexpr size_t kSmemBytes = kWarps * kWarpBytes;
    static_assert(size_t(16) * kOStride * 4 <= kWarpBytes, "the output state fits the warp's tile buffers");
    static_assert(kWarpBytes % 16 == 0 && (kStride * 2) % 16 == 0, "16-byte aligned rows");
};

/// The workspace of a split launch: per (sequence, query head, chunk) the chunk's normalised output, then its
/// log-sum-exp (base 2, of the scaled scores).
struct split_state {
    float* o;    // [num_seqs, num_q_heads, num_splits, head_dim]
    float* lse;  // [num_seqs, num_q_heads, num_splits]
    __device__ __forceinline__ static split_state of(const decode_attention_params& p) {
        const size_t rows = size_t(p.num_seqs) * p.num_q_heads * p.num_splits;
        return {p.workspace, p.workspace + rows * p.head_dim};
    }
};

template <int kHeadDim, int kGroup, int kStageCount>
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(const decode_attention_params p) {
    using C = tile_config<kHeadDim, kStageCount>;
    constexpr int kStages = C::kStages, kStride = C::kStride, kTileElems = C::kTileElems;
    constexpr int kDimSteps = kHeadDim / 16;  // K steps of QK^T
    constexpr int kDimTiles = kHeadDim / 8;   // N tiles of PV
    constexpr int kPieces = kHeadDim / 8;     // 16-byte pieces per K/V row
    static_assert(kGroup <= 16, "the group fits the M side of one MMA");
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float m_warp[kWarps][16], l_warp[kWarps][16];  // each warp's running max and sum per head

    // The lengths and block tables are the host's (copied before the step); the keys before the newest were written by
    // earlier steps: this block's first tiles of them load before the programmatic wait, under the kernels before.
    const int32_t c = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int32_t kv_len = p.start_pos[seq] + 1;
    const int32_t chunk = decode_attention_chunk(kv_len, p.num_splits);
    const int32_t num_chunks = (kv_len + chunk - 1) / chunk;  // <= num_splits
    if (c >= num_chunks) {                                    // an idle block: a short sequence has fewer chunks
        detail::pdl_wait();
        detail::pdl_launch_dependents();
        return;
    }
    const int32_t* table = p.block_tables + size_t(seq) * p.max_blocks_per_seq;
    const size_t head0 = size_t(seq) * p.num_q_heads + size_t(kvh) * kGroup;  // the group's first query head
    bf16* tiles = reinterpret_cast<bf16*>(smem + warp * C::kWarpBytes);
    const float scale_log2 = p.scale * 1.4426950408889634f;

    const int32_t k_begin = c * chunk, k_end = min(kv_len, k_begin + chunk);
    const int32_t num_tiles = (k_end - k_begin + kKeys - 1) / kKeys;
    const int32_t my_tiles = num_tiles > warp ? (num_tiles - warp + kWarps - 1) / kWarps : 0;
    auto tile_key = [&](int32_t i) { return k_begin + (warp + i * kWarps) * kKeys; };  // the warp's i-th tile
    // Lane j (and j + 16): the cache slot of key j of the warp's i-th tile, -1 past the chunk.
    auto find_slot = [&](int32_t i) {
        const int32_t key = tile_key(i) + lane % kKeys;
        return i < my_tiles && key < k_end ? table[key / p.block_size] * p.block_size + key % p.block_size : -1;
    };
    auto load_tile = [&](int32_t i, int32_t slot) {  // tile i into stage i % kStages, with find_slot(i)'s slots
        bf16* k_s = tiles + (i % kStages) * 2 * kTileElems;
#pragma unroll
        for (int r = 0; r < kKeys * kPieces / 32; ++r) {
            const int idx = lane + r * 32, j = idx / kPieces, piece = idx % kPieces;
            const int32_t s = __shfl_sync(detail::kFullMask, slot, j);
            const size_t off = (size_t(max(s, 0)) * p.num_kv_heads + kvh) * kHeadDim + piece * 8;
            cp_async_16(k_s + j * kStride + piece * 8, p.k_cache + off, s >= 0);
            cp_async_16(k_s + kTileElems + j * kStride + piece * 8, p.v_cache + off, s >= 0);
        }
    };
    int32_t first_slots[kStages];
#pragma unroll
    for (int s = 0; s < kStages; ++s) first_slots[s] = find_slot(s);  // all table reads in flight at once
    // A first tile wholly before the newest key loads now (uncommitted: it joins group 0, which tile 0's wait covers,
    // so every tile is still in a group no later than its own); one holding the newest key after the wait.
    bool early[kStages];
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
        early[s] = s < my_tiles && tile_key(s) + kKeys <= kv_len - 1;
        if (early[s]) load_tile(s, first_slots[s]);
    }

    detail::pdl_wait();  // the query and the newest key's K/V row come from the kernel before
    detail::pdl_launch_dependents();
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
        if (s < my_tiles && !early[s]) load_tile(s, first_slots[s]);
        cp_async_commit();  // empty groups keep the count uniform
    }
    int32_t next_slot = find_slot(kStages);

    // Q as the A operand: row g is head g, row g + 8 head g + 8, for every K step of the head dimension.
    uint32_t qa[kDimSteps][4];
    const bf16* q = p.q + head0 * kHeadDim;
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
        const int col = ks * 16 + 2 * t;
        qa[ks][0] = load_pair<kGroup>(q, g, col, kHeadDim);
        qa[ks][1] = load_pair<kGroup>(q, g + 8, col, kHeadDim);
        qa[ks][2] = load_pair<kGroup>(q, g, col + 8, kHeadDim);
        qa[ks][3] = load_pair<kGroup>(q, g + 8, col + 8, kHeadDim);
    }

    float o[kDimTiles][4];  // rows g, g + 8 (heads) x dimensions 8 n + 2 t, + 1
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m_row[2] = {-INFINITY, -INFINITY}, l_row[2] = {0.f, 0.f};  // rows g, g + 8; l: this lane's keys only

    for (int32_t i = 0; i < my_tiles; ++i) {
        cp_async_wait<kStages - 1>();
        __syncwarp();  // every lane's copies of tile i have landed
        const bf16* k_s = tiles + (i % kStages) * 2 * kTileElems;
        const bf16* v_s = k_s + kTileElems;

        // Scores: keys 0-7 and 8-15 of the tile, two N tiles; ldmatrix matrices (keys 0-7 | 8-15) x (dims +0 | +8).
        float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        const bf16* k_row = k_s + ((lane & 7) + (lane >> 4) * 8) * kStride + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int ks = 0; ks < kDimSteps; ++ks) {
            uint32_t b[4];
            ldmatrix_x4<false>(b, k_row + ks * 16);
            detail::mma_bf16_16816(s[0], qa[ks], b[0], b[1]);
            detail::mma_bf16_16816(s[1], qa[ks], b[2], b[3]);
        }

        // Online softmax on the registers: s[n][e] is row g + 8 (e / 2), key 8 n + 2 t + e % 2.
        const int32_t key0 = tile_key(i);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[n][e] = key0 + n * 8 + 2 * t + (e & 1) < k_end ? s[n][e] * scale_log2 : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
            }
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(detail::kFullMask, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(detail::kFullMask, mx[r], 2));
            const float m_new = fmaxf(m_row[r], mx[r]);  // finite: the tile holds at least one key
            alpha[r] = exp2f(m_row[r] - m_new);          // 0 on the first tile (m_row = -inf)
            m_row[r] = m_new;
            l_row[r] *= alpha[r];
        }
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[n][e] = exp2f(s[n][e] - m_row[e >> 1]);
                l_row[e >> 1] += s[n][e];
            }
#pragma unroll
        for (int n = 0; n < kDimTiles; ++n) {
            o[n][0] *= alpha[0], o[n][1] *= alpha[0];
            o[n][2] *= alpha[1], o[n][3] *= alpha[1];
        }

        // PV: the score accumulators are the A operand's layout (rows g, g + 8; keys 2 t, + 1 and 8 + 2 t, + 1).
        const uint32_t pa[4] = {pack_bf16x2(s[0][0], s[0][1]), pack_bf16x2(s[0][2], s[0][3]),
                                pack_bf16x2(s[1][0], s[1][1]), pack_bf16x2(s[1][2], s[1][3])};
        // ldmatrix.trans matrices: (keys 0-7 | 8-15) x (dims +0 | +8) of a 16-dimension slice.
        const bf16* v_row = v_s + ((lane & 7) + ((lane >> 3) & 1) * 8) * kStride + (lane >> 4) * 8;
#pragma unroll
        for (int n = 0; n < kDimTiles; n += 2) {
            uint32_t b[4];
            ldmatrix_x4<true>(b, v_row + n * 8);
            detail::mma_bf16_16816(o[n], pa, b[0], b[1]);
            detail::mma_bf16_16816(o[n + 1], pa, b[2], b[3]);
        }

        __syncwarp();  // every lane has read this stage before it is refilled
        if (i + kStages < my_tiles) load_tile(i + kStages, next_slot);
        cp_async_commit();
        next_slot = find_slot(i + kStages + 1);  // read now, used one tile later
    }
    cp_async_wait<0>();  // only empty groups are left; the region now holds the output state
    __syncwarp();

    // This warp's state: (m, l) per head and o [16][kOStride] fp32 in its own region.
    float* o_s = reinterpret_cast<float*>(tiles);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l_row[r] += __shfl_xor_sync(detail::kFullMask, l_row[r], 1);
        l_row[r] += __shfl_xor_sync(detail::kFullMask, l_row[r], 2);
        const int head = g + 8 * r;
        if (head >= kGroup) continue;
        if (t == 0) m_warp[warp][head] = m_row[r], l_warp[warp][head] = l_row[r];
#pragma unroll
        for (int n = 0; n < kDimTiles; ++n)
            *reinterpret_cast<float2*>(o_s + head * C::kOStride + n * 8 + 2 * t) =
                make_float2(o[n][2 * r], o[n][2 * r + 1]);
    }
    __syncthreads();

    // The warps' states merged in warp order (a warp without tiles has m = -inf, l = 0, o = 0), normalised: the output
    // when the sequence is one chunk, else this chunk's state.
    const split_state ws = split_state::of(p);
    for (int item = threadIdx.x; item < kGroup * (kHeadDim / 2); item += kThreads) {
        const int head = item / (kHeadDim / 2), col = item % (kHeadDim / 2) * 2;
        float m = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) m = fmaxf(m, m_warp[w][head]);
        float o0 = 0.f, o1 = 0.f, l = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const float wt = exp2f(m_warp[w][head] - m);
            const float2 ow = *reinterpret_cast<const float2*>(
                reinterpret_cast<const float*>(smem + w * C::kWarpBytes) + head * C::kOStride + col);
            o0 += ow.x * wt, o1 += ow.y * wt, l += l_warp[w][head] * wt;
        }
        const float inv = 1.f / l;  // > 0: the chunk holds a key
        if (num_chunks == 1) {
            *reinterpret_cast<__nv_bfloat162*>(p.out + (head0 + head) * kHeadDim + col) =
                __floats2bfloat162_rn(o0 * inv, o1 * inv);
        } else {
            const size_t r = (head0 + head) * p.num_splits + c;
            *reinterpret_cast<float2*>(ws.o + r * kHeadDim + col) = make_float2(o0 * inv, o1 * inv);
            if (col == 0) ws.lse[r] = m + __log2f(l);
        }
    }
}

constexpr int kCombineThreads = 128;

/// One block per (query head, sequence): out = sum_c 2^(lse_c - M) o_c / sum_c 2^(lse_c - M), chunks in order.
template <int kHeadDim, bool kEarlyLaunch>
__global__ void __launch_bounds__(kCombineThreads) decode_attention_combine_kernel(const decode_attention_params p) {
    constexpr int kCols = kHeadDim / 4;              // float4 columns of a row
    constexpr int kLanes = kCombineThreads / kCols;  // threads that share a column, each over every kLanes-th chunk
    constexpr int kEarly = 8;                        // a thread's chunks loaded before the weights are known
    static_assert(kCombineThreads % kCols == 0, "whole columns per block");
    __shared__ float weight[kDecodeAttentionMaxSplits];
    __shared__ float reduce[kCombineThreads / 32];
    __shared__ float4 partial[kLanes][kCols];

    // combine_early: the next kernel (the O projection) may launch now, under the chunk pass: it waits for this whole
    // launch before it reads the output, and meanwhile loads its weights into registers (gemv_bf16, gemv_wave) while
    // the chunk pass streams the KV.
    if constexpr (kEarlyLaunch) detail::pdl_launch_dependents();
    detail::pdl_wait();  // the chunk pass's states
    if constexpr (!kEarlyLaunch) detail::pdl_launch_dependents();
    const int32_t head = blockIdx.x, seq = blockIdx.y;
    const int32_t kv_len = p.start_pos[seq] + 1;
    const int32_t chunk = decode_attention_chunk(kv_len, p.num_splits);
    const int32_t num_chunks = (kv_len + chunk - 1) / chunk;
    if (num_chunks == 1) return;  // the chunk pass wrote the output
    const split_state ws = split_state::of(p);
    const size_t row = size_t(seq) * p.num_q_heads + head;
    const float* lse = ws.lse + row * p.num_splits;
    const float* o = ws.o + row * p.num_splits * kHeadDim;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    // Column col of chunks k, k + kLanes, ...: the first kEarly of them load now, beside the log-sum-exps (one L2 round
    // trip for both rather than one after the other).
    const int col = threadIdx.x % kCols, k = threadIdx.x / kCols;
    float4 early[kEarly];
#pragma unroll
    for (int e = 0; e < kEarly; ++e) {
        const int32_t c = k + e * kLanes;
        early[e] = c < num_chunks ? __ldcg(reinterpret_cast<const float4*>(o + size_t(c) * kHeadDim) + col)
                                  : make_float4(0.f, 0.f, 0.f, 0.f);
    }

    // The largest log-sum-exp, then each chunk's weight and their sum (fixed reduction order: deterministic).
    float mx = -INFINITY;
    for (int32_t c = threadIdx.x; c < num_chunks; c += kCombineThreads) mx = fmaxf(mx, __ldcg(lse + c));
#pragma unroll
    for (int d = 16; d > 0; d /= 2) mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, d));
    if (lane == 0) reduce[warp] = mx;
    __syncthreads();
    mx = reduce[0];
#pragma unroll
    for (int w = 1; w < kCombineThreads / 32; ++w) mx = fmaxf(mx, reduce[w]);
    __syncthreads();  // reduce[] is reused below
    float sum = 0.f;
    for (int32_t c = threadIdx.x; c < num_chunks; c += kCombineThreads) {
        const float w = exp2f(__ldcg(lse + c) - mx);
        weight[c] = w;
        sum += w;
    }
#pragma unroll
    for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(detail::kFullMask, sum, d);
    if (lane == 0) reduce[warp] = sum;
    __syncthreads();
    sum = 0.f;
#pragma unroll
    for (int w = 0; w < kCombineThreads / 32; ++w) sum += reduce[w];
    const float inv = 1.f / sum;

    // The early chunks, then the rest as independent loads, several in flight per thread; in chunk order.
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int e = 0; e < kEarly; ++e) {
        const int32_t c = k + e * kLanes;
        if (c >= num_chunks) break;
        const float w = weight[c];
        acc.x += early[e].x * w, acc.y += early[e].y * w, acc.z += early[e].z * w, acc.w += early[e].w * w;
    }
#pragma unroll 4
    for (int32_t c = k + kEarly * kLanes; c < num_chunks; c += kLanes) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(o + size_t(c) * kHeadDim) + col);
        const float w = weight[c];
        acc.x += v.x * w, acc.y += v.y * w, acc.z += v.z * w, acc.w += v.w * w;
    }
    partial[k][col] = acc;
    __syncthreads();
    if (k != 0) return;
#pragma unroll
    for (int j = 1; j < kLanes; ++j) {
        const float4 v = partial[j][col];
        acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
    }
    __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(p.out + row * kHeadDim) + 2 * col;
    out[0] = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
    out[1] = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
}

template <int kHeadDim, int kGroup, int kStageCount>
void launch_chunks(const decode_attention_params& p, cudaStream_t stream) {
    constexpr size_t smem = tile_config<kHeadDim, kStageCount>::kSmemBytes;
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(decode_attention_kernel<kHeadDim, kGroup, kStageCount>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    detail::launch_pdl(decode_attention_kernel<kHeadDim, kGroup, kStageCount>,
                       dim3(p.num_splits, p.num_kv_heads, p.num_seqs), dim3(kThreads), smem, stream, p);
}

template <int kHeadDim, int kGroup>
void launch_one(const decode_attention_params& p, int32_t stages, cudaStream_t stream) {
    if constexpr (kHeadDim <= 128) {
        if (stages == 4)
            launch_chunks<kHeadDim, kGroup, 4>(p, stream);
        else
            launch_chunks<kHeadDim, kGroup, 2>(p, stream);
    } else {
        launch_chunks<kHeadDim, kGroup, 2>(p, stream);
    }
    if (p.num_splits > 1) {
        const bool early = p.num_seqs == 1 && current_decode_tuning().combine_early;
        const auto combine =
            early ? decode_attention_combine_kernel<kHeadDim, true> : decode_attention_combine_kernel<kHeadDim, false>;
        detail::launch_pdl(combine, dim3(p.num_q_heads, p.num_seqs), dim3(kCombineThreads), 0, stream, p);
    }
}

template <int kValue>
using int_c = std::integral_constant<int, kValue>;

/// fn(int_c<kHeadDim>, int_c<kGroup>) for a supported shape (decode_attention_supported).
template <typename Fn>
auto dispatch_shape(int32_t head_dim, int32_t group, Fn&& fn) {
    auto for_dim = [&](auto dim) {
        switch (group) {
            case 1:
                return fn(dim, int_c<1>{});
            case 2:
                return fn(dim, int_c<2>{});
            case 4:
                return fn(dim, int_c<4>{});
            case 8:
                return fn(dim, int_c<8>{});
            default:
                return fn(dim, int_c<16>{});
        }
    };
    switch (head_dim) {
        case 64:
            return for_dim(int_c<64>{});
        case 128:
            return for_dim(int_c<128>{});
        default:
            return for_dim(int_c<256>{});
    }
}

}  // namespace

bool decode_attention_supported(int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim) {
    if (num_kv_heads <= 0 || num_q_heads % num_kv_heads != 0) return false;
    const int32_t group = num_q_heads / num_kv_heads;
    return (head_dim == 64 || head_dim == 128 || head_dim == 256) &&
           (group == 1 || group == 2 || group == 4 || group == 8 || group == 16);
}

int32_t decode_attention_slots(int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim) {
    ZMOE_KERNEL_REQUIRE(decode_attention_supported(num_q_heads, num_kv_heads, head_dim),
                        "decode_attention: head_dim 64/128/256 and a group of 1, 2, 4, 8 or 16 query heads");
    // One block a multiprocessor: measured on an H100 at 32 000 keys, three (a full wave) were 10% slower at batch 1
    // (more chunks to combine and more block start-ups, no more bandwidth).
    int device = 0, sms = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&device));
    ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
}

int32_t decode_attention_splits(int32_t num_seqs, int32_t num_kv_heads, int32_t max_kv_len, int32_t slots) {
    // As many chunks per (sequence, KV head) as keep the batch's blocks within `slots`, at most as many as the longest
    // sequence has minimum chunks: a few long sequences split wide, a large batch not at all (no combine pass).
    // Rounded down: equal blocks one past a multiprocessor each finish a block-time late (H100, 32 000 keys, batch 4:
    // 144 blocks 113.5 us, 128 blocks 100.3 us).
    // From 8 up, a multiple of 8 (H100, 32 000 keys: one sequence 31.75 us at 32 splits, 32.60 at 33, where both cut
    // 32 chunks; four sequences 101.3 us at 8 splits, 112.9 at 9; 2026-11-27).
    const int64_t pairs = std::max<int64_t>(int64_t(num_seqs) * num_kv_heads, 1);
    const int64_t most = std::clamp<int64_t>(
        (int64_t(max_kv_len) + kDecodeAttentionMinChunk - 1) / kDecodeAttentionMinChunk, 1, kDecodeAttentionMaxSplits);
    const auto splits = int32_t(std::clamp<int64_t>(std::max<int64_t>(slots, 1) / pairs, 1, most));
    return splits >= kSplitRound ? splits / kSplitRound * kSplitRound : splits;
}

int32_t decode_attention_stages(int32_t head_dim, int32_t num_splits) {
    // 4 for a sequence cut wide (H100, 32 000 keys, one sequence at 32 splits: 31.34 us against 31.75 at 2); 2 for
    // fewer, longer chunks (four sequences at 8 splits: 101.3 us against 104.2 at 4) and for large batches (no split:
    // two blocks an SM at 2 stages, one at 4).
    return head_dim <= 128 && num_splits >= 16 ? 4 : 2;
}

size_t decode_attention_workspace_bytes(int32_t num_seqs, int32_t num_q_heads, int32_t head_dim, int32_t num_splits) {
    return num_splits <= 1 ? 0 : size_t(num_seqs) * num_q_heads * num_splits * (head_dim + 1) * sizeof(float);
}

void launch_decode_attention(const decode_attention_params& p, cudaStream_t stream) {
    launch_decode_attention_stages(p, decode_attention_stages(p.head_dim, p.num_splits), stream);
}

void launch_decode_attention_stages(const decode_attention_params& p, int32_t stages, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(decode_attention_supported(p.num_q_heads, p.num_kv_heads, p.head_dim),
                        "decode_attention: head_dim 64/128/256 and a group of 1, 2, 4, 8 or 16 query heads");
    ZMOE_KERNEL_REQUIRE(p.num_splits >= 1 && p.num_splits <= kDecodeAttentionMaxSplits && p.block_size > 0,
                        "decode_attention: num_splits in [1, kDecodeAttentionMaxSplits], block_size >= 1");
    ZMOE_KERNEL_REQUIRE(p.num_splits == 1 || p.workspace != nullptr, "decode_attention: split KV needs a workspace");
    ZMOE_KERNEL_REQUIRE(p.num_seqs <= 65535, "decode_attention: at most 65535 sequences");
    ZMOE_KERNEL_REQUIRE(stages == 2 || (stages == 4 && p.head_dim <= 128),
                        "decode_attention: 2 stages, or 4 at head_dim <= 128");
    if (p.num_seqs == 0) return;
    dispatch_shape(p.head_dim, p.num_q_heads / p.num_kv_heads,
                   [&](auto dim, auto group) { launch_one<dim.value, group.value>(p, stages, stream); });
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
