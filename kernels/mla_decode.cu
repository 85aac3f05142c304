// MLA decode in the absorbed form on tensor cores: one block per (sequence, group of 16 query heads, split of the
// sequence's keys). The 16 heads' absorbed queries [q_lat | q_pe] (BF16) are the 16 rows of every MMA; each tile of
// kKeys latent cache rows [c | k_pe] is loaded once (cp.async through the block table, two stages, 16-byte chunks
// XOR-swizzled; each key's cache row found once per tile by one lane) and shared by all of them: S = Q K^T with the
// 576-wide rows split over the warps by k-steps (warp w's 9 k-steps of Q kept in registers for the whole kernel, all
// 32 keys; the four partial sums added in shared memory by the warp owning keys 8w .. 8w + 7), the online softmax
// across the block's warps (row maxima and sums exchanged in shared memory), P (BF16) through
// shared memory, and O += P C with warp w owning latent columns 128 w .. 128 w + 127 (C = the latent part of the
// same tile). A split writes its normalised partial output and log-sum-exp; a combine pass merges the splits in a
// fixed order. One split writes o_lat directly. The absorbed query may come in BF16 (launch_mla_decode_bf16: what the
// MMAs take anyway) and the output leave in BF16, for the absorbed projections around the kernel. Both launches are
// programmatically dependent (pdl.cuh): the split pass loads its first tile of earlier steps' rows before the wait.

#include <algorithm>
#include <atomic>
#include <cmath>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/mla_gemm.hpp"
#include "kernels/mma_sm80.cuh"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kHeads = 16;  // MMA rows: query heads per block
constexpr int kKeys = 32;   // keys per tile, 8 per warp for S
constexpr int kRank = 512;  // latent width (DeepSeek-V2/V3)
constexpr int kRope = 64;   // rope width
constexpr int kWidth = kRank + kRope;
constexpr int kChunks = kWidth / 8;  // 16-byte chunks per row: 72
constexpr int kStages = 2;
constexpr int kColsPerWarp = kRank / kWarps;       // 128
constexpr int kDimTiles = kColsPerWarp / 8;        // 16 n-tiles of O per warp
constexpr int kPartStride = kMlaDecodePartStride;  // floats per partial row: the output, the log-sum-exp, padding
static_assert(kPartStride == kRank + 4);
constexpr uint32_t kRowBytes = kWidth * 2;
constexpr uint32_t kQBytes = kHeads * kRowBytes;
constexpr uint32_t kTileBytes = kKeys * kRowBytes;
constexpr uint32_t kPBytes = kHeads * kKeys * 2;
constexpr uint32_t kQ = 0, kK = kQBytes, kP = kK + kStages * kTileBytes, kRed = kP + kPBytes;
constexpr int kSPad = kKeys + 8;  // floats per row of a warp's partial scores (conflict-free float2 stores and loads)
constexpr uint32_t kS = kRed + 2 * kWarps * kHeads * 4;
constexpr uint32_t kSmem = kS + kWarps * kHeads * kSPad * 4;
constexpr int kStepsPerWarp = kChunks / 2 / kWarps;  // 9 of the 36 k-steps of S
static_assert(kStepsPerWarp * kWarps * 2 == kChunks);
static_assert(kChunks % 8 == 0);

/// Byte offset of 16-byte chunk `chunk` of row `row` in rows of `chunks` chunks (a multiple of 8): the chunk index
/// XORed with the row's low bits, so that the 8 rows one ldmatrix matrix reads fall in 8 different bank groups.
__device__ __forceinline__ uint32_t swz(int row, int chunk, int chunks) {
    return uint32_t(row * chunks + (chunk ^ (row & 7))) * 16;
}
/// P's rows are 4 chunks: XOR with bits 1..2 of the row (8 rows of one matrix: pairs of rows per bank group set).
__device__ __forceinline__ uint32_t swz_p(int row, int chunk) {
    return uint32_t(row * 4 + (chunk ^ ((row >> 1) & 3))) * 16;
}

