// Block-scaled FP8 (e4m3) dense projections (launch_gemm_fp8): c[m, n] = W8A8(a[m, k], w[n, k]) with the format's
// promotion per 128-wide K block (docs/fp8.md). Two paths:
//
// Skinny (m <= 64, the decode steps; also any m where the grouped kernel's constraints fail): the weight rows are the
// MMA's M side and the tokens its N side (mma.sync m16n8k32 e4m3, fp32 accumulation), so one CTA covers 64 weight
// rows and up to 64 tokens. One pipeline stage is one K block: 64 rows x 128 e4m3 bytes of w (8 KB), the tokens'
// 128 bytes of a and their activation scales, streamed through a four-stage cp.async ring into XOR-swizzled
// 128-byte shared-memory rows read with ldmatrix (an 8-bit 16 x 32 fragment has the byte layout of a BF16 16 x 16
// one). Warp w owns weight rows [16 w, 16 w + 16) of the tile: per stage it multiplies its rows' 128-wide block for
// every token into a partial accumulator (four k32 MMAs, the first from zero), then promotes it into its fp32 sum
// scaled by a_scale[kb, token] x w_scale[row / 128, kb] (the CPU's linear_rows_fp8 arithmetic; a 64-row tile lies
// in one 128-row scale block). Too few tiles to fill the GPU (576 rows: 9) split k over a thread-block cluster of up
// to 8 CTAs, which reduces its fp32 partials through distributed shared memory in rank order (deterministic, no
// global scratch), as the BF16 skinny GEMM does. Ragged k: the copies are 16 bytes when k and the operands allow,
// else 4 or 1; out-of-range bytes are zero-filled so padding multiplies as zero.
//
// Large m: launch_grouped_gemm_fp8 (the routed experts' warp-specialised wgmma kernel) with a single group. Its
// group offsets live in device memory; a graph-capturable launch cannot write them per call, so they come from a
// constant table of pairs {0, 4 i} (a group's end rounded up to 4 rows: the kernel's bulk copies of a tile's
// activation scales move whole 16-byte units). Rows past m inside that rounding read zero-filled activations (the
// tensor map ends at m) and are never stored. Products of more rows than the table covers run in slices.

#include <cooperative_groups.h>

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cluster_sum.cuh"
#include "kernels/cuda_check.hpp"
#include "kernels/gemm_fp8.hpp"
#include "kernels/gemm_fp8_sm90.hpp"
#include "kernels/mma_sm80.cuh"
#include "kernels/pdl.cuh"
#include "kernels/stream_load.cuh"

