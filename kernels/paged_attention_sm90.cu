// Paged attention for mixed batches on Hopper (sm_90a): the work items and the contract of launch_paged_attention
// (kernels/paged_attention.cu), the matrix products on wgmma.
//
// One or two warpgroups (4 warps each) per (work item, KV head), for items of 64 or 128 rows (rows_per_item): each
// warpgroup's 64 rows are the M of its wgmmas, and both share every K/V tile the block loads (warp w owns rows
// 16w..16w+15, as in the mma.sync kernel, so the GQA packing, masking and softmax are the same). Shared
// memory holds the query tile and kStages stages of K/V tiles of kKeys keys, each tile in 64-column panels of 128-byte
// rows with the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)), which is both what wgmma's
// descriptors read and conflict-free for the cp.async writes. The copies come through the block table with
// cp.async, the next stages' in flight while the current one is multiplied.
// Per tile: S (64 x kKeys) = Q K^T by wgmma m64n64k16, Q from registers, K (K-major) from shared memory; the causal
// mask on tiles that cross a row's position; the online softmax on the accumulators (exp2, log2(e)-prescaled scale);
// P rounded to BF16 in registers and fed as wgmma's register A operand of O += P V, V read from shared memory as an
// N-major (transposed) B, one m64n64k16 per 64-column panel. The next tile's Q K^T is issued before this tile's
// softmax; one block barrier a tile (three stages: tile t's V, tile t + 1's K, tile t + 2's copies). 128-row items
// (what the executor runs) halve the K/V bytes each FLOP needs against 64-row ones; docs/kernels.md has the
// measurements and the forms not kept.

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/dispatch.cuh"
#include "kernels/grouped_gemm_sm90.hpp"
#include "kernels/mma_sm80.cuh"
#include "kernels/paged_attention_sm90.hpp"
#include "kernels/sm90_primitives.cuh"

namespace zmoe::kernels {
namespace {

/// kWarpgroups warpgroups of 64 rows each share every K/V tile: items of kWarpgroups * 64 rows.
template <int kHeadDim, int kWarpgroups>
struct wg_tile {
    static constexpr int kThreads = 128 * kWarpgroups;
    static constexpr int kRows = 64 * kWarpgroups;
    static constexpr int kKeys = 64;
    static constexpr int kStages = 3;
    static constexpr int kPanels = kHeadDim / 64;  // 64-column panels of 128-byte rows
    static constexpr int kChunks = kHeadDim / 8;
    static constexpr uint32_t kQBytes = uint32_t(kRows) * kHeadDim * 2;
    static constexpr uint32_t kTileBytes = uint32_t(kKeys) * kHeadDim * 2;
    // Byte layout from a 1024-byte aligned base: q | k [kStages] | v [kStages].
    static constexpr uint32_t kQ = 0, kK = kQBytes, kV = kK + kStages * kTileBytes, kTotal = kV + kStages * kTileBytes;
    static constexpr uint32_t kSmem = kTotal + 1024;  // alignment slack
    static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0, "tiles stay 1024-byte aligned (swizzle atom)");
};

/// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of kTileRows rows: panel chunk / 8, 128-byte rows,
/// chunk within the row swizzled by the row's low 3 bits (the hardware's 128-byte swizzle on 1024-byte atoms).
template <int kTileRows>
__device__ __forceinline__ uint32_t panel_offset(int row, int chunk) {
    return uint32_t(chunk / 8) * (kTileRows * 128) + uint32_t(row) * 128 + uint32_t((chunk % 8) ^ (row % 8)) * 16;
}

__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void* gmem_src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(gmem_src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
/// Orders this thread's generic-proxy shared-memory writes (cp.async, st.shared) before async-proxy reads (wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/// Descriptor of a 128-byte-swizzled operand at shared address addr: 8-row groups (atoms) 1024 bytes apart. For
/// K-major operands (Q, K) the leading offset is unused; for the N-major V, one wgmma spans one 64-column atom along
/// N, and its two 8-key atoms along K are 1024 bytes apart, so both offsets are 1024.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t leading_bytes) {
    uint64_t d = (addr & 0x3FFFFu) >> 4;
    d |= uint64_t(leading_bytes >> 4) << 16;
    d |= uint64_t(1024 >> 4) << 32;
    d |= uint64_t(1) << 62;  // 128-byte swizzle
    return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
/// Keeps the compiler from moving accesses of the accumulators across the asynchronous wgmma.
template <int kN>
__device__ __forceinline__ void fence_accumulators(float (&d)[kN]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define ZMOE_WG_D0_31                                                        \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define ZMOE_WG_ACC8(i)                                                                                         \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])

/// d (64 x 64, fp32) += A (64 x 16, BF16 registers, each warp's 16 rows in the mma.sync m16n8k16 A layout) . B,
/// B in shared memory: K-major (64 x 16, B^T multiplied) with kTransB 0, N-major (16 x 64) with kTransB 1.
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" ZMOE_WG_D0_31
                 "}, {%32, %33, %34, %35}, %36, 1, 1, 1, %37;\n"
                 : ZMOE_WG_ACC8(0), ZMOE_WG_ACC8(8), ZMOE_WG_ACC8(16), ZMOE_WG_ACC8(24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
}

/// The warp's 16 query rows as mma A fragments, one per 16-column k-step, from the 128-byte-swizzled query tile.
template <int kTileRows, int kDSteps>
__device__ __forceinline__ void load_query_fragments(uint32_t (&q_frag)[kDSteps][4], uint32_t q_s, int warp, int lane) {
#pragma unroll
    for (int ks = 0; ks < kDSteps; ++ks)
        detail::ldmatrix_x4(q_s + panel_offset<kTileRows>(warp * 16 + lane % 16, 2 * ks + lane / 16), q_frag[ks]);
}

#undef ZMOE_WG_ACC8
#undef ZMOE_WG_D0_31

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

/// 2^x by the special-function unit alone (ex2.approx.ftz: results below 2^-126 flush to 0, 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/// The online-softmax update of one tile's scores s (this thread's rows g and g + 8 of its warp at positions pos[0]
/// and pos[1], keys kv0..kv0 + 63): the causal mask when the tile crosses the diagonal of some row of the warp, the
/// running maxima m and sums l (this thread's columns only; the quad's are summed at the end), o rescaled, and s
/// turned into the probabilities exp2((s - m) * scale_log2). Every row's running maximum is finite from tile 0 on
/// (key 0 is at or before every position), so no -inf - -inf arises.
template <int kPanels>
__device__ __forceinline__ void softmax_tile(float (&s)[32], float (&o)[kPanels][32], float (&m)[2], float (&l)[2],
                                             const int32_t (&pos)[2], int32_t kv0, bool masked, int t4,
                                             float scale_log2) {
    if (masked) {
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (kv0 + j * 8 + 2 * t4 + (e & 1) > pos[e / 2]) s[4 * j + e] = -INFINITY;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = m[h];
#pragma unroll
        for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, 2));
        const float alpha = fast_exp2((m[h] - mx) * scale_log2);
        m[h] = mx;
        const float m_scaled = mx * scale_log2;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            s[4 * j + 2 * h] = fast_exp2(fmaf(s[4 * j + 2 * h], scale_log2, -m_scaled));
            s[4 * j + 2 * h + 1] = fast_exp2(fmaf(s[4 * j + 2 * h + 1], scale_log2, -m_scaled));
            sum += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
        }
        l[h] = l[h] * alpha + sum;