__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void* gmem_src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(gmem_src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

__global__ void __launch_bounds__(kThreads, 2)
    mla_decode_kernel(const mla_decode_params p, const mla_latents_bf16 lat) {
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t base = uint32_t(__cvta_generic_to_shared(smem));
    const uint32_t q_s = base + kQ, k_s = base + kK, p_s = base + kP;
    float* red_max = reinterpret_cast<float*>(smem + kRed);  // [kWarps][kHeads]
    float* red_sum = red_max + kWarps * kHeads;              // [kWarps][kHeads]
    float* s_part = reinterpret_cast<float*>(smem + kS);     // [kWarps][kHeads][kSPad]: partial scores

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const int32_t s = blockIdx.x, h0 = blockIdx.y * kHeads, split = blockIdx.z;
    const int32_t heads_here = min(kHeads, p.num_heads - h0);
    const int32_t kv_len = p.start_pos[s] + 1;
    // This split's keys: chunks of a multiple of kKeys.
    const int32_t per = (kv_len + p.num_splits - 1) / p.num_splits;
    const int32_t chunk = (per + kKeys - 1) / kKeys * kKeys;
    const int32_t k_begin = min(kv_len, split * chunk), k_end = min(kv_len, k_begin + chunk);
    const int32_t num_tiles = (k_end - k_begin + kKeys - 1) / kKeys;
    const int32_t* table = p.block_tables + size_t(s) * p.max_blocks_per_seq;

    // Lane j of every warp finds key j's cache row of a tile once (kKeys == 32 lanes); the copies take it by shuffle.
    static_assert(kKeys == 32);
    // rows: 0 every key of the tile, 1 all but the newest (kv_len - 1), 2 the newest only.
    auto load_tile = [&](int32_t t, int stage, int rows = 0) {
        const uint32_t dst = k_s + stage * kTileBytes;
        const int32_t my_pos = k_begin + t * kKeys + lane;
        const int64_t my_row =
            my_pos < k_end ? int64_t(table[my_pos / p.block_size]) * p.block_size + my_pos % p.block_size : -1;
        const bool my_newest = my_pos == kv_len - 1;
        for (int v = threadIdx.x; v < kKeys * kChunks; v += kThreads) {
            const int j = v / kChunks, c = v % kChunks;
            const int64_t row = __shfl_sync(detail::kFullMask, my_row, j);
            // No second shuffle where rows == 0 (the loop's tiles).
            const bool newest = rows != 0 && __shfl_sync(detail::kFullMask, my_newest, j);
            if ((rows == 1 && newest) || (rows == 2 && !newest)) continue;
            cp_async_16(dst + swz(j, c, kChunks), p.cache + (row >= 0 ? size_t(row) * kWidth + c * 8 : 0), row >= 0);
        }
    };
    // The lengths and block tables are the host's (copied before the step) and the cache rows before the newest were
    // written by earlier steps: the first tile's rows load before the programmatic wait, under the kernels before
    // (uncommitted: they join group 0 below), all but the newest key's, which the kernel before writes: its row after
    // the wait. (kv_len >= 1, so the split holding the newest key has a tile.)
    const bool newest_in_first = num_tiles > 0 && k_begin + kKeys > kv_len - 1;
    if (num_tiles > 0) load_tile(0, 0, newest_in_first ? 1 : 0);
    detail::pdl_wait();  // the absorbed query, q_pe and the newest latent row come from the kernels before
    detail::pdl_launch_dependents();
    if (newest_in_first) load_tile(0, 0, 2);
    cp_async_commit();

    // The queries: row h = [bf16(q_lat[s, h0 + h]) | q_pe[s, h0 + h]], zeros past the last head. Every load of a
    // thread first, then the stores (a shared store's memory clobber between them would put the loads in a row).
    constexpr int kQIters = (kHeads * kChunks + kThreads - 1) / kThreads;
    uint4 qv[kQIters];
#pragma unroll
    for (int it = 0; it < kQIters; ++it) {
        const int v = threadIdx.x + it * kThreads, row = v / kChunks, c = v % kChunks;
        qv[it] = make_uint4(0, 0, 0, 0);
        if (v >= kHeads * kChunks || row >= heads_here) continue;
        const size_t hh = size_t(s) * p.num_heads + h0 + row;
        if (c < kRank / 8 && lat.q != nullptr) {
            qv[it] = *reinterpret_cast<const uint4*>(lat.q + hh * kRank + c * 8);
        } else if (c < kRank / 8) {
            const float* src = p.q_lat + hh * kRank + c * 8;
            const float4 a = *reinterpret_cast<const float4*>(src), b = *reinterpret_cast<const float4*>(src + 4);
            qv[it] = make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
        } else {
            qv[it] =
                *reinterpret_cast<const uint4*>(p.q + hh * (p.nope_dim + kRope) + p.nope_dim + (c - kRank / 8) * 8);
        }
    }
#pragma unroll
    for (int it = 0; it < kQIters; ++it) {
        const int v = threadIdx.x + it * kThreads, row = v / kChunks, c = v % kChunks;
        if (v >= kHeads * kChunks) break;
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(q_s + swz(row, c, kChunks)), "r"(qv[it].x),
                     "r"(qv[it].y), "r"(qv[it].z), "r"(qv[it].w)
                     : "memory");
    }

    __syncthreads();  // the queries are in shared memory
    // This warp's share of S's k-steps: the A fragments of k-steps kStepsPerWarp * warp + i stay in registers.
    uint32_t qf[kStepsPerWarp][4];
#pragma unroll
    for (int i = 0; i < kStepsPerWarp; ++i)
        detail::ldmatrix_x4(q_s + swz(lane % 16, 2 * (kStepsPerWarp * warp + i) + lane / 16, kChunks), qf[i]);

    const float scale_log2 = p.scale * 1.4426950408889634f;
    float o[kDimTiles][4];
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8; identical in every warp
    const int a_row = lane % 16, a_chunk = lane / 16;        // A (Q, P) ldmatrix lanes
    const int v_key = ((lane / 8) % 2) * 8 + lane % 8, v_chunk = lane / 16;  // V (transposed B) lanes

    for (int32_t t = 0; t < num_tiles; ++t) {
        const int stage = t % kStages;
        if (t + 1 < num_tiles) load_tile(t + 1, (t + 1) % kStages);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const uint32_t tile = k_s + stage * kTileBytes;

        // S, split over the warps by k-steps: warp w multiplies its 9 k-steps (Q from registers) for all 32 keys,
        // two n-tiles of 8 keys per K ldmatrix, then the partial sums meet in shared memory; the warp that owns
        // keys 8 w .. 8 w + 7 for the softmax and P adds the four partials in warp order.
        {
            float sp[kKeys / 8][4];
#pragma unroll
            for (int n = 0; n < kKeys / 8; ++n) sp[n][0] = sp[n][1] = sp[n][2] = sp[n][3] = 0.f;
            const int k_lane_key = (lane / 16) * 8 + lane % 8, k_lane_chunk = (lane / 8) % 2;
#pragma unroll
            for (int i = 0; i < kStepsPerWarp; ++i) {
                const int kk = kStepsPerWarp * warp + i;
#pragma unroll
                for (int pr = 0; pr < kKeys / 16; ++pr) {
                    uint32_t b[4];
                    detail::ldmatrix_x4(tile + swz(16 * pr + k_lane_key, 2 * kk + k_lane_chunk, kChunks), b);
                    detail::mma_bf16_16816(sp[2 * pr], qf[i], b[0], b[1]);
                    detail::mma_bf16_16816(sp[2 * pr + 1], qf[i], b[2], b[3]);
                }
            }
            float* mine = s_part + warp * kHeads * kSPad;
#pragma unroll
            for (int n = 0; n < kKeys / 8; ++n) {
                *reinterpret_cast<float2*>(mine + g * kSPad + 8 * n + 2 * t4) = make_float2(sp[n][0], sp[n][1]);
                *reinterpret_cast<float2*>(mine + (g + 8) * kSPad + 8 * n + 2 * t4) = make_float2(sp[n][2], sp[n][3]);
            }
        }
        __syncthreads();
        float sc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const float* part = s_part + w * kHeads * kSPad + 8 * warp + 2 * t4;
            const float2 lo = *reinterpret_cast<const float2*>(part + g * kSPad);
            const float2 hi = *reinterpret_cast<const float2*>(part + (g + 8) * kSPad);
            sc[0] += lo.x, sc[1] += lo.y, sc[2] += hi.x, sc[3] += hi.y;
        }
        // Keys past the split's end (the last tile) are masked.
        const int32_t key0 = k_begin + t * kKeys + warp * 8 + 2 * t4;
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (key0 + (e & 1) >= k_end) sc[e] = -INFINITY;
                // Row maxima over the tile: the quad, then the warps.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = fmaxf(sc[2 * h], sc[2 * h + 1]);
            mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, 2));
            if (t4 == 0) red_max[warp * kHeads + g + 8 * h] = mx;
        }
        __syncthreads();
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = m[h];
#pragma unroll
            for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_max[w * kHeads + g + 8 * h]);
            alpha[h] = exp2f((m[h] - mx) * scale_log2);  // the first tile: exp2(-inf) = 0
            m[h] = mx;
            const float ms = mx * scale_log2;
            sc[2 * h] = exp2f(fmaf(sc[2 * h], scale_log2, -ms));
            sc[2 * h + 1] = exp2f(fmaf(sc[2 * h + 1], scale_log2, -ms));
            float sum = sc[2 * h] + sc[2 * h + 1];
            sum += __shfl_xor_sync(detail::kFullMask, sum, 1);
            sum += __shfl_xor_sync(detail::kFullMask, sum, 2);
            if (t4 == 0) red_sum[warp * kHeads + g + 8 * h] = sum;
            // P (BF16): row g + 8h, keys 8 warp + 2 t4 .. + 1 = chunk warp, bytes 4 t4.
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(p_s + swz_p(g + 8 * h, warp) + t4 * 4),
                         "r"(pack_bf16(sc[2 * h], sc[2 * h + 1]))
                         : "memory");
        }
        __syncthreads();
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float sum = 0.f;
#pragma unroll
            for (int w = 0; w < kWarps; ++w) sum += red_sum[w * kHeads + g + 8 * h];
            l[h] = l[h] * alpha[h] + sum;
