// Grouped expert GEMM for few rows per expert (decode batches: up to a few tens of rows per expert), bound by
// streaming the expert weights. Swap A/B: the weights are the M side of mma.sync m16n8k16 and an expert's rows the
// N side (8 per tile), so an expert with 3 rows reads its weights once and pads only the cheap side.
//
// One warp per (expert, 32 weight rows): with swiglu the rows are 16 gate rows and the 16 matching up rows (gate
// row j and up row j land in the same accumulator thread, so SiLU(gate) * up is done in registers); without, 32
// output columns. The warp streams its rows over K with 16-byte loads straight into registers (kChunks 32-wide K
// chunks in flight per batch, no shared memory, the loads bypass L1) and multiplies them against up to kTiles 8-row
// tiles of the expert's rows at once (an expert with more rows takes further passes over the same weights).
//
// The 16-byte loads do not follow mma.sync's fragment layout: a thread (group g = lane / 4, c = lane % 4) loads
// the K elements [8c, 8c + 8) of a 32-wide chunk from its rows and feeds elements 4s..4s+3 of them to the k-step s
// as the fragment's k indices {2c, 2c+1, 2c+8, 2c+9}. The B fragment (the row tile) is loaded with the same
// permutation of K, and a dot product does not depend on the order of K, so the products are exact.

#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/grouped_gemm_small.hpp"

namespace zmoe::kernels::detail {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 32;  // weight rows: two m16 tiles
constexpr int kChunkK = 32;       // K elements per chunk: 4 threads x 8

/// A 16-byte load that bypasses L1 (weights are read once). Kept apart from stream_load.cuh's detail::load_stream on
/// purpose: the same instruction, but a plain asm, not a volatile one, so the compiler is free to move these loads
/// across the (volatile) MMAs and to drop unused ones; the kernel was tuned with this form (see launch_tiles). Both
/// forms compile to the same sm_90a code with nvcc 13.0.
__device__ __forceinline__ uint4 load_stream(const bf16* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <bool kSwiglu, int kTiles, int kChunks>
__global__ void __launch_bounds__(kThreads) grouped_gemm_small_kernel(const grouped_gemm_params p) {
    const int32_t e = blockIdx.y;
    const int32_t start = p.expert_offsets[e], end = p.expert_offsets[e + 1];
    if (start >= end) return;
    const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    constexpr int kCols = kSwiglu ? kRowsPerWarp / 2 : kRowsPerWarp;  // output columns per warp
    const int32_t col0 = (blockIdx.x * kWarps + threadIdx.x / 32) * kCols;
    if (col0 >= p.n) return;
    const int32_t n_b = kSwiglu ? 2 * p.n : p.n;
    const bf16* b = p.b + size_t(e) * n_b * p.k;

    // This thread's weight rows: [m tile][fragment half (rows g, g + 8)].
    const bf16* w_row[2][2];
    bool w_ok[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int32_t col = kSwiglu ? col0 + mt * 8 + g : col0 + mt * 16 + hf * 8 + g;
            const int32_t row = kSwiglu && hf == 1 ? p.n + col : col;
            w_ok[mt][hf] = col < p.n;
            w_row[mt][hf] = b + size_t(w_ok[mt][hf] ? row : 0) * p.k + 8 * c;
        }

    for (int32_t r0 = start; r0 < end; r0 += 8 * kTiles) {
        // This thread's row of each tile (fragment column g); nullptr: padding, read as zeros.
        const bf16* x_row[kTiles];
        bool tile_live[kTiles];
#pragma unroll
        for (int nt = 0; nt < kTiles; ++nt) {
            const int32_t r = r0 + nt * 8 + g;
            tile_live[nt] = r0 + nt * 8 < end;  // warp-uniform
            const int32_t src = r < end ? (p.a_rows ? p.a_rows[r] : r) : -1;
            x_row[nt] = src >= 0 ? p.a + size_t(src) * p.k + 8 * c : nullptr;
        }
        float acc[2][kTiles][4] = {};
        for (int32_t k0 = 0; k0 < p.k; k0 += kChunkK * kChunks) {
            uint4 w[kChunks][2][2], x[kChunks][kTiles];
#pragma unroll
            for (int ch = 0; ch < kChunks; ++ch) {
                const int32_t kk = k0 + ch * kChunkK;
                const bool k_ok = kk + 8 * c < p.k;
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf)
                        w[ch][mt][hf] = k_ok && w_ok[mt][hf] ? load_stream(w_row[mt][hf] + kk) : make_uint4(0, 0, 0, 0);
#pragma unroll
                for (int nt = 0; nt < kTiles; ++nt)
                    x[ch][nt] = k_ok && x_row[nt] != nullptr ? __ldg(reinterpret_cast<const uint4*>(x_row[nt] + kk))
                                                             : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int ch = 0; ch < kChunks; ++ch)
#pragma unroll
                for (int s = 0; s < 2; ++s)
#pragma unroll
                    for (int nt = 0; nt < kTiles; ++nt) {
                        if (!tile_live[nt]) continue;
#pragma unroll
                        for (int mt = 0; mt < 2; ++mt)
                            mma_bf16(acc[mt][nt], word(w[ch][mt][0], 2 * s), word(w[ch][mt][1], 2 * s),
                                     word(w[ch][mt][0], 2 * s + 1), word(w[ch][mt][1], 2 * s + 1),
                                     word(x[ch][nt], 2 * s), word(x[ch][nt], 2 * s + 1));
                    }
        }
        // Accumulator (m16n8): d0, d1 = (row g, tile rows 2c, 2c + 1); d2, d3 = (row g + 8, the same tile rows).
#pragma unroll
        for (int nt = 0; nt < kTiles; ++nt) {
            if (!tile_live[nt]) continue;
            const int32_t r = r0 + nt * 8 + 2 * c;
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                const float* d = acc[mt][nt];
                if constexpr (kSwiglu) {
                    const int32_t col = col0 + mt * 8 + g;
                    if (col >= p.n) continue;
                    p.c[size_t(r) * p.n + col] = __float2bfloat16(d[0] / (1.f + __expf(-d[0])) * d[2]);
                    p.c[size_t(r + 1) * p.n + col] = __float2bfloat16(d[1] / (1.f + __expf(-d[1])) * d[3]);
                } else {
                    const int32_t col = col0 + mt * 16 + g;
                    if (col < p.n) {
                        p.c[size_t(r) * p.n + col] = __float2bfloat16(d[0]);
                        p.c[size_t(r + 1) * p.n + col] = __float2bfloat16(d[1]);
                    }
                    if (col + 8 < p.n) {
                        p.c[size_t(r) * p.n + col + 8] = __float2bfloat16(d[2]);
                        p.c[size_t(r + 1) * p.n + col + 8] = __float2bfloat16(d[3]);
                    }
                }
            }
        }
    }
}

