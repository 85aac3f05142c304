// Paged attention for mixed batches: prefill chunks and decodes in one launch, causal, GQA, BF16 tensor cores
// (mma.sync m16n8k16, fp32 accumulate) with the FlashAttention-2 structure.
//
// Work: one block per (work item, KV head). A work item is kAttentionRowsPerItem rows of one sequence, where a row
// is a (query token, query head) pair of the heads sharing this KV head: a decode of a model with 8 query heads per
// KV head fills 8 rows, a prefill chunk packs 8 tokens x 8 heads in one item, so the group's heads share every K/V
// tile the block loads. Four warps own 16 rows each.
//
// Per block: the item's query rows land in shared memory (cp.async) and go to registers as mma A fragments (head
// dims up to 128; 256 re-reads them from shared memory each tile). The block walks the sequence's KV in tiles of
// kKeys keys through its block table, two shared-memory stages deep (cp.async, the next tile's copies in flight
// while the current one is multiplied), rows of 16-byte chunks XOR-swizzled so that ldmatrix reads 8 rows without
// bank conflicts. Per warp and tile: S = Q K^T in registers, the causal mask only on tiles that cross a row's
// position (tiles past the warp's last position are skipped), the online softmax on the accumulators (exp2 with a
// log2(e)-prescaled scale; row maxima and rescaling per tile, the row sums reduced across the quad once at the end),
// P rounded to BF16 in registers and used directly as the A operand of O += P V (V through ldmatrix.trans). The
// output is normalised, staged through the query's shared memory and written in 16-byte rows.

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/dispatch.cuh"
#include "kernels/mma_sm80.cuh"
#include "kernels/paged_attention_sm90.hpp"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kAttentionRowsPerItem;  // 16 rows per warp
static_assert(kRows == kWarps * 16);

/// kHeadDim: of Q and K; kVDim (<= kHeadDim): of V and the output (MLA's expanded form: 192 and 128).
template <int kHeadDim, int kVDim>
struct prefill_tile {
    static_assert(kVDim <= kHeadDim, "the output rows are staged in the query's rows");
    static constexpr int kKeys = kHeadDim >= 256 ? 32 : 64;                                      // keys per K/V tile
    static constexpr bool kQInRegisters = kHeadDim <= 128 || (kHeadDim <= 192 && kVDim <= 128);  // 256: no room
    static constexpr int kChunks = kHeadDim / 8;                                                 // 16-byte chunks
    static constexpr int kVChunks = kVDim / 8;
    static constexpr int kStages = 2;
    // Byte layout: q [kRows][kHeadDim] | k [kStages][kKeys][kHeadDim] | v [kStages][kKeys][kVDim], bf16,
    // every row's chunks swizzled (chunk_offset).
    static constexpr uint32_t kQBytes = uint32_t(kRows) * kHeadDim * 2;
    static constexpr uint32_t kTileBytes = uint32_t(kKeys) * kHeadDim * 2;
    static constexpr uint32_t kVTileBytes = uint32_t(kKeys) * kVDim * 2;
    static constexpr uint32_t kQ = 0, kK = kQBytes, kV = kK + kStages * kTileBytes, kTotal = kV + kStages * kVTileBytes;
};

/// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of rows of kChunks chunks: the chunk index is XORed
/// with bits of the row so that the 8 rows one ldmatrix matrix reads (same logical chunk) fall in 8 different
/// 16-byte bank groups.
template <int kChunks>
__device__ __forceinline__ uint32_t chunk_offset(int row, int chunk) {
    if constexpr (kChunks >= 8) {
        return uint32_t(row * kChunks + (chunk ^ (row & 7))) * 16;
    } else {
        return uint32_t(row * kChunks + (chunk ^ ((row / (8 / kChunks)) & (kChunks - 1)))) * 16;
    }
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

template <int kHeadDim, int kVDim>
__global__ void __launch_bounds__(kThreads, 2) prefill_attention_kernel(const paged_attention_params p) {
    using tile = prefill_tile<kHeadDim, kVDim>;
    constexpr int kKeys = tile::kKeys, kChunks = tile::kChunks, kVChunks = tile::kVChunks;
    constexpr int kDSteps = kHeadDim / 16;  // k-steps of Q K^T
    constexpr int kKeyTiles = kKeys / 8;    // n-tiles of S
    constexpr int kDimTiles = kVDim / 8;    // n-tiles of O
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t smem_base = uint32_t(__cvta_generic_to_shared(smem));
    const uint32_t q_s = smem_base + tile::kQ, k_s = smem_base + tile::kK, v_s = smem_base + tile::kV;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t seq = p.work_items[2 * blockIdx.x], row0 = p.work_items[2 * blockIdx.x + 1];
    const int32_t kvh = blockIdx.y, group = p.num_q_heads / p.num_kv_heads;
    const int32_t q_begin = p.query_start[seq], total_rows = (p.query_start[seq + 1] - q_begin) * group;
    const int32_t start = p.start_pos[seq];
    const int32_t row_end = min(row0 + kRows, total_rows);
    const int32_t kv_end = start + (row_end - 1) / group + 1;  // keys the last row of this item sees
    const int32_t num_tiles = (kv_end + kKeys - 1) / kKeys;
    const int32_t* table = p.block_tables + size_t(seq) * p.max_blocks_per_seq;

    // This item's query rows (zeros past the last row), one commit group.
    for (int v = threadIdx.x; v < kRows * kChunks; v += kThreads) {
        const int rr = v / kChunks, chunk = v % kChunks;
        const int32_t r = row0 + rr;
        const bool valid = r < total_rows;
        const bf16* src =
            valid ? p.q + (size_t(q_begin + r / group) * p.num_q_heads + kvh * group + r % group) * kHeadDim + chunk * 8
                  : p.q;
        cp_async_16(q_s + chunk_offset<kChunks>(rr, chunk), src, valid);
    }
    cp_async_commit();

    // K and V tile `t` into stage `stage` (zeros past kv_end, so that P V never meets uninitialised memory).
    auto load_tile = [&](int32_t t, int stage) {
        const uint32_t k_dst = k_s + stage * tile::kTileBytes, v_dst = v_s + stage * tile::kVTileBytes;
        for (int v = threadIdx.x; v < kKeys * kChunks; v += kThreads) {
            const int j = v / kChunks, chunk = v % kChunks;
            const int32_t pos = t * kKeys + j;
            const bool valid = pos < kv_end;
            size_t slot = 0;
            if (valid) slot = size_t(table[pos / p.block_size]) * p.block_size + pos % p.block_size;
            const size_t row = slot * p.num_kv_heads + kvh;
            cp_async_16(k_dst + chunk_offset<kChunks>(j, chunk), p.k_cache + (valid ? row * kHeadDim + chunk * 8 : 0),
                        valid);
            if (kVDim == kHeadDim || chunk < kVChunks)
                cp_async_16(v_dst + chunk_offset<kVChunks>(j, chunk), p.v_cache + (valid ? row * kVDim + chunk * 8 : 0),
                            valid);
        }
    };
    load_tile(0, 0);
    cp_async_commit();

    // Rows g and g + 8 of the warp's 16 (g = lane / 4) are this thread's, at positions pos[0] and pos[1].
    const int g = lane / 4, t4 = lane % 4;
    const int32_t warp_row0 = row0 + warp * 16;
    int32_t pos[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) pos[h] = start + (warp_row0 + g + 8 * h) / group;
    const int32_t warp_first_pos = start + warp_row0 / group;
    // Keys of the warp's last valid row (-1: a warp without valid rows skips every tile).
    const int32_t warp_last_pos =
        warp_row0 < total_rows ? start + (min(warp_row0 + 15, total_rows - 1)) / group : int32_t(-1);
    const float scale_log2 = p.scale * 1.4426950408889634f;

    uint32_t q_frag[tile::kQInRegisters ? kDSteps : 1][4];
    float o[kDimTiles][4];
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

    // ldmatrix lane addresses: A (Q) rows lane % 16, chunk + lane / 16; K (non-transposed B) key lane % 8 of
    // matrix lane / 8 = (key half, chunk half); V (transposed B) key lane % 8 of matrix (key half, dim half).
    const int q_row = warp * 16 + lane % 16, q_chunk = lane / 16;
    const int k_key = (lane / 16) * 8 + lane % 8, k_chunk = (lane / 8) % 2;
    const int v_key = ((lane / 8) % 2) * 8 + lane % 8, v_chunk = lane / 16;

    for (int32_t t = 0; t < num_tiles; ++t) {
        const int stage = t % tile::kStages;
        if (t + 1 < num_tiles) load_tile(t + 1, (t + 1) % tile::kStages);
        cp_async_commit();   // possibly empty: keeps one group per tile
        cp_async_wait<1>();  // this thread's copies of tile t (and the query) have landed
        __syncthreads();     // ... and every other thread's
        if constexpr (tile::kQInRegisters) {
            if (t == 0) {
#pragma unroll
                for (int ks = 0; ks < kDSteps; ++ks)
                    detail::ldmatrix_x4(q_s + chunk_offset<kChunks>(q_row, 2 * ks + q_chunk), q_frag[ks]);
            }
        }
        const int32_t kv0 = t * kKeys;
        if (kv0 <= warp_last_pos) {
            const uint32_t k_tile = k_s + stage * tile::kTileBytes, v_tile = v_s + stage * tile::kVTileBytes;
            float s[kKeyTiles][4];
#pragma unroll
            for (int j = 0; j < kKeyTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int ks = 0; ks < kDSteps; ++ks) {
                uint32_t a_smem[4];
                if constexpr (!tile::kQInRegisters)
                    detail::ldmatrix_x4(q_s + chunk_offset<kChunks>(q_row, 2 * ks + q_chunk), a_smem);
                const uint32_t(&a)[4] = tile::kQInRegisters ? q_frag[tile::kQInRegisters ? ks : 0] : a_smem;
#pragma unroll
                for (int np = 0; np < kKeyTiles / 2; ++np) {
                    uint32_t b[4];
                    detail::ldmatrix_x4(k_tile + chunk_offset<kChunks>(np * 16 + k_key, 2 * ks + k_chunk), b);
                    detail::mma_bf16_16816(s[2 * np], a, b[0], b[1]);
                    detail::mma_bf16_16816(s[2 * np + 1], a, b[2], b[3]);
                }
            }
            if (kv0 + kKeys - 1 > warp_first_pos) {  // the tile crosses the diagonal of some row of this warp
#pragma unroll
                for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (kv0 + j * 8 + 2 * t4 + (e & 1) > pos[e / 2]) s[j][e] = -INFINITY;
            }
            // Online softmax per row h (accumulator elements 2h, 2h + 1); the tile's first key is at or before
            // every row's position (tiles are walked from key 0), so each row's running maximum is finite.
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float mx = m[h];
#pragma unroll
                for (int j = 0; j < kKeyTiles; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, 2));
                const float alpha = exp2f((m[h] - mx) * scale_log2);
                m[h] = mx;
                const float m_scaled = mx * scale_log2;
                float sum = 0.f;
#pragma unroll
                for (int j = 0; j < kKeyTiles; ++j) {
                    s[j][2 * h] = exp2f(fmaf(s[j][2 * h], scale_log2, -m_scaled));
                    s[j][2 * h + 1] = exp2f(fmaf(s[j][2 * h + 1], scale_log2, -m_scaled));
                    sum += s[j][2 * h] + s[j][2 * h + 1];
                }
                l[h] = l[h] * alpha + sum;
#pragma unroll
                for (int d = 0; d < kDimTiles; ++d) {
                    o[d][2 * h] *= alpha;
                    o[d][2 * h + 1] *= alpha;
                }
            }
            // O += P V: P's accumulators of key tiles 2kk and 2kk + 1 are the A fragment of k-step kk.
#pragma unroll
            for (int kk = 0; kk < kKeys / 16; ++kk) {
                const uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                       pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                       pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int dp = 0; dp < kDimTiles / 2; ++dp) {
                    uint32_t b[4];
                    detail::ldmatrix_x4_trans(v_tile + chunk_offset<kVChunks>(kk * 16 + v_key, 2 * dp + v_chunk), b);
                    detail::mma_bf16_16816(o[2 * dp], a, b[0], b[1]);
                    detail::mma_bf16_16816(o[2 * dp + 1], a, b[2], b[3]);
                }
            }
        }
        __syncthreads();  // stage t % kStages is refilled by the next iteration's copies
    }
    cp_async_wait<0>();

    // Normalise, stage the warp's 16 rows in its own rows of the query tile, then write whole rows.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(detail::kFullMask, l[h], 1);
        l[h] += __shfl_xor_sync(detail::kFullMask, l[h], 2);
        const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
        const int row = warp * 16 + g + 8 * h;