#pragma unroll
            for (int d = 0; d < kDimTiles; ++d) {
                o[d][2 * h] *= alpha[h];
                o[d][2 * h + 1] *= alpha[h];
            }
        }
        // O += P C over the warp's 128 latent columns.
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
            uint32_t a[4];
            detail::ldmatrix_x4(p_s + swz_p(a_row, 2 * kk + a_chunk), a);
#pragma unroll
            for (int dp = 0; dp < kDimTiles / 2; ++dp) {
                uint32_t b[4];
                detail::ldmatrix_x4_trans(
                    tile + swz(kk * 16 + v_key, warp * (kColsPerWarp / 8) + 2 * dp + v_chunk, kChunks), b);
                detail::mma_bf16_16816(o[2 * dp], a, b[0], b[1]);
                detail::mma_bf16_16816(o[2 * dp + 1], a, b[2], b[3]);
            }
        }
        __syncthreads();  // the stage, P and the exchange slots are rewritten by the next tile
    }
    cp_async_wait<0>();

    // Normalised partial output (or the final one) and its log-sum-exp (natural log, of the scaled scores).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = g + 8 * h;
        if (row >= heads_here) continue;
        const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
        const size_t hh = size_t(s) * p.num_heads + h0 + row;
        if (p.num_splits == 1 && lat.o != nullptr) {
#pragma unroll
            for (int d = 0; d < kDimTiles; ++d) {
                const int col = warp * kColsPerWarp + d * 8 + 2 * t4;
                *reinterpret_cast<uint32_t*>(lat.o + hh * kRank + col) =
                    pack_bf16(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
            }
            continue;
        }
        float* dst = p.num_splits == 1 ? p.o_lat + hh * kRank : p.workspace + (hh * p.num_splits + split) * kPartStride;
#pragma unroll
        for (int d = 0; d < kDimTiles; ++d) {
            const int col = warp * kColsPerWarp + d * 8 + 2 * t4;
            *reinterpret_cast<float2*>(dst + col) = make_float2(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
        }
        if (p.num_splits > 1 && warp == 0 && t4 == 0) dst[kRank] = l[h] > 0.f ? m[h] * p.scale + logf(l[h]) : -INFINITY;
    }
}