template <bool kSwiglu, int kTiles, int kChunks>
void launch(const grouped_gemm_params& p, cudaStream_t stream) {
    constexpr int kCols = kSwiglu ? kRowsPerWarp / 2 : kRowsPerWarp;
    const int32_t warps = (p.n + kCols - 1) / kCols;
    const dim3 grid((warps + kWarps - 1) / kWarps, p.num_experts);
    grouped_gemm_small_kernel<kSwiglu, kTiles, kChunks><<<grid, kThreads, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

template <bool kSwiglu>
void launch_tiles(const grouped_gemm_params& p, cudaStream_t stream) {
    // Callers size max_rows as moe_permuted_rows_bound, so max_rows / num_experts - (row_align - 1) is about the
    // mean group: tiles held at once cover about twice the mean (the busier experts), beyond that another pass.
    // (Loads kept ahead of the MMAs by volatile asm, and 8 K chunks in flight for one tile, measured within 1-3% of
    // these on H200.)
    const int64_t mean = std::max<int64_t>(0, p.max_rows - int64_t(p.num_experts) * (p.row_align - 1)) / p.num_experts;
    if (mean <= 4)
        launch<kSwiglu, 1, 4>(p, stream);
    else if (mean <= 8)
        launch<kSwiglu, 2, 4>(p, stream);
    else
        launch<kSwiglu, 4, 2>(p, stream);
}

}  // namespace

bool grouped_gemm_small_supported(const grouped_gemm_params& p) {
    const auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    return p.row_align > 0 && p.row_align % 8 == 0 && p.k % 8 == 0 && p.n % 8 == 0 && aligned16(p.a) &&
           aligned16(p.b) && p.num_experts <= 65535;
}

void launch_grouped_gemm_small(const grouped_gemm_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(grouped_gemm_small_supported(p),
                        "grouped_gemm: the small-group kernel needs row_align % 8 == 0, n and k multiples of 8, "
                        "16-byte aligned a and b, at most 65535 experts");
    if (p.max_rows == 0 || p.n == 0 || p.num_experts == 0) return;
    if (p.swiglu)
        launch_tiles<true>(p, stream);
    else
        launch_tiles<false>(p, stream);
}

}  // namespace zmoe::kernels::detail
