// Paged attention for mixed batches on Hopper (sm_90a): the work items and the contract of launch_paged_attention
// (kernels/paged_attention.cu), the matrix products on wgmma.
//
// One warpgroup (4 warps, 128 threads) per (work item, KV head): the item's 64 rows are the M of every wgmma (warp w
// owns rows 16w..16w+15, as in the mma.sync kernel, so the GQA packing, masking and softmax are the same). Shared
// memory holds the query tile and kStages stages of K/V tiles of kKeys keys, each tile in 64-column panels of 128-byte
// rows with the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)), which is both what wgmma's
// descriptors read and conflict-free for the cp.async writes. The copies come through the block table with
// cp.async, the next stages' in flight while the current one is multiplied.
// Per tile: S (64 x kKeys) = Q K^T by wgmma m64n64k16 with both operands from shared memory (K-major); the causal
// mask on tiles that cross a row's position; the online softmax on the accumulators (exp2, log2(e)-prescaled scale);
// P rounded to BF16 in registers and fed as wgmma's register A operand of O += P V, V read from shared memory as
// an N-major (transposed) B, one m64n64k16 per 64-column panel of V. Two blocks per SM: one block's softmax runs
// under the other's matrix products.

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/dispatch.cuh"
#include "kernels/grouped_gemm_sm90.hpp"
#include "kernels/mma_sm80.cuh"
#include "kernels/paged_attention_sm90.hpp"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 128;  // one warpgroup
constexpr int kRows = kAttentionRowsPerItem;
static_assert(kRows == 64, "the wgmma M is 64: one warpgroup per item");

using detail::attention_wgmma_variant;

template <int kHeadDim, attention_wgmma_variant kVariant>
struct wg_tile {
    static constexpr int kKeys = 64;
    static constexpr int kStages = kVariant == attention_wgmma_variant::overlap ? 3 : 2;
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

/// d (64 x 64, fp32) += A (64 x 16) . B (64 x 16)^T, both BF16, K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" ZMOE_WG_D0_31 "}, %32, %33, 1, 1, 1, 0, 0;\n"
                 : ZMOE_WG_ACC8(0), ZMOE_WG_ACC8(8), ZMOE_WG_ACC8(16), ZMOE_WG_ACC8(24)
                 : "l"(desc_a), "l"(desc_b));
}

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
        const float alpha = exp2f((m[h] - mx) * scale_log2);
        m[h] = mx;
        const float m_scaled = mx * scale_log2;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            s[4 * j + 2 * h] = exp2f(fmaf(s[4 * j + 2 * h], scale_log2, -m_scaled));
            s[4 * j + 2 * h + 1] = exp2f(fmaf(s[4 * j + 2 * h + 1], scale_log2, -m_scaled));
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