#pragma unroll
        for (int pn = 0; pn < kPanels; ++pn)
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                o[pn][4 * j + 2 * h] *= alpha;
                o[pn][4 * j + 2 * h + 1] *= alpha;
            }
    }
}

template <int kHeadDim, int kWarpgroups>
__global__ void __launch_bounds__(128 * kWarpgroups, kWarpgroups == 1 ? 2 : 1)
    prefill_attention_wgmma_kernel(const paged_attention_params p) {
    using tile = wg_tile<kHeadDim, kWarpgroups>;
    constexpr int kThreads = tile::kThreads, kRows = tile::kRows;
    constexpr int kKeys = tile::kKeys, kChunks = tile::kChunks, kPanels = tile::kPanels, kStages = tile::kStages;
    constexpr int kDSteps = kHeadDim / 16;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t raw = uint32_t(__cvta_generic_to_shared(smem_raw));
    const uint32_t base = (raw + 1023) & ~1023u;
    const uint32_t q_s = base + tile::kQ, k_s = base + tile::kK, v_s = base + tile::kV;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t seq = p.work_items[2 * blockIdx.x], row0 = p.work_items[2 * blockIdx.x + 1];
    const int32_t kvh = blockIdx.y, group = p.num_q_heads / p.num_kv_heads;
    const int32_t q_begin = p.query_start[seq], total_rows = (p.query_start[seq + 1] - q_begin) * group;
    const int32_t start = p.start_pos[seq];
    const int32_t row_end = min(row0 + kRows, total_rows);
    const int32_t kv_end = start + (row_end - 1) / group + 1;  // keys the last row of this item sees
    const int32_t num_tiles = (kv_end + kKeys - 1) / kKeys;
    // A warpgroup without a valid row (the second of an item of 64 rows or fewer: decodes, short chunks) loads and
    // meets the barriers with the other, and multiplies nothing.
    const bool wg_active = row0 + (warp / 4) * 64 < total_rows;
    const int32_t* table = p.block_tables + size_t(seq) * p.max_blocks_per_seq;

    for (int v = threadIdx.x; v < kRows * kChunks; v += kThreads) {
        const int rr = v / kChunks, chunk = v % kChunks;
        const int32_t r = row0 + rr;
        const bool valid = r < total_rows;
        const bf16* src =
            valid ? p.q + (size_t(q_begin + r / group) * p.num_q_heads + kvh * group + r % group) * kHeadDim + chunk * 8
                  : p.q;
        cp_async_16(q_s + panel_offset<kRows>(rr, chunk), src, valid);
    }
    cp_async_commit();

    // K and V tile t into stage t % kStages (zeros past kv_end, so that P V never meets uninitialised memory).
    auto load_tile = [&](int32_t t) {
        const int stage = t % kStages;
        const uint32_t k_dst = k_s + stage * tile::kTileBytes, v_dst = v_s + stage * tile::kTileBytes;
        for (int v = threadIdx.x; v < kKeys * kChunks; v += kThreads) {
            const int j = v / kChunks, chunk = v % kChunks;
            const int32_t pos = t * kKeys + j;
            const bool valid = pos < kv_end;
            size_t off = 0;
            if (valid) {
                const size_t slot = size_t(table[pos / p.block_size]) * p.block_size + pos % p.block_size;
                off = (slot * p.num_kv_heads + kvh) * kHeadDim + chunk * 8;
            }
            cp_async_16(k_dst + panel_offset<kKeys>(j, chunk), p.k_cache + off, valid);
            cp_async_16(v_dst + panel_offset<kKeys>(j, chunk), p.v_cache + off, valid);
        }
    };
    // Tiles 0 .. kStages - 2 in flight; one commit group per tile from here on (empty past the last tile).
#pragma unroll
    for (int t = 0; t < kStages - 1; ++t) {
        if (t < num_tiles) load_tile(t);
        cp_async_commit();
    }

    const int g = lane / 4, t4 = lane % 4;
    const int32_t warp_row0 = row0 + warp * 16;
    int32_t pos[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) pos[h] = start + (warp_row0 + g + 8 * h) / group;
    const int32_t warp_first_pos = start + warp_row0 / group;
    const float scale_log2 = p.scale * 1.4426950408889634f;

    float o[kPanels][32];
#pragma unroll
    for (int pn = 0; pn < kPanels; ++pn)
#pragma unroll
        for (int i = 0; i < 32; ++i) o[pn][i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    uint32_t q_frag[kDSteps][4];

    // S = Q K^T of the tile in stage `stage`, issued (committed, not waited for).
    auto issue_scores = [&](float(&s)[32], int stage) {
        const uint32_t k_tile = k_s + stage * tile::kTileBytes;
#pragma unroll
        for (int i = 0; i < 32; ++i) s[i] = 0.f;
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kDSteps; ++ks) {
            const uint32_t col = uint32_t(ks % 4) * 32;  // bytes within the 128-byte row
            const uint64_t desc_k = smem_desc(k_tile + (ks / 4) * (kKeys * 128) + col, 16);
            wgmma_m64n64k16_rs<0>(s, q_frag[ks], desc_k);
        }
        wgmma_commit();
    };
    // O += P V of the tile in stage `stage`, issued: P's 8-column tiles 2kk and 2kk + 1 are the A fragment of k-step
    // kk (16 keys); V's k-step kk is rows 16kk.. of each panel, two 8-row atoms 1024 bytes apart.
    auto issue_values = [&](const float(&s)[32], int stage) {
        const uint32_t v_tile = v_s + stage * tile::kTileBytes;
        uint32_t a[kKeys / 16][4];
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
            a[kk][0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
            a[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
            a[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
            a[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk)
#pragma unroll
            for (int pn = 0; pn < kPanels; ++pn)
                wgmma_m64n64k16_rs<1>(o[pn], a[kk], smem_desc(v_tile + pn * (kKeys * 128) + kk * 16 * 128, 1024));
        wgmma_commit();
    };
    {
        // S of tile t + 1 is issued before the softmax of tile t, so that the tensor cores multiply while the
        // softmax runs; tile t's V and tile t + 1's K are both needed then, hence three stages.
        float s[32], s_next[32];
        cp_async_wait<kStages - 2>();  // the query and tile 0 (tiles 1 .. kStages - 2 may be in flight)
        fence_proxy_async();
        __syncthreads();
        load_query_fragments<kRows>(q_frag, q_s, warp, lane);
        if (wg_active) issue_scores(s, 0);
        wgmma_wait<0>();
        fence_accumulators(s);
        for (int32_t t = 0; t < num_tiles; ++t) {
            const bool has_next = t + 1 < num_tiles;
            if (has_next) {
                // One barrier per tile: tile t + 1 has landed everywhere (tiles t + 2 .. t + kStages - 2 may be in
                // flight), and every warpgroup is done with tile t - 1 (its P V waited for last iteration), whose
                // stage (t + kStages - 1) % kStages is refilled after the barrier.
                cp_async_wait<kStages - 3>();
                fence_proxy_async();
                __syncthreads();
                if (t + kStages - 1 < num_tiles) load_tile(t + kStages - 1);
                cp_async_commit();
                if (wg_active) issue_scores(s_next, (t + 1) % kStages);
            }
            if (wg_active) {
                softmax_tile(s, o, m, l, pos, t * kKeys, t * kKeys + kKeys - 1 > warp_first_pos, t4, scale_log2);
                issue_values(s, t % kStages);
            }
            wgmma_wait<0>();
            fence_accumulators(s_next);
#pragma unroll
            for (int pn = 0; pn < kPanels; ++pn) fence_accumulators(o[pn]);
#pragma unroll
            for (int i = 0; i < 32; ++i) s[i] = s_next[i];
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // every wgmma that reads the query tile is done before it is overwritten below

    // Normalise, stage the warp's 16 rows in its own rows of the query tile (every wgmma reading it is done: the
    // loop's last barrier), then write whole rows.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(detail::kFullMask, l[h], 1);
        l[h] += __shfl_xor_sync(detail::kFullMask, l[h], 2);
        const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
        const int row = warp * 16 + g + 8 * h;
#pragma unroll
        for (int pn = 0; pn < kPanels; ++pn)
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const uint32_t packed = pack_bf16(o[pn][4 * j + 2 * h] * inv, o[pn][4 * j + 2 * h + 1] * inv);
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(q_s + panel_offset<kRows>(row, 8 * pn + j) + t4 * 4),
                             "r"(packed)
                             : "memory");
            }
    }
    __syncwarp();
    for (int v = lane; v < 16 * kChunks; v += 32) {
        const int rr = v / kChunks, chunk = v % kChunks;
        const int32_t r = warp_row0 + rr;
        if (r >= total_rows) continue;
        detail::bf16x8 x;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(reinterpret_cast<uint32_t*>(&x)[0]), "=r"(reinterpret_cast<uint32_t*>(&x)[1]),
                       "=r"(reinterpret_cast<uint32_t*>(&x)[2]), "=r"(reinterpret_cast<uint32_t*>(&x)[3])
                     : "r"(q_s + panel_offset<kRows>(warp * 16 + rr, chunk))
                     : "memory");
        const int32_t token = q_begin + r / group, head = kvh * group + r % group;
        *reinterpret_cast<detail::bf16x8*>(p.out + (size_t(token) * p.num_q_heads + head) * kHeadDim + chunk * 8) = x;
    }
}

// ---------------------------------------------------------------------------------------------------------
// The warp-specialised kernel (FlashAttention-3's structure): a persistent grid of one CTA per SM walking the
// (work item, KV head) units blockIdx.x, + gridDim.x, ...; three warpgroups per CTA. Warpgroup 0 is the producer
// (its first warp only; registers lowered to 24): K/V tiles of kWsKeys keys into a ring of kStages stages through
// full/empty mbarriers, each tile as TMA boxes of ws_params::box_rows keys (a divisor of the block size, so that a
// box is consecutive slots of one cache block) read through the block table, and the keys of the item's last tile
// past its last box that is whole by cp.async with zero fill (keys past kv_end become zeros: never-written cache
// slots could hold NaN, and 0 * NaN would reach O). Warpgroups 1 and 2 (registers raised to 240) own 64 rows of the
// 128-row item each: S = Q K^T by wgmma m64n128k16 from shared memory, the online softmax on the accumulators,
// O += P V with P from registers; the next tile's Q K^T and this tile's P V are issued together and the softmax of
// the next tile runs while P V is in flight (intra-warpgroup overlap), and the two warpgroups take turns issuing
// their wgmmas (two named barriers passed back and forth), so that one's softmax runs under the other's products.
// Q/K and V head dims are template parameters of their own: MLA's expanded form runs Q K^T over 192 (three panels)
// and P V over 128, with 2 K and 2 V stages (48 + 32 KiB a stage beside the 48 KiB query tile). With tail_boxes the
// keys of an item's last tile past its whole boxes go in 8-key boxes (a second tensor map each), only the last
// fewer than 8 by cp.async.

constexpr int kWsKeys = 128;
constexpr int kWsThreads = 384;
constexpr int kWsSchedBarrier = 1;  // + consumer warpgroup (1, 2): the turn to issue wgmmas
constexpr int kWsWgBarrier = 3;     // + consumer warpgroup (3, 4): the warpgroup's own 128 threads

/// The P V forms the variants take: per 64-column panel one m64n64k16 (kPvPanels), or one m64n128k16 over both
/// panels (kPvWide, head dim 128): V is an N-major operand, the panel stride (between 64-column atoms along N) its
/// leading byte offset and the 8-key stride its stride byte offset (with the two swapped it gave wrong results).
enum ws_pv : int { kPvPanels = 0, kPvWide = 1 };

/// kHeadDim: of Q and K (the Q K^T reduction); kVDim: of V and the output (MLA's expanded form: 192 and 128).
/// kQBuffers query tiles: 2 when the producer loads the next item's query rows while this one's are in use.
template <int kHeadDim, int kVDim, int kKStages, int kVStages, int kQBuffers>
struct ws_layout {
    static_assert(kHeadDim % 64 == 0 && kVDim % 64 == 0 && kVDim <= kHeadDim,
                  "64-column panels; the output rows are staged in the query's rows");
    static constexpr int kRows = 128, kKeys = kWsKeys, kChunks = kHeadDim / 8;
    static constexpr int kVPanels = kVDim / 64, kVChunks = kVDim / 8;
    static constexpr uint32_t kQBytes = uint32_t(kRows) * kHeadDim * 2;
    static constexpr uint32_t kKTileBytes = uint32_t(kKeys) * kHeadDim * 2;
    static constexpr uint32_t kVTileBytes = uint32_t(kKeys) * kVDim * 2;
    static constexpr uint32_t kPanelBytes = uint32_t(kKeys) * 128;  // one 64-column panel of a K or V tile
    // From a 1024-byte aligned base: q [kQBuffers] | k [kKStages] | v [kVStages] | k_full, k_empty [kKStages] |
    // v_full, v_empty [kVStages] | q_full [2] | q_empty [2].
    static constexpr uint32_t kQ = 0, kK = kQBuffers * kQBytes, kV = kK + kKStages * kKTileBytes;
    static constexpr uint32_t kBar = kV + kVStages * kVTileBytes;
    static constexpr uint32_t kTotal = kBar + (2 * kKStages + 2 * kVStages + 4) * 8;
    static constexpr uint32_t kSmem = kTotal + 1024;
};

struct ws_item {
    int32_t seq, row0, q_begin, total_rows, start, kv_end, num_tiles;
    const int32_t* table;
};

__device__ __forceinline__ ws_item ws_locate(const paged_attention_params& p, int32_t item, int32_t group) {
    ws_item it;
    it.seq = p.work_items[2 * item];
    it.row0 = p.work_items[2 * item + 1];
    it.q_begin = p.query_start[it.seq];
    it.total_rows = (p.query_start[it.seq + 1] - it.q_begin) * group;
    it.start = p.start_pos[it.seq];
    const int32_t row_end = min(it.row0 + 128, it.total_rows);
    it.kv_end = it.start + (row_end - 1) / group + 1;
    it.num_tiles = (it.kv_end + kWsKeys - 1) / kWsKeys;
    it.table = p.block_tables + size_t(it.seq) * p.max_blocks_per_seq;
    return it;
}

/// KV heads whose units are interleaved (item-major within a group of heads, the groups one after another): a round
/// of 132 units then reads the K/V of at most 16 heads, which L2 holds, where DeepSeek-V3's 128 heads in one group
/// had each round read every head's K/V (dsv3 shape: 180 TFLOP/s against dsv2's 584 at 8 192 tokens).
constexpr int32_t kWsHeadGroup = 16;

/// Unit u's work item and KV head (item-major, as the plan's longest-first order, within each group of kWsHeadGroup
/// heads; up to 16 heads this is item u / num_kv_heads, head u % num_kv_heads).
__device__ __forceinline__ int32_t ws_unit_head(int32_t u, int32_t num_items, int32_t num_kv_heads, int32_t& item) {
    const int32_t per_group = num_items * kWsHeadGroup;
    const int32_t hg = u / per_group, r = u - hg * per_group;
    const int32_t heads = min(kWsHeadGroup, num_kv_heads - hg * kWsHeadGroup);
    item = r / heads;
    return hg * kWsHeadGroup + r % heads;
}

/// The k-th unit of this CTA: rounds of gridDim.x units, walked forwards in even rounds and backwards in odd ones.
/// The plan lists each sequence's items longest first, so a plain stride would give CTA 0 the longest unit of
/// every round (at 8 192 tokens, ~4 tiles more a round than the last CTA: a tail of ~12%); alternating the direction
/// evens the sums out.
__device__ __forceinline__ int32_t ws_unit(int32_t k, bool alternate) {
    const int32_t g = int32_t(gridDim.x), b = int32_t(blockIdx.x);
    return k * g + ((alternate && (k & 1)) ? g - 1 - b : b);
}

#define ZMOE_WS_ACC8(d, i)                                                                                      \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define ZMOE_WS_ACC32(d) ZMOE_WS_ACC8(d, 0), ZMOE_WS_ACC8(d, 8), ZMOE_WS_ACC8(d, 16), ZMOE_WS_ACC8(d, 24)
#define ZMOE_WS_D0_63                                                                  \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

/// d (64 x 128, fp32) = A . B^T (+ d when accumulate): A (64 x 16) and B (128 x 16) K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                    uint32_t accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" ZMOE_WS_D0_63 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : ZMOE_WS_ACC8(d, 0), ZMOE_WS_ACC8(d, 8), ZMOE_WS_ACC8(d, 16), ZMOE_WS_ACC8(d, 24), ZMOE_WS_ACC8(d, 32),
          ZMOE_WS_ACC8(d, 40), ZMOE_WS_ACC8(d, 48), ZMOE_WS_ACC8(d, 56)
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

/// (d0 | d1) (64 x 128, fp32) += A (64 x 16, registers) . B, B N-major (16 x 128) in shared memory: d0 holds
/// columns 0..63 and d1 columns 64..127 in the m64n64 accumulator layout.
__device__ __forceinline__ void wgmma_m64n128k16_rs_t(float (&d0)[32], float (&d1)[32], const uint32_t (&a)[4],
                                                      uint64_t desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" ZMOE_WS_D0_63
                 "}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                 : ZMOE_WS_ACC32(d0), ZMOE_WS_ACC32(d1)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

#undef ZMOE_WS_D0_63
#undef ZMOE_WS_ACC32
#undef ZMOE_WS_ACC8

/// Descriptor with both byte offsets given (the 128-byte swizzle).
__device__ __forceinline__ uint64_t smem_desc2(uint32_t addr, uint32_t leading_bytes, uint32_t stride_bytes) {
    uint64_t d = (addr & 0x3FFFFu) >> 4;
    d |= uint64_t(leading_bytes >> 4) << 16;
    d |= uint64_t(stride_bytes >> 4) << 32;
    d |= uint64_t(1) << 62;
    return d;
}

/// The online softmax of one 128-key tile (this thread's rows g, g + 8 at positions pos[0], pos[1]; keys kv0..):
/// the causal mask when `masked`, new running maxima m, the rescale factors alpha of the rows (1 on the first
/// tile), l updated, and s turned into exp2((s - m) * scale_log2).
__device__ __forceinline__ void ws_softmax(float (&s)[64], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                           const int32_t (&pos)[2], int32_t kv0, bool masked, int t4,
                                           float scale_log2) {
    if (masked) {
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (kv0 + j * 8 + 2 * t4 + (e & 1) > pos[e / 2]) s[4 * j + e] = -INFINITY;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = m[h];
#pragma unroll
        for (int j = 0; j < 16; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, 2));
        alpha[h] = fast_exp2((m[h] - mx) * scale_log2);  // m = -inf on the first tile: alpha 0, l and O are 0
        m[h] = mx;
        const float m_scaled = mx * scale_log2;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            s[4 * j + 2 * h] = fast_exp2(fmaf(s[4 * j + 2 * h], scale_log2, -m_scaled));
            s[4 * j + 2 * h + 1] = fast_exp2(fmaf(s[4 * j + 2 * h + 1], scale_log2, -m_scaled));
            sum += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
        }
        l[h] = l[h] * alpha[h] + sum;
    }
}