namespace zmoe::kernels {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 16 * kWarps;  // weight rows per CTA
constexpr int kBlockK = 128;            // K per stage: one scale block, 128-byte shared-memory rows
constexpr int kMaxSplits = detail::kGemmFp8MaxSplits;
constexpr int kPartialStride = kTileRows + 4;  // fp32 partial tile [token][row]: conflict-free fragment stores

/// Shared-memory byte offset of 16-byte chunk `chunk` (0..7) of 128-byte row `row` (XOR swizzle: the eight rows an
/// ldmatrix phase reads sit in eight bank groups).
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

/// Copies kBytes (16 or 4) from src into shared memory at dst, or zero-fills them (nothing read) when !valid.
template <int kBytes>
__device__ __forceinline__ void cp_async(uint32_t dst, const void* src, bool valid) {
    const int bytes = valid ? kBytes : 0;
    if constexpr (kBytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void st_shared_u8(uint32_t addr, uint8_t v) {
    asm volatile("st.shared.u8 [%0], %1;\n" ::"r"(addr), "h"(uint16_t(v)) : "memory");
}

/// d += a . b for a 16 x 32 e4m3 A fragment (row-major), a 32 x 8 e4m3 B fragment (column-major: b0, b1), fp32 d.
__device__ __forceinline__ void mma_e4m3_16832(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// d += a . b with two 16 x 16 f16 A fragments' worth of B: mma.sync m16n8k16 f16 in, fp32 accumulate.
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// Four e4m3 (one 32-bit fragment register) to f16 (exact): bytes 0, 1 into lo, bytes 2, 3 into hi.
__device__ __forceinline__ void e4m3x4_to_f16(uint32_t v, uint32_t& lo, uint32_t& hi) {
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"(uint16_t(v & 0xffffu)));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"(uint16_t(v >> 16)));
}

/// One k32 step of the block for one 8-token tile: d += a . b over 32 e4m3 of k. kF16: the e4m3 values converted to
/// f16 (exact) and multiplied by two m16n8k16 f16 MMAs, reading each fragment register's four bytes as k slots
/// {2t, 2t + 1} (bytes 0, 1) and {2t + 8, 2t + 9} (bytes 2, 3) of a 16-wide step: a permutation of k applied to A and
/// B alike, so the dot is the same. alo / ahi: a's registers already converted.
template <bool kF16>
__device__ __forceinline__ void mma_step(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&alo)[4],
                                         const uint32_t (&ahi)[4], uint32_t b0, uint32_t b1) {
    if constexpr (kF16) {
        uint32_t blo0, bhi0, blo1, bhi1;
        e4m3x4_to_f16(b0, blo0, bhi0);
        e4m3x4_to_f16(b1, blo1, bhi1);
        mma_f16_16816(d, alo[0], alo[1], ahi[0], ahi[1], blo0, bhi0);  // bytes 0..15 of the 32
        mma_f16_16816(d, alo[2], alo[3], ahi[2], ahi[3], blo1, bhi1);  // bytes 16..31
    } else {
        mma_e4m3_16832(d, a, b0, b1);
    }
}

/// NT tiles of 8 tokens (up to 8 NT tokens per CTA), copies of kChunk bytes (16, 4 or 1), a ring of kStages. Grid:
/// (splits, token slices of 8 NT, ceil(n / 64)), clusters of (splits, 1, 1). Shared memory: kStages stages of [64
/// rows][128 B] of w, [8 NT tokens][128 B] of a, [8 NT] fp32 activation scales; reused at the end for the fp32 partial
/// tile [8 NT tokens][kPartialStride].
template <int NT, int kChunk, int kStages, bool kF16>
__global__ void __launch_bounds__(kThreads) gemm_fp8_skinny_kernel(const gemm_fp8_params p) {
    constexpr int kTokens = NT * 8;
    constexpr uint32_t kWBytes = kTileRows * 128, kABytes = kTokens * 128;
    constexpr uint32_t kStageBytes = kWBytes + kABytes + kTokens * 4;
    constexpr int kChunksPerRow = kBlockK / kChunk;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

    cg::cluster_group cluster = cg::this_cluster();
    const int splits = int(cluster.num_blocks()), rank = int(cluster.block_rank());
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row0 = int64_t(blockIdx.z) * kTileRows;
    const int32_t token0 = int32_t(blockIdx.y) * kTokens;
    const int32_t kblocks = (p.k + kBlockK - 1) / kBlockK;
    const int kb_begin = int(int64_t(kblocks) * rank / splits), kb_end = int(int64_t(kblocks) * (rank + 1) / splits);
    const int nsteps = kb_end - kb_begin;
    const float* w_scale_row = p.w_scales + (row0 / 128) * kblocks;

    // The weights depend on no earlier kernel: their first stages go towards L2 (one prefetch per 128-byte row of a
    // stage) while that kernel ends.
    for (int i = threadIdx.x; i < kTileRows * min(nsteps, kStages - 1); i += kThreads) {
        const int64_t row = row0 + i % kTileRows;
        const int64_t byte = int64_t(kb_begin + i / kTileRows) * kBlockK;
        if (row < p.n) detail::prefetch_l2(p.w + row * p.k + byte);
    }
    detail::pdl_wait();
    detail::pdl_launch_dependents();

    // Chunk i of a 128-byte row r (of w or of a) lands at swizzle(r, 16-byte chunk) + its offset in that chunk.
    auto load_rows = [&](uint32_t base, const uint8_t* src, int64_t first_row, int rows, int64_t valid_rows,
                         int64_t k0) {
        for (int i = threadIdx.x; i < rows * kChunksPerRow; i += kThreads) {
            const int r = i / kChunksPerRow, c = i % kChunksPerRow;
            const int byte = c * kChunk;
            const int64_t row = first_row + r, col = k0 + byte;
            const bool valid = row < valid_rows && col < p.k;
            const uint32_t dst = base + swizzle(r, byte / 16) + byte % 16;
            const uint8_t* at = src + (valid ? row * p.k + col : 0);
            if constexpr (kChunk == 1)
                st_shared_u8(dst, valid ? __ldg(at) : uint8_t(0));
            else
                cp_async<kChunk>(dst, at, valid);
        }
    };
    auto load_stage = [&](int s) {
        const int kb = kb_begin + s;
        const uint32_t base = smem_base + (s % kStages) * kStageBytes;
        load_rows(base, p.w, row0, kTileRows, p.n, int64_t(kb) * kBlockK);
        load_rows(base + kWBytes, p.a, token0, kTokens, p.m, int64_t(kb) * kBlockK);
        for (int t = threadIdx.x; t < kTokens; t += kThreads) {
            const bool valid = token0 + t < p.m;
            cp_async<4>(base + kWBytes + kABytes + t * 4,
                        p.a_scales + (valid ? size_t(kb) * p.a_scale_ld + token0 + t : 0), valid);
        }
    };

    float acc[NT][4];  // [8-token tile][fragment]: rows 16 warp + g (+ 8), tokens 8 j + 2 t (+ 1)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < nsteps) load_stage(s);
        cp_async_commit();
    }
    const int g = lane / 4, t = lane % 4;
    for (int s = 0; s < nsteps; ++s) {
        const float ws = __ldg(w_scale_row + kb_begin + s);
        cp_async_wait<kStages - 2>();
        __syncthreads();  // stage s landed for every thread; stage s - 1's slot is free
        if (s + kStages - 1 < nsteps) load_stage(s + kStages - 1);
        cp_async_commit();
        const uint32_t w_base = smem_base + (s % kStages) * kStageBytes, a_base = w_base + kWBytes;
        const float* a_scale = reinterpret_cast<const float*>(smem + (s % kStages) * kStageBytes + kWBytes + kABytes);
        float part[NT][4];
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) part[j][e] = 0.f;
#pragma unroll
        for (int step = 0; step < kBlockK / 32; ++step) {
            uint32_t a[4], alo[4] = {}, ahi[4] = {};
            detail::ldmatrix_x4(w_base + swizzle(warp * 16 + lane % 16, 2 * step + lane / 16), a);
            if constexpr (kF16) {
#pragma unroll
                for (int i = 0; i < 4; ++i) e4m3x4_to_f16(a[i], alo[i], ahi[i]);
            }
            if constexpr (NT == 1) {
                uint32_t b[2];
                detail::ldmatrix_x2(a_base + swizzle(lane % 8, 2 * step + (lane / 8) % 2), b);
                mma_step<kF16>(part[0], a, alo, ahi, b[0], b[1]);
            } else {
#pragma unroll
                for (int j = 0; j < NT; j += 2) {
                    uint32_t b[4];
                    const int q = lane / 8;
                    detail::ldmatrix_x4(a_base + swizzle((j + q / 2) * 8 + lane % 8, 2 * step + q % 2), b);
                    mma_step<kF16>(part[j], a, alo, ahi, b[0], b[1]);
                    mma_step<kF16>(part[j + 1], a, alo, ahi, b[2], b[3]);
                }
            }
        }
        // The block's promotion: acc += part x (a_scale x w_scale), per token.
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const float f0 = a_scale[8 * j + 2 * t] * ws, f1 = a_scale[8 * j + 2 * t + 1] * ws;
            acc[j][0] = fmaf(part[j][0], f0, acc[j][0]);
            acc[j][1] = fmaf(part[j][1], f1, acc[j][1]);
            acc[j][2] = fmaf(part[j][2], f0, acc[j][2]);
            acc[j][3] = fmaf(part[j][3], f1, acc[j][3]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the ring: reuse it for the partial tile

    // The CTA's partial tile [token][row] in fp32: each warp writes its own 16 rows.
    float* partial = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = warp * 16 + g + (e >= 2 ? 8 : 0), token = j * 8 + 2 * t + (e & 1);
            partial[token * kPartialStride + row] = acc[j][e];
        }
    cluster.sync();  // every rank's partial tile is complete and visible to the cluster

    // Rank r sums groups of 4 rows r, r + splits, ... over the ranks in rank order (all remote loads of a group
    // issued before the sums) and stores them as BF16.
    constexpr int kGroups = kTileRows / 4;
    const int tokens = min(p.m - token0, kTokens);
    for (int gi = rank * kThreads + int(threadIdx.x); gi < tokens * kGroups; gi += splits * kThreads) {
        const int token = gi / kGroups, row = (gi % kGroups) * 4;
        const float4 sum =
            detail::cluster_rank_sum4<kMaxSplits>(cluster, partial, splits, token * kPartialStride + row);
        float v[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t col = row0 + row + i;
            if (col >= p.n) break;
            p.c[size_t(token0 + token) * p.n + col] = __float2bfloat16(v[i]);
        }
    }
    cluster.sync();  // no CTA leaves while another still reads its shared memory
}

struct device_props {
    int major = 0, minor = 0, sms = 0;
};

const device_props& props() {
    static thread_local int cached = -1;
    static thread_local device_props d;
    int dev = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev != cached) {
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, dev));
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, dev));
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
        cached = dev;
    }
    return d;
}