template <int kHeadDim, attention_wgmma_variant kVariant>
__global__ void __launch_bounds__(kThreads, 2) prefill_attention_wgmma_kernel(const paged_attention_params p) {
    using tile = wg_tile<kHeadDim, kVariant>;
    constexpr int kKeys = tile::kKeys, kChunks = tile::kChunks, kPanels = tile::kPanels, kStages = tile::kStages;
    constexpr int kDSteps = kHeadDim / 16;
    constexpr bool kQInRegisters = kVariant != attention_wgmma_variant::serial_q_smem;
    constexpr bool kOverlap = kVariant == attention_wgmma_variant::overlap;
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
    uint32_t q_frag[kDSteps][4];  // used with kQInRegisters only

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
            if constexpr (kQInRegisters)
                wgmma_m64n64k16_rs<0>(s, q_frag[ks], desc_k);
            else
                wgmma_m64n64k16_ss(s, smem_desc(q_s + (ks / 4) * (kRows * 128) + col, 16), desc_k);
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
    if constexpr (!kOverlap) {
        for (int32_t t = 0; t < num_tiles; ++t) {
            if (t + kStages - 1 < num_tiles) load_tile(t + kStages - 1);
            cp_async_commit();             // possibly empty: keeps one group per tile
            cp_async_wait<kStages - 1>();  // this thread's copies of tile t (and the query) have landed
            fence_proxy_async();           // ... visible to the tensor cores
            __syncthreads();               // ... and every other thread's
            if constexpr (kQInRegisters) {
                if (t == 0) load_query_fragments<kRows>(q_frag, q_s, warp, lane);
            }
            float s[32];
            issue_scores(s, t % kStages);
            wgmma_wait<0>();
            fence_accumulators(s);
            softmax_tile(s, o, m, l, pos, t * kKeys, t * kKeys + kKeys - 1 > warp_first_pos, t4, scale_log2);
            issue_values(s, t % kStages);
            wgmma_wait<0>();
#pragma unroll
            for (int pn = 0; pn < kPanels; ++pn) fence_accumulators(o[pn]);
            __syncthreads();  // stage t % kStages is refilled by a later iteration's copies
        }
    } else {
        // S of tile t + 1 is issued before the softmax of tile t, so that the tensor cores multiply while the
        // softmax runs; tile t's V and tile t + 1's K are both needed then, hence three stages.
        float s[32], s_next[32];
        static_assert(kStages == 3);
        cp_async_wait<kStages - 2>();  // the query and tile 0 (tile 1's copies may be in flight)
        fence_proxy_async();
        __syncthreads();
        load_query_fragments<kRows>(q_frag, q_s, warp, lane);
        issue_scores(s, 0);
        wgmma_wait<0>();
        fence_accumulators(s);
        for (int32_t t = 0; t < num_tiles; ++t) {
            // Stage (t + 2) % 3 held tile t - 1, fully consumed before the last iteration's closing barrier.
            if (t + kStages - 1 < num_tiles) load_tile(t + kStages - 1);
            cp_async_commit();
            const bool has_next = t + 1 < num_tiles;
            if (has_next) {
                cp_async_wait<kStages - 2>();  // tile t + 1 landed (tile t + 2's copies may be in flight)
                fence_proxy_async();
                __syncthreads();
                issue_scores(s_next, (t + 1) % kStages);
            }
            softmax_tile(s, o, m, l, pos, t * kKeys, t * kKeys + kKeys - 1 > warp_first_pos, t4, scale_log2);
            issue_values(s, t % kStages);
            wgmma_wait<0>();
            fence_accumulators(s_next);
#pragma unroll
            for (int pn = 0; pn < kPanels; ++pn) fence_accumulators(o[pn]);
#pragma unroll
            for (int i = 0; i < 32; ++i) s[i] = s_next[i];
            __syncthreads();  // stage t % kStages is refilled by the next iteration's copies
        }
    }
    cp_async_wait<0>();

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

}  // namespace

namespace detail {

bool paged_attention_wgmma_supported(int32_t head_dim) {
    return (head_dim == 64 || head_dim == 128) && device_has_wgmma();
}

attention_wgmma_variant default_attention_wgmma_variant() { return attention_wgmma_variant::overlap; }

void launch_paged_attention_wgmma(const paged_attention_params& p, cudaStream_t stream) {
    launch_paged_attention_wgmma(p, default_attention_wgmma_variant(), stream);
}

void launch_paged_attention_wgmma(const paged_attention_params& p, attention_wgmma_variant v, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(paged_attention_wgmma_supported(p.head_dim),
                        "paged_attention: the wgmma kernel needs compute capability 9.x and head_dim 64 or 128");
    ZMOE_KERNEL_REQUIRE(p.num_kv_heads > 0 && p.num_q_heads % p.num_kv_heads == 0,
                        "paged_attention: num_kv_heads must divide num_q_heads");
    ZMOE_KERNEL_REQUIRE(p.block_size > 0, "paged_attention: block_size must be positive");
    if (p.num_work_items == 0) return;
    const auto launch = [&]<int kHeadDim, attention_wgmma_variant kVariant>() {
        constexpr uint32_t smem = wg_tile<kHeadDim, kVariant>::kSmem;
        ZMOE_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_wgmma_kernel<kHeadDim, kVariant>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        const dim3 grid(p.num_work_items, p.num_kv_heads);
        prefill_attention_wgmma_kernel<kHeadDim, kVariant><<<grid, kThreads, smem, stream>>>(p);
    };
    const auto with_dim = [&]<attention_wgmma_variant kVariant>() {
        if (p.head_dim == 64)
            launch.template operator()<64, kVariant>();
        else
            launch.template operator()<128, kVariant>();
    };
    switch (v) {
        case attention_wgmma_variant::serial_q_smem:
            with_dim.template operator()<attention_wgmma_variant::serial_q_smem>();
            break;
        case attention_wgmma_variant::serial:
            with_dim.template operator()<attention_wgmma_variant::serial>();
            break;
        case attention_wgmma_variant::overlap:
            with_dim.template operator()<attention_wgmma_variant::overlap>();
            break;
        default:
            ZMOE_KERNEL_REQUIRE(false, "paged_attention: unknown wgmma variant");
    }
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace zmoe::kernels