/// P (this thread's 64 probabilities) as the 8 A fragments (16 keys each) of P V.
__device__ __forceinline__ void ws_pack(const float (&s)[64], uint32_t (&a)[8][4]) {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        a[kk][0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
        a[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
        a[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
        a[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
    }
}

/// Keeps P's registers live (a use and a definition here) until the wgmma reading them is waited for: otherwise the
/// compiler, which sees the asynchronous read at the issue only, reuses them for the next tile's P while the P V is in
/// flight, and ptxas serialises every wgmma of the kernel (C7513).
__device__ __forceinline__ void keep_fragments(uint32_t (&a)[8][4]) {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[kk][e])::"memory");
}

template <int kHeadDim, int kVDim, int kKStages, int kVStages, int kPv, bool kPingPong, bool kQByProducer>
__global__ void __launch_bounds__(kWsThreads, 1)
    prefill_attention_ws_kernel(const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                                const __grid_constant__ CUtensorMap map_k8, const __grid_constant__ CUtensorMap map_v8,
                                const paged_attention_params p, int32_t box_rows, bool tail_boxes, bool alternate,
                                bool split_producer) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using L = ws_layout<kHeadDim, kVDim, kKStages, kVStages, kQByProducer ? 2 : 1>;
    constexpr int kRows = L::kRows, kKeys = L::kKeys, kChunks = L::kChunks;
    constexpr int kVPanels = L::kVPanels, kVChunks = L::kVChunks;
    constexpr int kDSteps = kHeadDim / 16;
    static_assert(kPv == kPvPanels || kVDim == 128, "the wide P V spans two panels");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t raw = sm90::smem_addr(smem_raw);
    const uint32_t base = (raw + 1023) & ~1023u;
    unsigned char* const base_ptr = smem_raw + (base - raw);
    const uint32_t q_s = base + L::kQ, k_s = base + L::kK, v_s = base + L::kV;
    // K and V have rings of their own: a K stage is free once its Q K^T is done, a V stage once its P V is, and
    // V tile t is needed a turn after K tile t.
    uint64_t* const k_full = reinterpret_cast<uint64_t*>(base_ptr + L::kBar);
    uint64_t* const k_empty = k_full + kKStages;
    uint64_t* const v_full = k_empty + kKStages;
    uint64_t* const v_empty = v_full + kVStages;
    uint64_t* const q_full = v_empty + kVStages;
    uint64_t* const q_empty = q_full + 2;
    if (threadIdx.x == 0) {
        // The producer's expect_tx arrive + its 32 lanes' cp.async arrives; one arrive per consumer warp.
        for (int s = 0; s < kKStages; ++s) {
            sm90::mbar_init(&k_full[s], 1 + 32);
            sm90::mbar_init(&k_empty[s], 8);
        }
        for (int s = 0; s < kVStages; ++s) {
            sm90::mbar_init(&v_full[s], 1 + 32);
            sm90::mbar_init(&v_empty[s], 8);
        }
        for (int b = 0; b < 2; ++b) {
            sm90::mbar_init(&q_full[b], 32);  // the producer's lanes' cp.async arrives
            sm90::mbar_init(&q_empty[b], 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    const int32_t group = p.num_q_heads / p.num_kv_heads;
    const int32_t num_units = p.num_work_items * p.num_kv_heads;
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;

    if (wg == 0) {
        sm90::warpgroup_reg_dealloc<40>();
        // The producer warp (split_producer: warp 0 fills the K ring and the query buffers, warp 1 the V ring).
        const int producer = threadIdx.x / 32;
        if (producer >= (split_producer ? 2 : 1)) return;
        if (lane == 0) {
            sm90::tma_prefetch_map(&map_k);
            sm90::tma_prefetch_map(&map_v);
            if (tail_boxes) {
                sm90::tma_prefetch_map(&map_k8);
                sm90::tma_prefetch_map(&map_v8);
            }
        }
        uint32_t it = 0, uc = 0;
        for (int32_t u = ws_unit(0, alternate); u < num_units; u = ws_unit(int32_t(++uc), alternate)) {
            int32_t item_index;
            const int32_t kvh = ws_unit_head(u, p.num_work_items, p.num_kv_heads, item_index);
            const ws_item item = ws_locate(p, item_index, group);
            if (kQByProducer && producer == 0) {
                // The item's 128 query rows (zeros past the last row) into query buffer uc % 2, once the consumers
                // are done with its previous item.
                const int qb = uc % 2;
                sm90::mbar_wait(&q_empty[qb], ((uc / 2) & 1) ^ 1);
                const uint32_t q_dst = q_s + qb * L::kQBytes;
                for (int v = lane; v < kRows * kChunks; v += 32) {
                    const int rr = v / kChunks, chunk = v % kChunks;
                    const int32_t r = item.row0 + rr;
                    const bool valid = r < item.total_rows;
                    const bf16* src =
                        valid ? p.q +
                                    (size_t(item.q_begin + r / group) * p.num_q_heads + kvh * group + r % group) *
                                        kHeadDim +
                                    chunk * 8
                              : p.q;
                    cp_async_16(q_dst + panel_offset<kRows>(rr, chunk), src, valid);
                }
                sm90::cp_async_arrive_on(&q_full[qb]);
            }
            // Tile t of this item is tile it + t of the CTA in both rings. Order: K 0, then (K t + 1, V t): the
            // order the consumers use them in.
            // A ring's tiles have `dim` columns (head_dim for K, v_head_dim for V): dim / 64 panels of boxes.
            // map: boxes of box_rows keys; map8: of 8 keys (tail_boxes).
            const auto load = [&](int32_t t, const CUtensorMap* map, const CUtensorMap* map8, const bf16* cache,
                                  uint32_t ring_base, uint64_t* ring_full, uint64_t* ring_empty, uint32_t stages,
                                  int32_t dim) {
                const int panels = dim / 64, chunks = dim / 8;
                const uint32_t tile_bytes = uint32_t(kKeys) * uint32_t(dim) * 2;
                const uint32_t i = it + uint32_t(t);
                const int s = i % stages;
                const int32_t kv0 = t * kKeys;
                const int32_t keys = min(kKeys, item.kv_end - kv0);
                const int32_t whole = keys / box_rows;  // boxes of box_rows keys by TMA
                // With tail_boxes, the keys after them in boxes of 8 (box_rows / 8 - 1 at most: boxes start on a
                // multiple of 8 within a block whose size box_rows divides, so none crosses a block).
                const int32_t small = tail_boxes ? (keys - whole * box_rows) / 8 : 0;
                const int32_t boxed = whole * box_rows + small * 8;
                const uint32_t dst = ring_base + s * tile_bytes;
                // Lane b's block-table entry is read before the wait for the stage, so that its latency overlaps it.
                // Lanes below whole: box_rows keys from kv0 + lane * box_rows; the next `small` lanes: 8 keys each.
                const bool big = lane < whole, has_box = lane < whole + small;
                const int32_t key0 = big ? lane * box_rows : whole * box_rows + (lane - whole) * 8;
                int32_t slot = 0;
                if (has_box) {
                    const int32_t pos = kv0 + key0;
                    slot = item.table[pos / p.block_size] * p.block_size + pos % p.block_size;
                }
                sm90::mbar_wait(&ring_empty[s], ((i / stages) & 1) ^ 1);
                // Lane b issues box b (at most 16 big boxes a tile: box_rows >= 8; whole + small <= 31), so that the
                // block-table reads overlap; the expected bytes are set before any box is issued.
                if (lane == 0) sm90::mbar_arrive_expect_tx(&ring_full[s], uint32_t(boxed) * 128 * panels);
                __syncwarp();
                if (has_box) {
                    const CUtensorMap* m = big ? map : map8;
                    for (int pn = 0; pn < panels; ++pn)
                        sm90::tma_load_3d(dst + pn * L::kPanelBytes + uint32_t(key0) * 128, m, pn * 64, kvh, slot,
                                          &ring_full[s]);
                }
                // The rest of the tile (the last tile only): keys below kv_end copied, the others zeros.
                for (int32_t v = boxed * chunks + lane; v < kKeys * chunks; v += 32) {
                    const int j = v / chunks, chunk = v % chunks;
                    const int32_t pos = kv0 + j;
                    const bool valid = pos < item.kv_end;
                    size_t off = 0;
                    if (valid) {
                        const size_t slot = size_t(item.table[pos / p.block_size]) * p.block_size + pos % p.block_size;
                        off = (slot * p.num_kv_heads + kvh) * size_t(dim) + chunk * 8;
                    }
                    cp_async_16(dst + panel_offset<kKeys>(j, chunk), cache + off, valid);
                }
                sm90::cp_async_arrive_on(&ring_full[s]);
            };
            // One warp: K 0, then (K t + 1, V t) for t < n - 1, then V n - 1 (2 n loads); split: warp 0 K 0 .. n - 1,
            // warp 1 V 0 .. n - 1. One call site, so that the load is inlined once (the producer has 40 registers).
            const int32_t n = item.num_tiles;
            for (int32_t step = 0; step < (split_producer ? n : 2 * n); ++step) {
                bool is_k = producer == 0;
                int32_t t = step;
                if (!split_producer && step > 0) {
                    const int32_t m = step - 1;
                    is_k = m < 2 * (n - 1) && m % 2 == 0;
                    t = m < 2 * (n - 1) ? m / 2 + (is_k ? 1 : 0) : n - 1;
                }
                if (is_k)
                    load(t, &map_k, &map_k8, p.k_cache, k_s, k_full, k_empty, kKStages, kHeadDim);
                else
                    load(t, &map_v, &map_v8, p.v_cache, v_s, v_full, v_empty, kVStages, kVDim);
            }
            it += uint32_t(item.num_tiles);
        }
        return;
    }

    // Consumer warpgroups 1 and 2: rows 64 c .. 64 c + 63 of each item.
    sm90::warpgroup_reg_alloc<232>();
    const int c = wg - 1;
    const int wtid = threadIdx.x - 128 * wg, warp = wtid / 32;  // warp within the warpgroup
    const int g = lane / 4, t4 = lane % 4;
    const float scale_log2 = p.scale * 1.4426950408889634f;
    const auto sched_sync = [&] {
        if constexpr (kPingPong) sm90::named_barrier_sync<256>(kWsSchedBarrier + c);
    };
    const auto sched_arrive = [&] {
        if constexpr (kPingPong) sm90::named_barrier_arrive<256>(kWsSchedBarrier + (1 - c));
    };
    if (c == 1) sched_arrive();  // warpgroup 1 takes the first turn
    const auto release = [&](uint64_t* ring_empty, int stage) {
        __syncwarp();
        if (lane == 0) sm90::mbar_arrive(&ring_empty[stage]);
    };
    // S = Q K^T of the tile in stage `stage`, issued (committed, not waited for).
    uint32_t q_rows = q_s + uint32_t(c) * 64 * 128;  // this warpgroup's rows of the current query buffer
    const auto issue_scores = [&](float(&s)[64], int stage) {
        const uint32_t k_tile = k_s + stage * L::kKTileBytes;
#pragma unroll
        for (int ks = 0; ks < kDSteps; ++ks) {
            const uint32_t col = uint32_t(ks % 4) * 32;
            wgmma_m64n128k16_ss(s, smem_desc(q_rows + (ks / 4) * (kRows * 128) + col, 16),
                                smem_desc(k_tile + (ks / 4) * L::kPanelBytes + col, 16), ks > 0);
        }
    };
    float o[kVPanels][32];
    const auto issue_values = [&](const uint32_t(&a)[8][4], int stage) {
        const uint32_t v_tile = v_s + stage * L::kVTileBytes;
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
            if constexpr (kPv == kPvPanels) {
#pragma unroll
                for (int pn = 0; pn < kVPanels; ++pn)
                    wgmma_m64n64k16_rs<1>(o[pn], a[kk], smem_desc(v_tile + pn * L::kPanelBytes + kk * 16 * 128, 1024));
            } else {
                wgmma_m64n128k16_rs_t(o[0], o[kVPanels - 1], a[kk],
                                      smem_desc2(v_tile + kk * 16 * 128, L::kPanelBytes, 1024));
            }
        }
    };

    uint32_t it = 0, uc = 0;
    // The next unit's item is read at the start of this one, so that its loads are not on the path between units.
    int32_t next_index;
    ws_unit_head(min(ws_unit(0, alternate), num_units - 1), p.num_work_items, p.num_kv_heads, next_index);
    ws_item next_item = ws_locate(p, next_index, group);
    for (int32_t u = ws_unit(0, alternate); u < num_units; u = ws_unit(int32_t(++uc), alternate)) {
        int32_t item_index;
        const int32_t kvh = ws_unit_head(u, p.num_work_items, p.num_kv_heads, item_index);
        const ws_item item = next_item;
        if (const int32_t next = ws_unit(int32_t(uc) + 1, alternate); next < num_units) {
            ws_unit_head(next, p.num_work_items, p.num_kv_heads, next_index);
            next_item = ws_locate(p, next_index, group);
        }
        const int32_t wg_row0 = item.row0 + c * 64;
        const int qb = kQByProducer ? int(uc % 2) : 0;
        const uint32_t q_buf = q_s + qb * L::kQBytes;
        q_rows = q_buf + uint32_t(c) * 64 * 128;
        if constexpr (kQByProducer) {
            sm90::mbar_wait(&q_full[qb], (uc / 2) & 1);
            fence_proxy_async();  // the rows came through cp.async (generic proxy); wgmma reads them
        } else {
            // This warpgroup's 64 query rows (zeros past the last row); every warp of it is done with the rows
            // (the last item's output staging) before they are overwritten.
            sm90::named_barrier_sync<128>(kWsWgBarrier + c);
            for (int v = wtid; v < 64 * kChunks; v += 128) {
                const int rr = v / kChunks, chunk = v % kChunks;
                const int32_t r = wg_row0 + rr;
                const bool valid = r < item.total_rows;
                const bf16* src =
                    valid
                        ? p.q +
                              (size_t(item.q_begin + r / group) * p.num_q_heads + kvh * group + r % group) * kHeadDim +
                              chunk * 8
                        : p.q;
                cp_async_16(q_buf + panel_offset<kRows>(c * 64 + rr, chunk), src, valid);
            }
            cp_async_commit();
            cp_async_wait<0>();
            fence_proxy_async();
            sm90::named_barrier_sync<128>(kWsWgBarrier + c);
        }

        const int32_t warp_row0 = wg_row0 + warp * 16;
        int32_t pos[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) pos[h] = item.start + (warp_row0 + g + 8 * h) / group;
        const int32_t warp_first_pos = item.start + warp_row0 / group;
        // Register definitions stay where they are written (fence_accumulators, keep_fragments), never sunk past
        // the issue of a later wgmma that reads them: ptxas would serialise every wgmma.
#pragma unroll
        for (int pn = 0; pn < kVPanels; ++pn) {
#pragma unroll
            for (int i = 0; i < 32; ++i) o[pn][i] = 0.f;
            fence_accumulators(o[pn]);
        }
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];
        uint32_t a[8][4];
        const int32_t n = item.num_tiles;

        // Tile 0: S, its softmax, P.
        int prev = it % kVStages;  // the V stage of the tile whose P V is issued next
        {
            float s[64];
            const int stage = it % kKStages;
            sm90::mbar_wait(&k_full[stage], (it / kKStages) & 1);
            if (n == 1) fence_proxy_async();  // the tile's cp.async part (generic proxy) is read by wgmma
            sched_sync();
            wgmma_fence();
            issue_scores(s, stage);
            wgmma_commit();
            sched_arrive();
            wgmma_wait<0>();
            fence_accumulators(s);
            release(k_empty, stage);
            ws_softmax(s, m, l, alpha, pos, 0, kKeys - 1 > warp_first_pos, t4, scale_log2);
            ws_pack(s, a);
            keep_fragments(a);
            ++it;
        }
        for (int32_t t = 1; t < n; ++t, ++it) {
            const int stage = it % kKStages;
            float s[64];
            sm90::mbar_wait(&k_full[stage], (it / kKStages) & 1);
            sm90::mbar_wait(&v_full[prev], ((it - 1) / kVStages) & 1);
            if (t == n - 1) fence_proxy_async();
            sched_sync();
            wgmma_fence();
            issue_scores(s, stage);
            wgmma_commit();
            issue_values(a, prev);
            wgmma_commit();
            sched_arrive();
            wgmma_wait<1>();  // S
            fence_accumulators(s);
            release(k_empty, stage);
            ws_softmax(s, m, l, alpha, pos, t * kKeys, t * kKeys + kKeys - 1 > warp_first_pos, t4, scale_log2);
            wgmma_wait<0>();  // P V of the previous tile
            keep_fragments(a);
#pragma unroll
            for (int pn = 0; pn < kVPanels; ++pn) fence_accumulators(o[pn]);
            release(v_empty, prev);
#pragma unroll
            for (int pn = 0; pn < kVPanels; ++pn)
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    o[pn][4 * j + 0] *= alpha[0];
                    o[pn][4 * j + 1] *= alpha[0];
                    o[pn][4 * j + 2] *= alpha[1];
                    o[pn][4 * j + 3] *= alpha[1];
                }
#pragma unroll
            for (int pn = 0; pn < kVPanels; ++pn) fence_accumulators(o[pn]);
            ws_pack(s, a);  // after the wait: P's registers are not redefined while a P V reads them
            keep_fragments(a);
            prev = it % kVStages;
        }
        sm90::mbar_wait(&v_full[prev], ((it - 1) / kVStages) & 1);
        fence_proxy_async();  // the last tile's cp.async part
        sched_sync();
        wgmma_fence();
        issue_values(a, prev);
        wgmma_commit();
        sched_arrive();
        wgmma_wait<0>();
        keep_fragments(a);
#pragma unroll
        for (int pn = 0; pn < kVPanels; ++pn) fence_accumulators(o[pn]);
        release(v_empty, prev);

        // Normalise, stage the warp's 16 rows in its own rows of the query tile, write whole rows.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            l[h] += __shfl_xor_sync(detail::kFullMask, l[h], 1);
            l[h] += __shfl_xor_sync(detail::kFullMask, l[h], 2);
            const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
            const int row = c * 64 + warp * 16 + g + 8 * h;
#pragma unroll
            for (int pn = 0; pn < kVPanels; ++pn)
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const uint32_t packed = pack_bf16(o[pn][4 * j + 2 * h] * inv, o[pn][4 * j + 2 * h + 1] * inv);
                    sm90::st_shared_b32(q_buf + panel_offset<kRows>(row, 8 * pn + j) + t4 * 4, packed);
                }
        }
        __syncwarp();
        for (int v = lane; v < 16 * kVChunks; v += 32) {
            const int rr = v / kVChunks, chunk = v % kVChunks;
            const int32_t r = warp_row0 + rr;
            if (r >= item.total_rows) continue;
            detail::bf16x8 x;
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(reinterpret_cast<uint32_t*>(&x)[0]), "=r"(reinterpret_cast<uint32_t*>(&x)[1]),
                           "=r"(reinterpret_cast<uint32_t*>(&x)[2]), "=r"(reinterpret_cast<uint32_t*>(&x)[3])
                         : "r"(q_buf + panel_offset<kRows>(c * 64 + warp * 16 + rr, chunk))
                         : "memory");
            const int32_t token = item.q_begin + r / group, head = kvh * group + r % group;
            *reinterpret_cast<detail::bf16x8*>(p.out + (size_t(token) * p.num_q_heads + head) * kVDim + chunk * 8) = x;
        }
        if constexpr (kQByProducer) {
            __syncwarp();  // the warp's staged rows are read
            if (lane == 0) sm90::mbar_arrive(&q_empty[qb]);
        }
    }
    if (c == 0) sched_sync();  // the other warpgroup's last turn handed back