#pragma unroll
        for (int d = 0; d < kDimTiles; ++d) {
            const uint32_t packed = pack_bf16(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(q_s + chunk_offset<kChunks>(row, d) + t4 * 4), "r"(packed)
                         : "memory");
        }
    }
    __syncwarp();
    for (int v = lane; v < 16 * kVChunks; v += 32) {
        const int rr = v / kVChunks, chunk = v % kVChunks;
        const int32_t r = warp_row0 + rr;
        if (r >= total_rows) continue;
        detail::bf16x8 x;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(reinterpret_cast<uint32_t*>(&x)[0]), "=r"(reinterpret_cast<uint32_t*>(&x)[1]),
                       "=r"(reinterpret_cast<uint32_t*>(&x)[2]), "=r"(reinterpret_cast<uint32_t*>(&x)[3])
                     : "r"(q_s + chunk_offset<kChunks>(warp * 16 + rr, chunk))
                     : "memory");
        const int32_t token = q_begin + r / group, head = kvh * group + r % group;
        *reinterpret_cast<detail::bf16x8*>(p.out + (size_t(token) * p.num_q_heads + head) * kVDim + chunk * 8) = x;
    }
}

}  // namespace

int32_t paged_attention_rows_per_item(int32_t head_dim, int32_t v_head_dim) {
    if (v_head_dim != 0 && v_head_dim != head_dim)
        return detail::paged_attention_ws_dims_supported(head_dim, v_head_dim) ? 128 : kAttentionRowsPerItem;
    return detail::paged_attention_wgmma_supported(head_dim) ? 128 : kAttentionRowsPerItem;
}