template <int NT, int kChunk, int kStages, bool kF16>
void launch_skinny_as(const gemm_fp8_params& p, int32_t token_slices, int splits, cudaStream_t stream) {
    constexpr size_t stage_bytes = size_t(kTileRows + NT * 8) * 128 + NT * 8 * 4;
    constexpr size_t smem = std::max(kStages * stage_bytes, size_t(NT * 8) * kPartialStride * sizeof(float));
    static_assert(smem <= 227u << 10, "shared memory");
    auto kernel = gemm_fp8_skinny_kernel<NT, kChunk, kStages, kF16>;
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const int64_t tiles = (int64_t(p.n) + kTileRows - 1) / kTileRows;
    ZMOE_KERNEL_REQUIRE(tiles <= 65535 && token_slices <= 65535, "gemm_fp8: n or m too large for the grid");

    // Token slices next to each other in launch order: a tile's slices read its weights about together (from L2
    // after the first).
    detail::launch_pdl_clustered(kernel, dim3(unsigned(splits), unsigned(token_slices), unsigned(tiles)),
                                 dim3(kThreads), smem, unsigned(splits), stream, p);
}

template <int kChunk, int kStages, bool kF16>
void launch_skinny_tokens(const gemm_fp8_params& p, int tokens_per_cta, int splits, cudaStream_t stream) {
    const int32_t slices = (p.m + tokens_per_cta - 1) / tokens_per_cta;
    if (tokens_per_cta == 8)
        launch_skinny_as<1, kChunk, kStages, kF16>(p, slices, splits, stream);
    else if (tokens_per_cta == 16)
        launch_skinny_as<2, kChunk, kStages, kF16>(p, slices, splits, stream);
    else if (tokens_per_cta == 32)
        launch_skinny_as<4, kChunk, kStages, kF16>(p, slices, splits, stream);
    else
        launch_skinny_as<8, kChunk, kStages, kF16>(p, slices, splits, stream);
}