#endif
}

}  // namespace

namespace {

/// Tensor map of a KV cache [slots][num_kv_heads][head_dim] (BF16) for boxes of 64 columns x 1 head x box_rows
/// slots, 128-byte swizzle. The kernel reads only slots the block table names, so the slot extent is the int32
/// coordinate range (the cache's size is not part of paged_attention_params).
CUtensorMap make_cache_map(const bf16* cache, int32_t num_kv_heads, int32_t head_dim, int32_t box_rows) {
    CUtensorMap map{};
    const cuuint64_t dims[3] = {cuuint64_t(head_dim), cuuint64_t(num_kv_heads), cuuint64_t(0x7fffffff)};
    const cuuint64_t strides[2] = {cuuint64_t(head_dim) * sizeof(bf16),
                                   cuuint64_t(num_kv_heads) * head_dim * sizeof(bf16)};
    const cuuint32_t box[3] = {64, 1, cuuint32_t(box_rows)};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    const CUresult r =
        sm90::encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<bf16*>(cache), dims, strides, box,
                             elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    ZMOE_KERNEL_REQUIRE(r == CUDA_SUCCESS, "paged_attention: cuTensorMapEncodeTiled failed for the KV cache");
    return map;
}

/// Keys per TMA box: the largest power of two from 8 to max_rows that divides the block size (0: none does). Small
/// boxes leave fewer keys of an item's last tile to the cp.async path (items end on a multiple of 16 keys when
/// 128 rows are 16 tokens of 8 heads).
int32_t ws_box_rows(int32_t block_size, int32_t max_rows = 128) {
    for (int32_t r = max_rows; r >= 8; r /= 2)
        if (block_size % r == 0) return r;
    return 0;
}

struct ws_variant {
    const char* name;
    int pv;                  // ws_pv (head dim 128; head dim 64 always kPvPanels)
    int k_stages, v_stages;  // the K and V rings
    bool q_by_producer;      // two query buffers the producer fills, else one the consumers fill
    int32_t max_box_rows;
    bool alternate = true;        // ws_unit's walk (false: a plain stride)
    bool tail_boxes = false;      // the keys of an item's last tile past its whole boxes in boxes of 8, then cp.async
    bool split_producer = false;  // two producer warps: one for the K ring, one for the V ring
};
constexpr ws_variant kWsVariants[] = {
    {"ws", kPvWide, 3, 3, false, 16},
    {"ws_panels", kPvPanels, 3, 3, false, 16},
    {"ws_k3", kPvWide, 3, 2, true, 16},
    {"ws_2", kPvWide, 2, 2, true, 16},
    {"ws_box128", kPvWide, 3, 3, false, 128},
    {"ws_stride", kPvWide, 3, 3, false, 16, false},
    {"ws_tail8", kPvWide, 3, 3, false, 128, true, true},
    {"ws_split", kPvWide, 3, 3, false, 16, true, false, true},
    {"ws_split_tail8", kPvWide, 3, 3, false, 128, true, true, true},
};

}  // namespace