bool paged_attention_dims_supported(int32_t head_dim, int32_t v_head_dim) {
    const bool plain = head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
    if (v_head_dim == 0 || v_head_dim == head_dim) return plain;
    return head_dim == 192 && v_head_dim == 128;
}

std::vector<int32_t> paged_attention_plan(std::span<const int32_t> query_start_host, int32_t num_q_heads,
                                          int32_t num_kv_heads, int32_t rows_per_item) {
    ZMOE_KERNEL_REQUIRE(rows_per_item == 64 || rows_per_item == 128, "paged_attention_plan: rows_per_item 64 or 128");
    std::vector<int32_t> items;
    const int32_t group = num_q_heads / num_kv_heads;
    for (size_t s = 0; s + 1 < query_start_host.size(); ++s) {
        const int32_t rows = (query_start_host[s + 1] - query_start_host[s]) * group;
        // Last rows first: they see the most keys, and starting the longest items early shortens the tail.
        for (int32_t r0 = (rows - 1) / rows_per_item * rows_per_item; r0 >= 0 && rows > 0; r0 -= rows_per_item) {
            items.push_back(int32_t(s));
            items.push_back(r0);
        }
    }
    return items;
}

void kv_slots_plan(std::span<const int32_t> block_table, int32_t start_pos, int32_t n, int32_t block_size,
                   int32_t* positions_out, int32_t* slots_out) {
    for (int32_t i = 0; i < n; ++i) {
        const int32_t pos = start_pos + i;
        positions_out[i] = pos;
        slots_out[i] = block_table[pos / block_size] * block_size + pos % block_size;
    }
}

namespace detail {

void require_paged_attention_params(const paged_attention_params& p) {
    ZMOE_KERNEL_REQUIRE(p.num_kv_heads > 0 && p.num_q_heads % p.num_kv_heads == 0,
                        "paged_attention: num_kv_heads must divide num_q_heads");
    ZMOE_KERNEL_REQUIRE(p.block_size > 0, "paged_attention: block_size must be positive");
    ZMOE_KERNEL_REQUIRE(paged_attention_dims_supported(p.head_dim, p.v_head_dim),
                        "paged_attention: (head_dim, v_head_dim) must be (d, 0 or d) for d in 16, 32, 64, 128, 256, "
                        "or (192, 128)");
    ZMOE_KERNEL_REQUIRE(p.rows_per_item == kAttentionRowsPerItem || p.rows_per_item == 128,
                        "paged_attention: rows_per_item must be 64 or 128");
}

}  // namespace detail