template <int kChunk, int kStages>
void launch_skinny_stages(const gemm_fp8_params& p, int tokens_per_cta, int splits, bool f16, cudaStream_t stream) {
    if (f16)
        launch_skinny_tokens<kChunk, kStages, true>(p, tokens_per_cta, splits, stream);
    else
        launch_skinny_tokens<kChunk, kStages, false>(p, tokens_per_cta, splits, stream);
}

bool aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

/// Rings of 4, 6 or 8 stages for 16-byte copies (the tuned path); the narrower copies of odd shapes run 4.
void launch_skinny(const gemm_fp8_params& p, const detail::gemm_fp8_skinny_config& config, cudaStream_t stream) {
    const detail::gemm_fp8_skinny_config auto_config = detail::gemm_fp8_skinny_choice(p);
    const int kblocks = std::max(1, (p.k + kBlockK - 1) / kBlockK);
    const int splits = std::clamp(config.splits > 0 ? config.splits : auto_config.splits, 1,
                                  std::min(detail::kGemmFp8MaxSplits, kblocks));
    const int stages = config.stages > 0 ? config.stages : auto_config.stages;
    const int tokens = config.tokens_per_cta > 0 ? config.tokens_per_cta : auto_config.tokens_per_cta;
    ZMOE_KERNEL_REQUIRE(tokens == 8 || tokens == 16 || tokens == 32 || tokens == 64,
                        "gemm_fp8: tokens_per_cta must be 8, 16, 32 or 64");
    const bool f16 =
        (config.mma != detail::gemm_fp8_mma::automatic ? config.mma : auto_config.mma) == detail::gemm_fp8_mma::f16;
    // The widest copy every row start allows (rows are k bytes apart).
    if (p.k % 16 == 0 && aligned(p.a, 16) && aligned(p.w, 16)) {
        if (stages >= 8)
            launch_skinny_stages<16, 8>(p, tokens, splits, f16, stream);
        else if (stages >= 6)
            launch_skinny_stages<16, 6>(p, tokens, splits, f16, stream);
        else
            launch_skinny_stages<16, 4>(p, tokens, splits, f16, stream);
    } else if (p.k % 4 == 0 && aligned(p.a, 4) && aligned(p.w, 4)) {
        launch_skinny_stages<4, 4>(p, tokens, splits, f16, stream);
    } else {
        launch_skinny_stages<1, 4>(p, tokens, splits, f16, stream);
    }
}