namespace detail {

bool paged_attention_wgmma_supported(int32_t head_dim) {
    return (head_dim == 64 || head_dim == 128) && device_has_wgmma();
}

void launch_paged_attention_wgmma(const paged_attention_params& p, cudaStream_t stream) {
    require_paged_attention_params(p);
    ZMOE_KERNEL_REQUIRE(
        paged_attention_wgmma_supported(p.head_dim) && (p.v_head_dim == 0 || p.v_head_dim == p.head_dim),
        "paged_attention: the wgmma kernel needs compute capability 9.x, head_dim 64 or 128 and no "
        "separate v_head_dim");
    if (p.num_work_items == 0) return;
    const auto launch = [&]<int kHeadDim, int kWarpgroups>() {
        using tile = wg_tile<kHeadDim, kWarpgroups>;
        ZMOE_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_wgmma_kernel<kHeadDim, kWarpgroups>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(tile::kSmem)));
        const dim3 grid(p.num_work_items, p.num_kv_heads);
        prefill_attention_wgmma_kernel<kHeadDim, kWarpgroups><<<grid, tile::kThreads, tile::kSmem, stream>>>(p);
    };
    const bool wide = p.rows_per_item == 128;
    if (p.head_dim == 64) {
        if (wide)
            launch.template operator()<64, 2>();
        else
            launch.template operator()<64, 1>();
    } else {
        if (wide)
            launch.template operator()<128, 2>();
        else
            launch.template operator()<128, 1>();
    }
    ZMOE_CUDA_CHECK_LAUNCH();
}

