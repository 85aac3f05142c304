// Paged attention for mixed batches: prefill chunks and decodes in one launch, causal, GQA, BF16 tensor cores
// (WMMA 16x16x16, fp32 accumulate) with an online softmax in fp32 (flash-attention style).
//
// Work: one block per (work item, KV head). A work item is kAttentionRowsPerItem rows of one sequence, where a row
// is a (query token, query head) pair of the heads sharing this KV head: a decode of a model with 8 query heads per
// KV head fills 8 rows, a prefill chunk packs 8 tokens x 8 heads in one item. Four warps own 16 rows each; the
// block walks the sequence's KV in tiles of kKeys keys through its block table.

#include <mma.h>

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/dispatch.cuh"

namespace zmoe::kernels {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kAttentionRowsPerItem;  // 16 rows per warp
constexpr int kKeys = 64;                     // keys per KV tile
static_assert(kRows == kWarps * 16);

/// Shared memory of one block, in element strides padded against bank conflicts (WMMA needs 32-byte aligned
/// fragment pointers: every stride below keeps 16-row offsets on 32-byte boundaries).
template <int kHeadDim>
struct attention_smem {
    static constexpr int kQkStride = kHeadDim + 8;  // bf16 elements per row of q, k, v tiles
    static constexpr int kSStride = kKeys + 4;      // fp32 scores per row
    static constexpr int kPStride = kKeys + 8;      // bf16 probabilities per row
    static constexpr int kOStride = kHeadDim + 4;   // fp32 output accumulators per row
    // Byte layout:
    //   q: [kRows][kQkStride] bf16     this item's query rows (zeros past the last row)
    //   k: [kKeys][kQkStride] bf16     current K tile (zeros past the sequence's KV)
    //   v: [kKeys][kQkStride] bf16     current V tile (zeros past the sequence's KV)
    //   s: [kWarps][16][kSStride] f32  each warp's raw scores for the tile
    //   p: [kWarps][16][kPStride] bf16 each warp's probabilities for the tile
    //   o: [kWarps][16][kOStride] f32  each warp's unnormalised output
    static constexpr size_t kQBytes = size_t(kRows) * kQkStride * 2;
    static constexpr size_t kKBytes = size_t(kKeys) * kQkStride * 2;
    static constexpr size_t kSBytes = size_t(kWarps) * 16 * kSStride * 4;
    static constexpr size_t kPBytes = size_t(kWarps) * 16 * kPStride * 2;
    static constexpr size_t kOBytes = size_t(kWarps) * 16 * kOStride * 4;
    static constexpr size_t kQ = 0, kK = kQ + kQBytes, kV = kK + kKBytes, kS = kV + kKBytes, kP = kS + kSBytes,
                            kO = kP + kPBytes, kTotal = kO + kOBytes;
};

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(const paged_attention_params p) {
    using layout = attention_smem<kHeadDim>;
    constexpr int kVecsPerRow = kHeadDim / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16* q_s = reinterpret_cast<bf16*>(smem + layout::kQ);
    bf16* k_s = reinterpret_cast<bf16*>(smem + layout::kK);
    bf16* v_s = reinterpret_cast<bf16*>(smem + layout::kV);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* s_w = reinterpret_cast<float*>(smem + layout::kS) + warp * 16 * layout::kSStride;
    bf16* p_w = reinterpret_cast<bf16*>(smem + layout::kP) + warp * 16 * layout::kPStride;
    float* o_w = reinterpret_cast<float*>(smem + layout::kO) + warp * 16 * layout::kOStride;

    const int32_t seq = p.work_items[2 * blockIdx.x], row0 = p.work_items[2 * blockIdx.x + 1];
    const int32_t kvh = blockIdx.y, group = p.num_q_heads / p.num_kv_heads;
    const int32_t q_begin = p.query_start[seq], total_rows = (p.query_start[seq + 1] - q_begin) * group;
    const int32_t start = p.start_pos[seq];
    const int32_t row_end = min(row0 + kRows, total_rows);
    const int32_t kv_end = start + (row_end - 1) / group + 1;  // keys the last row of this item sees
    const int32_t* table = p.block_tables + size_t(seq) * p.max_blocks_per_seq;

    for (int32_t v = threadIdx.x; v < kRows * kVecsPerRow; v += kThreads) {
        const int32_t rr = v / kVecsPerRow, chunk = v % kVecsPerRow, r = row0 + rr;
        detail::bf16x8 x{};
        if (r < total_rows) {
            const int32_t token = q_begin + r / group, head = kvh * group + r % group;
            x = *reinterpret_cast<const detail::bf16x8*>(p.q + (size_t(token) * p.num_q_heads + head) * kHeadDim +
                                                         chunk * 8);
        }
        *reinterpret_cast<detail::bf16x8*>(q_s + rr * layout::kQkStride + chunk * 8) = x;
    }
    for (int32_t i = lane; i < 16 * layout::kOStride; i += 32) o_w[i] = 0.f;

    // Softmax state: lanes 2i and 2i+1 both own row i of the warp, each for half of the tile's keys.
    const int32_t my_row = row0 + warp * 16 + lane / 2;
    const bool row_valid = my_row < total_rows;
    const int32_t my_pos = start + my_row / group;
    const int32_t warp_last_row = min(row0 + warp * 16 + 15, total_rows - 1);
    const int32_t warp_kv_end = warp_last_row < row0 + warp * 16 ? 0 : start + warp_last_row / group + 1;
    const float scale_log2 = p.scale * 1.4426950408889634f;
    float m = -INFINITY, l = 0.f;

    for (int32_t kv0 = 0; kv0 < kv_end; kv0 += kKeys) {
        __syncthreads();  // previous tile fully consumed (and, first time, q_s written)
        for (int32_t v = threadIdx.x; v < kKeys * kVecsPerRow; v += kThreads) {
            const int32_t j = v / kVecsPerRow, chunk = v % kVecsPerRow, pos = kv0 + j;
            detail::bf16x8 kx{}, vx{};
            if (pos < kv_end) {
                const size_t slot = size_t(table[pos / p.block_size]) * p.block_size + pos % p.block_size;
                const size_t off = (slot * p.num_kv_heads + kvh) * kHeadDim + chunk * 8;
                kx = *reinterpret_cast<const detail::bf16x8*>(p.k_cache + off);
                vx = *reinterpret_cast<const detail::bf16x8*>(p.v_cache + off);
            }
            *reinterpret_cast<detail::bf16x8*>(k_s + j * layout::kQkStride + chunk * 8) = kx;
            *reinterpret_cast<detail::bf16x8*>(v_s + j * layout::kQkStride + chunk * 8) = vx;
        }
        __syncthreads();
        if (kv0 >= warp_kv_end) continue;  // every key of this tile is in the future of all this warp's rows

        // S = Q_w . K^T: K row-major [key][d] is K^T column-major.
        for (int n = 0; n < kKeys / 16; ++n) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.f);
#pragma unroll
            for (int kk = 0; kk < kHeadDim / 16; ++kk) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
                wmma::load_matrix_sync(a, q_s + warp * 16 * layout::kQkStride + kk * 16, layout::kQkStride);
                wmma::load_matrix_sync(b, k_s + n * 16 * layout::kQkStride + kk * 16, layout::kQkStride);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(s_w + n * 16, acc, layout::kSStride, wmma::mem_row_major);
        }
        __syncwarp();