void launch_paged_attention(const paged_attention_params& p, cudaStream_t stream) {
    detail::require_paged_attention_params(p);
    ZMOE_KERNEL_REQUIRE(p.impl == paged_attention_impl::automatic || p.impl == paged_attention_impl::mma ||
                            p.impl == paged_attention_impl::wgmma,
                        "paged_attention: impl must be automatic, mma or wgmma");
    const bool same_v = p.v_head_dim == 0 || p.v_head_dim == p.head_dim;
    if (!same_v && p.impl == paged_attention_impl::automatic && p.rows_per_item == 128) {
        // MLA's expanded form over 128-row items: the warp-specialised kernel is the one built for those dims, with
        // one producer warp per K/V ring, TMA boxes of up to 128 keys (DeepSeek's expanded rows come in blocks of
        // 64 consecutive slots), 8-key boxes for the rest of each item's last tile (ws_split_tail8: 602 / 636
        // TFLOP/s against ws_tail8's 508 / 588 at 8 192 / 16 384 tokens, DeepSeek-V2-Lite's shape, one H100).
        ZMOE_KERNEL_REQUIRE(detail::paged_attention_ws_supported(p),
                            "paged_attention: head dims (192, 128) over 128-row items need the warp-specialised "
                            "kernel: compute capability 9.x and a block size that is a multiple of 8");
        if (p.num_work_items > 0) detail::launch_paged_attention_ws(p, "ws_split_tail8", stream);
        return;
    }
    const bool wgmma = p.impl == paged_attention_impl::wgmma ||
                       (p.impl == paged_attention_impl::automatic && same_v &&
                        (p.rows_per_item == 128 || detail::paged_attention_wgmma_supported(p.head_dim)));
    ZMOE_KERNEL_REQUIRE(!wgmma || (same_v && detail::paged_attention_wgmma_supported(p.head_dim)),
                        "paged_attention: the wgmma kernel (impl wgmma, or rows_per_item 128) needs compute capability "
                        "9.x, head_dim 64 or 128 and no separate v_head_dim");
    ZMOE_KERNEL_REQUIRE(wgmma || p.rows_per_item == kAttentionRowsPerItem,
                        "paged_attention: the mma kernel takes items of 64 rows");
    if (p.num_work_items == 0) return;
    if (wgmma) {
        // automatic: the warp-specialised kernel where it takes the launch (128-row items, block size a multiple
        // of 8), else the plain wgmma kernel. ws_split_tail8: one producer warp per K/V ring, boxes of up to 128
        // keys and 8-key tail boxes; on one H100 (Qwen3 shape) 559 / 595 / 548 TFLOP/s contiguous and 544 / 577 / 545
        // on 16-key pages at 8 192 / 16 384 / 32 768 tokens, against ws_tail8's 502 / 547 / 514 and 366 / 377 / 396.
        if (p.impl == paged_attention_impl::automatic && detail::paged_attention_ws_supported(p))
            detail::launch_paged_attention_ws(p, "ws_split_tail8", stream);
        else
            detail::launch_paged_attention_wgmma(p, stream);
        return;
    }
    const dim3 grid(p.num_work_items, p.num_kv_heads);
    auto launch = [&](auto kernel, uint32_t smem) {
        if (smem > 48 * 1024)
            ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        kernel<<<grid, kThreads, smem, stream>>>(p);
    };
    if (p.v_head_dim != 0 && p.v_head_dim != p.head_dim) {
        launch(prefill_attention_kernel<192, 128>, prefill_tile<192, 128>::kTotal);  // MLA's expanded form
    } else {
        DISPATCH_HEAD_DIM(p.head_dim, kHeadDim, {
            launch(prefill_attention_kernel<kHeadDim, kHeadDim>, prefill_tile<kHeadDim, kHeadDim>::kTotal);
        });
    }
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