/// Group offsets {0, 4 i} for i in [0, kOffsetPairs]: a single group of up to 4 kOffsetPairs rows.
constexpr int32_t kOffsetPairs = 16384;
struct offset_pairs {
    int32_t v[2 * (kOffsetPairs + 1)];
    constexpr offset_pairs() : v{} {
        for (int32_t i = 0; i <= kOffsetPairs; ++i) {
            v[2 * i] = 0;
            v[2 * i + 1] = 4 * i;
        }
    }
};
__device__ const offset_pairs kGroupOffsets;

const int32_t* group_offsets(int32_t rows) {
    static const int32_t* base = [] {
        void* ptr = nullptr;
        ZMOE_CUDA_CHECK(cudaGetSymbolAddress(&ptr, kGroupOffsets));
        return static_cast<const int32_t*>(ptr);
    }();
    return base + 2 * ((rows + 3) / 4);
}

grouped_gemm_fp8_params grouped_params(const gemm_fp8_params& p, int32_t row0, int32_t rows) {
    return {.a = p.a + size_t(row0) * p.k,
            .a_scales = p.a_scales + row0,
            .a_scale_ld = p.a_scale_ld,
            .b = p.w,
            .b_scales = p.w_scales,
            .expert_offsets = group_offsets(rows),
            .c = p.c + size_t(row0) * p.n,
            .max_rows = rows,
            .n = p.n,
            .k = p.k,
            .num_experts = 1,
            .row_align = 64};
}

/// The grouped kernel takes the product: its constraints hold for every slice (row offsets of whole slices keep the
/// 16-byte alignments: 4 kOffsetPairs rows of k or n bytes, k and n multiples of 16).
bool grouped_applies(const gemm_fp8_params& p) {
    if (p.m <= kGemmFp8SkinnyMaxRows || p.k == 0 || props().major != 9) return false;
    grouped_gemm_fp8_params g = grouped_params(p, 0, std::min(p.m, 4 * kOffsetPairs));
    g.expert_offsets = nullptr;  // the table's address is not needed to decide
    if (!grouped_gemm_fp8_supported(g) || reinterpret_cast<uintptr_t>(p.w_scales) % 4 != 0) return false;
    // Its tiles (64 x 256, or 128 x 128 from 191 rows: launch_grouped_gemm_fp8's choice with one group): fewer than
    // 16 leave most SMs idle, and the skinny kernel over 64-row slices was faster there (DeepSeek-V3's kv_a at 128
    // and 256 rows: 14 and 19 us against 26 and 27).
    const bool tall = p.m >= 191;
    const int64_t tiles = ((int64_t(p.m) + (tall ? 127 : 63)) / (tall ? 128 : 64)) *
                          ((int64_t(p.n) + (tall ? 127 : 255)) / (tall ? 128 : 256));
    return tiles >= 16;
}

}  // namespace