// o_lat[s, h] = sum_c w_c o_c / sum_c w_c, w_c = exp(lse_c - max lse). One block of 128 threads per (s, h, quarter of
// the latent columns): warp g takes splits g, g + 4, ... of the quarter's 32 float4 columns, all its loads issued
// before the weights are known (one L2 round trip for the partial rows and the log-sum-exps together); the four warps'
// sums are added in warp order (deterministic).
constexpr int kCombineQuarters = 4;
constexpr int kCombineGroups = 4;                                      // warps, each a residue class of splits
constexpr int kCombinePerWarp = kMlaDecodeMaxSplits / kCombineGroups;  // splits a warp holds: 8
__global__ void __launch_bounds__(128)
    mla_decode_combine_kernel(const mla_decode_params p, const mla_latents_bf16 lat) {
    static_assert(kMlaDecodeMaxSplits <= 32 && kRank == kCombineQuarters * 32 * 4);
    __shared__ float w_s[kMlaDecodeMaxSplits];
    __shared__ float inv_s;
    __shared__ float4 sums[kCombineGroups][32];
    detail::pdl_wait();  // the split pass's partial outputs
    detail::pdl_launch_dependents();
    const size_t hh = size_t(blockIdx.x);
    const float* part = p.workspace + hh * p.num_splits * kPartStride;
    const int lane = threadIdx.x % 32, grp = threadIdx.x / 32;
    const int col = blockIdx.y * 128 + lane * 4;  // this thread's four columns
    float4 v[kCombinePerWarp];
#pragma unroll
    for (int i = 0; i < kCombinePerWarp; ++i) {
        const int c = grp + kCombineGroups * i;
        v[i] = c < p.num_splits ? __ldcg(reinterpret_cast<const float4*>(part + c * kPartStride + col))
                                : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    // The splits' weights once, by the first warp (lane c: split c), the sum by a warp reduction.
    if (grp == 0) {
        const int c = lane;
        const float lse = c < p.num_splits ? __ldcg(part + c * kPartStride + kRank) : -INFINITY;
        const float mx = detail::warp_max(lse);
        const float w = lse == -INFINITY ? 0.f : expf(lse - mx);
        const float sum = detail::warp_sum(w);
        if (c < p.num_splits) w_s[c] = w;
        if (c == 0) inv_s = sum > 0.f ? 1.f / sum : 0.f;
    }
    __syncthreads();
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int i = 0; i < kCombinePerWarp; ++i) {
        const int c = grp + kCombineGroups * i;
        if (c >= p.num_splits) break;
        const float w = w_s[c];
        if (w == 0.f) continue;  // an empty split (its row may be anything finite or not)
        acc.x = fmaf(w, v[i].x, acc.x);
        acc.y = fmaf(w, v[i].y, acc.y);
        acc.z = fmaf(w, v[i].z, acc.z);
        acc.w = fmaf(w, v[i].w, acc.w);
    }
    sums[grp][lane] = acc;
    __syncthreads();
    if (grp != 0) return;
#pragma unroll
    for (int g = 1; g < kCombineGroups; ++g) {
        const float4 x = sums[g][lane];
        acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
    }
    const float inv = inv_s;
    if (lat.o != nullptr) {
        uint2 packed;
        packed.x = pack_bf16(acc.x * inv, acc.y * inv);
        packed.y = pack_bf16(acc.z * inv, acc.w * inv);
        *reinterpret_cast<uint2*>(lat.o + hh * kRank + col) = packed;
    } else {
        *reinterpret_cast<float4*>(p.o_lat + hh * kRank + col) =
            make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    }
}

}  // namespace