const std::vector<std::string>& paged_attention_ws_variants() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (const ws_variant& w : kWsVariants) v.emplace_back(w.name);
        return v;
    }();
    return names;
}

bool paged_attention_ws_dims_supported(int32_t head_dim, int32_t v_head_dim) {
    const bool same_v = v_head_dim == 0 || v_head_dim == head_dim;
    return device_has_wgmma() && (same_v ? head_dim == 64 || head_dim == 128 : head_dim == 192 && v_head_dim == 128);
}

bool paged_attention_ws_supported(const paged_attention_params& p) {
    return paged_attention_ws_dims_supported(p.head_dim, p.v_head_dim) && p.rows_per_item == 128 &&
           ws_box_rows(p.block_size, 8) > 0;
}

void launch_paged_attention_ws(const paged_attention_params& p, const std::string& variant, cudaStream_t stream) {
    require_paged_attention_params(p);
    ZMOE_KERNEL_REQUIRE(
        paged_attention_ws_supported(p),
        "paged_attention: the warp-specialised kernel needs compute capability 9.x, head dims (64, 64), "
        "(128, 128) or (192, 128), items of 128 rows and a block size that is a multiple of 8");
    const ws_variant* w = nullptr;
    for (const ws_variant& v : kWsVariants)
        if (variant == v.name) w = &v;
    ZMOE_KERNEL_REQUIRE(w != nullptr, "paged_attention: unknown warp-specialised variant");
    if (p.num_work_items == 0) return;
    const int32_t box_rows = ws_box_rows(p.block_size, w->max_box_rows);
    const CUtensorMap map_k = make_cache_map(p.k_cache, p.num_kv_heads, p.head_dim, box_rows);
    const int32_t v_dim = p.v_head_dim == 0 ? p.head_dim : p.v_head_dim;
    const CUtensorMap map_v = make_cache_map(p.v_cache, p.num_kv_heads, v_dim, box_rows);
    const CUtensorMap map_k8 = w->tail_boxes ? make_cache_map(p.k_cache, p.num_kv_heads, p.head_dim, 8) : map_k;
    const CUtensorMap map_v8 = w->tail_boxes ? make_cache_map(p.v_cache, p.num_kv_heads, v_dim, 8) : map_v;
    const int32_t units = p.num_work_items * p.num_kv_heads;
    const int grid = std::min(units, sm90::current_device().sms);
    const auto
        launch = [&]<int kHeadDim, int kKStages, int kVStages, int kPv, bool kQByProducer, int kVDim = kHeadDim>() {
        const auto kernel = prefill_attention_ws_kernel<kHeadDim, kVDim, kKStages, kVStages, kPv, true, kQByProducer>;
        constexpr uint32_t smem = ws_layout < kHeadDim, kVDim, kKStages, kVStages, kQByProducer ? 2 : 1 > ::kSmem;
        static_assert(smem <= 227 * 1024, "shared memory of one CTA");
        ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        kernel<<<grid, kWsThreads, smem, stream>>>(map_k, map_v, map_k8, map_v8, p, box_rows, w->tail_boxes,
                                                   w->alternate, w->split_producer);
    };
    if (p.head_dim == 192) {
        // MLA's expanded form: 2 K and 2 V stages (three of 48 + 32 KiB do not fit beside the 48 KiB query tile),
        // one query buffer, the wide P V; the variant's box size and walk.
        launch.template operator()<192, 2, 2, kPvWide, false, 128>();
    } else if (p.head_dim == 64) {
        if (w->k_stages == 3 && w->v_stages == 3)
            launch.template operator()<64, 3, 3, kPvPanels, false>();
        else if (w->k_stages == 3)
            launch.template operator()<64, 3, 2, kPvPanels, true>();
        else
            launch.template operator()<64, 2, 2, kPvPanels, true>();
    } else if (w->k_stages == 3 && w->v_stages == 3) {
        if (w->pv == kPvPanels)
            launch.template operator()<128, 3, 3, kPvPanels, false>();
        else
            launch.template operator()<128, 3, 3, kPvWide, false>();
    } else if (w->k_stages == 3) {
        launch.template operator()<128, 3, 2, kPvWide, true>();
    } else {
        launch.template operator()<128, 2, 2, kPvWide, true>();
    }
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace zmoe::kernels