        const int32_t row = lane / 2, c0 = (lane % 2) * (kKeys / 2);
        float s[kKeys / 2];
        float tile_max = -INFINITY;
#pragma unroll
        for (int c = 0; c < kKeys / 2; ++c) {
            const int32_t key = kv0 + c0 + c;
            s[c] = row_valid && key <= my_pos ? s_w[row * layout::kSStride + c0 + c] * scale_log2 : -INFINITY;
            tile_max = fmaxf(tile_max, s[c]);
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(detail::kFullMask, tile_max, 1));
        const float m_new = fmaxf(m, tile_max);
        const float alpha = m == -INFINITY ? 0.f : exp2f(m - m_new);
        float sum = 0.f;
#pragma unroll
        for (int c = 0; c < kKeys / 2; ++c) {
            const float pc = s[c] == -INFINITY ? 0.f : exp2f(s[c] - m_new);
            sum += pc;
            p_w[row * layout::kPStride + c0 + c] = __float2bfloat16(pc);
        }
        sum += __shfl_xor_sync(detail::kFullMask, sum, 1);
        l = l * alpha + sum;
        m = m_new;
        const int32_t d0 = (lane % 2) * (kHeadDim / 2);
#pragma unroll 8
        for (int d = 0; d < kHeadDim / 2; ++d) o_w[row * layout::kOStride + d0 + d] *= alpha;
        __syncwarp();

        // O_w += P_w . V
        for (int n = 0; n < kHeadDim / 16; ++n) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, o_w + n * 16, layout::kOStride, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < kKeys / 16; ++kk) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
                wmma::load_matrix_sync(a, p_w + kk * 16, layout::kPStride);
                wmma::load_matrix_sync(b, v_s + kk * 16 * layout::kQkStride + n * 16, layout::kQkStride);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(o_w + n * 16, acc, layout::kOStride, wmma::mem_row_major);
        }
        __syncwarp();
    }

    __syncwarp();
    if (!row_valid) return;
    const int32_t token = q_begin + my_row / group, head = kvh * group + my_row % group;
    bf16* out = p.out + (size_t(token) * p.num_q_heads + head) * kHeadDim;
    const float inv_l = l > 0.f ? 1.f / l : 0.f;
    const int32_t d0 = (lane % 2) * (kHeadDim / 2);
    for (int d = 0; d < kHeadDim / 2; d += 8) {
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = o_w[(lane / 2) * layout::kOStride + d0 + d + j] * inv_l;
        detail::store_f32x8(out + d0 + d, v);
    }
}

}  // namespace

std::vector<int32_t> paged_attention_plan(std::span<const int32_t> query_start_host, int32_t num_q_heads,
                                          int32_t num_kv_heads) {
    std::vector<int32_t> items;
    const int32_t group = num_q_heads / num_kv_heads;
    for (size_t s = 0; s + 1 < query_start_host.size(); ++s) {
        const int32_t rows = (query_start_host[s + 1] - query_start_host[s]) * group;
        // Last rows first: they see the most keys, and starting the longest items early shortens the tail.
        for (int32_t r0 = (rows - 1) / kRows * kRows; r0 >= 0 && rows > 0; r0 -= kRows) {
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

void launch_paged_attention(const paged_attention_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.num_kv_heads > 0 && p.num_q_heads % p.num_kv_heads == 0,
                        "paged_attention: num_kv_heads must divide num_q_heads");
    ZMOE_KERNEL_REQUIRE(p.block_size > 0, "paged_attention: block_size must be positive");
    if (p.num_work_items == 0) return;
    DISPATCH_HEAD_DIM(p.head_dim, kHeadDim, {
        constexpr size_t smem = attention_smem<kHeadDim>::kTotal;
        if (smem > 48 * 1024)
            ZMOE_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel<kHeadDim>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        const dim3 grid(p.num_work_items, p.num_kv_heads);
        paged_attention_kernel<kHeadDim><<<grid, kThreads, smem, stream>>>(p);
    });
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