bool mla_decode_supported(int32_t kv_lora_rank, int32_t rope_dim) { return kv_lora_rank == kRank && rope_dim == kRope; }

int32_t mla_decode_splits(int32_t num_seqs, int32_t num_heads, int32_t num_sms) {
    // Two blocks fit an SM. A batch that fills nine tenths of those slots on its own takes no split (a second wave of
    // split blocks would not use the SMs better, and one split skips the partial outputs and the combine launch).
    const int32_t blocks = num_seqs * ((num_heads + kHeads - 1) / kHeads);
    if (10 * blocks >= 9 * 2 * num_sms) return 1;
    return std::clamp((2 * num_sms + blocks - 1) / std::max(blocks, 1), 1, kMlaDecodeMaxSplits);
}

size_t mla_decode_workspace_floats(int32_t num_seqs, int32_t num_heads, int32_t num_splits) {
    return num_splits <= 1 ? 0 : size_t(num_seqs) * num_heads * num_splits * kPartStride;
}

void launch_mla_decode(const mla_decode_params& p, cudaStream_t stream) { launch_mla_decode_bf16(p, {}, stream); }

namespace {

void check_decode(const mla_decode_params& p, const mla_latents_bf16& lat) {
    ZMOE_KERNEL_REQUIRE(mla_decode_supported(p.kv_lora_rank, p.rope_dim),
                        "mla_decode: kv_lora_rank 512 and rope_dim 64 only");
    ZMOE_KERNEL_REQUIRE(p.num_splits >= 1 && p.num_splits <= kMlaDecodeMaxSplits,
                        "mla_decode: num_splits must be in [1, kMlaDecodeMaxSplits]");
    ZMOE_KERNEL_REQUIRE(p.nope_dim % 8 == 0, "mla_decode: nope_dim must be a multiple of 8");
    ZMOE_KERNEL_REQUIRE((p.q_lat != nullptr) != (lat.q != nullptr), "mla_decode: exactly one of q_lat, lat.q");
    ZMOE_KERNEL_REQUIRE((p.o_lat != nullptr) != (lat.o != nullptr), "mla_decode: exactly one of o_lat, lat.o");
}

/// The split pass alone (the partial rows where there are splits).
void launch_split_pass(const mla_decode_params& p, const mla_latents_bf16& lat, cudaStream_t stream) {
    // The shared-memory attribute once per device (outside the decode graphs' captures: the eager warm-up sets it).
    static std::atomic<uint64_t> configured{0};
    int device = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&device));
    const uint64_t bit = uint64_t{1} << (device % 64);
    if ((configured.load() & bit) == 0) {
        ZMOE_CUDA_CHECK(
            cudaFuncSetAttribute(mla_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
        configured.fetch_or(bit);
    }
    const dim3 grid(p.num_seqs, (p.num_heads + kHeads - 1) / kHeads, p.num_splits);
    // Programmatic launch where the few-token absorb kernels run before it; after the batched GEMMs a plain one (H100,
    // DeepSeek-V2-Lite dims, batch 256: the step 16.73 ms with every launch programmatic against main's 16.48 — a
    // suspected cause, not measured apart: blocks launched early hold multiprocessors a GEMM's later waves need).
    if (p.num_seqs <= kMlaAbsorbGemvMaxTokens)
        detail::launch_pdl(mla_decode_kernel, grid, dim3(kThreads), kSmem, stream, p, lat);
    else
        mla_decode_kernel<<<grid, kThreads, kSmem, stream>>>(p, lat);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_mla_decode_bf16(const mla_decode_params& p, const mla_latents_bf16& lat, cudaStream_t stream) {
    check_decode(p, lat);
    if (p.num_seqs == 0) return;
    launch_split_pass(p, lat, stream);
    if (p.num_splits > 1) {
        detail::launch_pdl(mla_decode_combine_kernel, dim3(p.num_seqs * p.num_heads, kCombineQuarters), dim3(128), 0,
                           stream, p, lat);
        ZMOE_CUDA_CHECK_LAUNCH();
    }
}

void launch_mla_decode_v_up_gemv(const mla_decode_params& p, const mla_latents_bf16& lat,
                                 const mla_absorb_gemm_params& v_up, cudaStream_t stream) {
    check_decode(p, lat);
    ZMOE_KERNEL_REQUIRE(lat.o != nullptr && v_up.in == lat.o && v_up.num_tokens == p.num_seqs &&
                            v_up.num_heads == p.num_heads && v_up.kv_lora_rank == p.kv_lora_rank,
                        "mla_decode_v_up_gemv: v_up takes the decode's BF16 output, one token per sequence");
    if (p.num_seqs == 0) return;
    launch_split_pass(p, lat, stream);
    if (p.num_splits > 1)
        launch_mla_combine_v_up_gemv(v_up, p.workspace, p.num_splits, stream);
    else
        launch_mla_v_up_gemv(v_up, stream);
}

}  // namespace zmoe::kernels