bool gemm_fp8_supported(const gemm_fp8_params& p) {
    const device_props& d = props();
    const bool fp8_mma = d.major > 8 || (d.major == 8 && d.minor >= 9);
    const bool empty = p.m == 0 || p.n == 0;
    return fp8_mma && p.m >= 0 && p.n >= 0 && p.k >= 0 && p.a_scale_ld >= p.m && p.a_scale_ld % 4 == 0 &&
           (empty || (p.c != nullptr && (p.k == 0 || (p.a != nullptr && p.a_scales != nullptr && p.w != nullptr &&
                                                      p.w_scales != nullptr))));
}

void launch_gemm_fp8(const gemm_fp8_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(gemm_fp8_supported(p), "gemm_fp8: unsupported parameters (gemm_fp8_supported)");
    if (p.m == 0 || p.n == 0) return;
    if (detail::gemm_fp8_sm90_routed(p)) {  // sm_90, 1-128 rows: the wgmma kernel
        detail::launch_gemm_fp8_sm90(p, {}, stream);
        return;
    }
    if (!grouped_applies(p)) {
        launch_skinny(p, {}, stream);
        ZMOE_CUDA_CHECK_LAUNCH();
        return;
    }
    for (int32_t row0 = 0; row0 < p.m; row0 += 4 * kOffsetPairs) {
        const int32_t rows = std::min(p.m - row0, 4 * kOffsetPairs);
        if (rows <= kGemmFp8SkinnyMaxRows) {  // a short last slice: the grouped kernel skips fewer than 64 rows
            gemm_fp8_params tail = p;
            tail.a = p.a + size_t(row0) * p.k;
            tail.a_scales = p.a_scales + row0;
            tail.c = p.c + size_t(row0) * p.n;
            tail.m = rows;
            launch_skinny(tail, {}, stream);
        } else {
            launch_grouped_gemm_fp8(grouped_params(p, row0, rows), stream);
        }
    }
    ZMOE_CUDA_CHECK_LAUNCH();
}

namespace detail {

gemm_fp8_skinny_config gemm_fp8_skinny_choice(const gemm_fp8_params& p) {
    // Each choice is where gemm_fp8_bench --sweep measured fastest over the Qwen3-30B-A3B and DeepSeek-V3 shapes
    // (H100, docs/kernels.md).
    const int tokens = p.m <= 8 ? 8 : p.m <= 16 ? 16 : p.m <= 32 ? 32 : 64;
    const int64_t tiles = (int64_t(p.n) + kTileRows - 1) / kTileRows;
    const int64_t slices = (int64_t(p.m) + tokens - 1) / tokens;
    const int kblocks = std::max(1, (p.k + kBlockK - 1) / kBlockK);
    const int sms = props().sms;
    // About three CTAs per SM: k split over a cluster when the tiles alone leave SMs idle (four measured slower at 1
    // and 64 rows on most shapes).
    const int splits = int(
        std::clamp<int64_t>(3 * sms / std::max<int64_t>(1, tiles * slices), 1, std::min(kGemmFp8MaxSplits, kblocks)));
    // A deeper ring pays at 8 rows per CTA where the grid gives every SM two CTAs or more; elsewhere 4.
    const int stages = tokens == 8 && tiles * slices * splits >= 2 * sms ? 8 : 4;
    // One MMA kind at every row count, so that a row's bits do not depend on how many rows share the launch (the
    // two kinds sum a block's products in different orders: their bits differ). f16 on the converted values: at 16
    // and 64 rows per CTA 1.3-1.5x faster than the e4m3 mma.sync (which issues slowly on Hopper), within 3% at 8,
    // 15% slower at 32 (gemm_fp8_bench --sweep, H100).
    const gemm_fp8_mma mma = gemm_fp8_mma::f16;
    return {.splits = splits, .stages = stages, .tokens_per_cta = tokens, .mma = mma};
}

void launch_gemm_fp8_skinny(const gemm_fp8_params& p, const gemm_fp8_skinny_config& config, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(gemm_fp8_supported(p), "gemm_fp8: unsupported parameters (gemm_fp8_supported)");
    if (p.m == 0 || p.n == 0) return;
    launch_skinny(p, config, stream);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace detail

}  // namespace zmoe::kernels
