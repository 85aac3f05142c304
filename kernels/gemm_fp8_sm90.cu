// launch_gemm_fp8's Hopper kernel for 1-128 rows (decode batches; it takes 1-512): c[m, n] = W8A8(a[m, k], w[n, k])
// with the format's promotion per 128-wide K block, on the e4m3 tensor cores at their full rate (wgmma), with the
// operands swapped: the weight rows are wgmma's M side (64 rows per math warpgroup; one or two warpgroups a CTA,
// sharing the tokens) and the tokens its N side (8, 16, 32, 64 or 128 per CTA, m rounded up, or 256 as two N = 128
// halves; more rows run as token slices of the grid). Both operands are K-major e4m3 in shared memory, as FP8 wgmma
// requires, copied there by TMA with the 128-byte swizzle.
//
// One pipeline stage is one K block: the tile's weight rows x 128 bytes, its tokens x 128 bytes, and the tokens'
// activation scales of that block (a bulk copy of the tile's valid tokens rounded up to 4, which a_scale_ld, a
// multiple of 4 and >= m, keeps inside the scale rows). A producer warp (one thread) fills a ring of stages; each
// math warpgroup multiplies a stage into a partial fp32 accumulator with four wgmma m64nNk32 (the first clears it),
// waits for them, and promotes the partial into its main fp32 accumulator scaled by w_scale[row / 128, kb] x
// a_scale[kb, token] (the CPU's linear_rows_fp8 arithmetic; a 64- or 128-row tile lies in one 128-row scale block).
// Rows of w past n and tokens past m are TMA's zero fill (never stored); k past the last whole block likewise.
//
// Split-K: the CTAs of a thread-block cluster (up to 8) take consecutive ranges of K blocks; each leaves its fp32
// tile in its shared memory and the cluster sums them through distributed shared memory in rank order
// (deterministic, no global workspace). The split depends on n and k only: a row's bits do not depend on m, nor on
// the tokens or warpgroups per CTA (a wgmma's element sums do not depend on N; tested).
//
// Programmatic dependent launch: the producer copies the weights of the first stages (which depend on no earlier
// kernel) before griddepcontrol.wait, the activations after.

#include <cooperative_groups.h>
#include <cuda.h>

#include <algorithm>

#include "kernels/cluster_sum.cuh"
#include "kernels/cuda_check.hpp"
#include "kernels/gemm_fp8_sm90.hpp"
#include "kernels/pdl.cuh"
#include "kernels/sm90_primitives.cuh"

namespace zmoe::kernels {
namespace {

using namespace sm90;
namespace cg = cooperative_groups;

constexpr int kWgRows = 64;    // weight rows of a math warpgroup (wgmma's M)
constexpr int kBK = 128;       // K bytes of a stage: one scale block, one 128-byte swizzle row
constexpr int kMaxSplits = 8;  // the portable cluster size

/// The kernel's shape for kN tokens per CTA and kWg math warpgroups (kWg x 64 weight rows per CTA, sharing the
/// tokens' tile), and its shared memory: a ring of kStages stages ([kWg x 64 rows][128 B] of w, then [kN tokens][128 B]
/// of a, both 128-byte swizzled by TMA in 1024-byte atoms), the stages' activation scales [kStages][kN] fp32, the full
/// and empty barriers; the ring is reused at the end for the fp32 partial tile [kN][kPartialStride].
template <int kN, int kWg>
struct sm90_layout {
    static constexpr int kMathThreads = 128 * kWg;
    // 256 tokens on two warpgroups need 192 accumulator registers a thread: a producer warpgroup that gives its
    // registers to them (setmaxnreg), else a producer warp.
    static constexpr bool kProducerWg = kWg == 2 && kN == 256;
    // Both back to the launch's count (384 threads, one CTA an SM) for the reduction, which all threads run.
    static constexpr int kProducerRegs = 40, kMathRegs = 232, kEntryRegs = 168;
    static constexpr int kThreads = kMathThreads + (kProducerWg ? 128 : 32);
    static constexpr int kTileRows = kWgRows * kWg;       // 64 or 128: inside one 128-row weight scale block
    static constexpr int kPartialStride = kTileRows + 4;  // [token][row]: conflict-free fragment stores
    // Two CTAs per SM (~100 KB each), but one for the widest tiles (their registers: 2 x 64 or 3 x 64 fp32 a thread).
    static constexpr int kCtasPerSm = (kWg == 2 && kN >= 128) || kN == 256 ? 1 : 2;
    static constexpr uint32_t kWBytes = kTileRows * kBK;
    static constexpr uint32_t kABytes = kN * kBK;
    static constexpr uint32_t kStageBytes = kWBytes + kABytes;
    static constexpr size_t kBudget = kCtasPerSm == 1 ? 200 * 1024 : 100 * 1024;
    static constexpr int kFit = int(kBudget / (kStageBytes + kN * sizeof(float)));
    static constexpr int kStages = kFit < 8 ? kFit : 8;
    static constexpr size_t kScaleOffset = size_t(kStages) * kStageBytes;
    static constexpr size_t kBarOffset = kScaleOffset + size_t(kStages) * kN * sizeof(float);
    static constexpr size_t kBytes = kBarOffset + 2 * kStages * sizeof(uint64_t) + 1024;  // + alignment slack
    static_assert(kABytes % 1024 == 0 && kWBytes % 1024 == 0, "1024-byte swizzle atoms");
    static_assert(size_t(kN) * kPartialStride * sizeof(float) <= kScaleOffset, "the partial tile fits the ring");
    static_assert(kStages >= 3 && kBytes <= (kCtasPerSm == 1 ? 227 : 113) * 1024, "shared memory");
    static_assert(!kProducerWg || (128 * kProducerRegs + kMathThreads * kMathRegs <= kThreads * kEntryRegs &&
                                   kThreads * kEntryRegs <= 65536),
                  "setmaxnreg beyond the CTA's registers");
};

/// d (64 x kN, fp32) = (kAccumulate ? d : 0) + A (64 x 32) . B (kN x 32)^T, e4m3, both K-major in shared memory.
template <int kN, int kAccumulate>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b) {
    if constexpr (kN == 8) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, %6, 1, 1;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "l"(desc_a), "l"(desc_b), "n"(kAccumulate));
    } else if constexpr (kN == 16) {
        asm volatile(
            "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, %10, 1, "
            "1;\n"
            : ZMOE_WGMMA_ACC8(0)
            : "l"(desc_a), "l"(desc_b), "n"(kAccumulate));
    } else if constexpr (kN == 32) {
        asm volatile(
            "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
            "%12, %13, %14, %15}, %16, %17, %18, 1, 1;\n"
            : ZMOE_WGMMA_ACC8(0), ZMOE_WGMMA_ACC8(8)
            : "l"(desc_a), "l"(desc_b), "n"(kAccumulate));
    } else if constexpr (kN == 64) {
        asm volatile(
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
            "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
            "%32, %33, %34, 1, 1;\n"
            : ZMOE_WGMMA_ACC32(0)
            : "l"(desc_a), "l"(desc_b), "n"(kAccumulate));
    } else {
        static_assert(kN == 128, "wgmma N: 8, 16, 32, 64 or 128");
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" ZMOE_WGMMA_D0_63
                     "}, %64, %65, %66, 1, 1;\n"
                     : ZMOE_WGMMA_ACC32(0), ZMOE_WGMMA_ACC32(32)
                     : "l"(desc_a), "l"(desc_b), "n"(kAccumulate));
    }
}

/// Grid (splits, token slices, ceil(n / kTileRows)), clusters of (splits, 1, 1), kThreads threads: warps [0, 4 kWg)
/// multiply (warpgroup w: weight rows [64 w, 64 w + 64) of the tile), warp 4 kWg produces. kOverlap: each block's
/// promotion overlaps the next block's wgmmas (two partial accumulators), else they alternate.
template <int kN, int kWg, bool kOverlap>
__global__ void __launch_bounds__(sm90_layout<kN, kWg>::kThreads, sm90_layout<kN, kWg>::kCtasPerSm)
    gemm_fp8_sm90_kernel(const __grid_constant__ CUtensorMap map_w, const __grid_constant__ CUtensorMap map_a,
                         const gemm_fp8_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using L = sm90_layout<kN, kWg>;
    constexpr int kMathThreads = L::kMathThreads, kThreads = L::kThreads, kTileRows = L::kTileRows;
    constexpr int kPartialStride = L::kPartialStride;
    constexpr uint32_t kWBytes = L::kWBytes;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // The same offset in every CTA of the cluster (the dynamic shared memory starts at the same address in each).
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    float* a_scale_s = reinterpret_cast<float*>(smem + L::kScaleOffset);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBarOffset);
    uint64_t* empty = full + L::kStages;

    cg::cluster_group cluster = cg::this_cluster();
    const int splits = int(cluster.num_blocks()), rank = int(cluster.block_rank());
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const int32_t row0 = int32_t(blockIdx.z) * kTileRows;
    const int32_t token0 = int32_t(blockIdx.y) * kN;
    const int32_t kblocks = (p.k + kBK - 1) / kBK;
    const int kb_begin = int(int64_t(kblocks) * rank / splits), kb_end = int(int64_t(kblocks) * (rank + 1) / splits);
    const int nsteps = kb_end - kb_begin;
    const int tokens = min(p.m - token0, kN);  // >= 1
    // The tile's activation scales of a block: its valid tokens rounded up to 4 (16-byte units; inside a_scale_ld).
    const uint32_t scale_bytes = uint32_t((tokens + 3) / 4 * 4) * 4;

    if (threadIdx.x == 0) {
        for (int s = 0; s < L::kStages; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], kMathThreads / 32);  // one arrive per math warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    float* partial = reinterpret_cast<float*>(smem);  // the ring, at the end: [kN][kPartialStride] fp32
    if (warp >= kMathThreads / 32) {
        if constexpr (L::kProducerWg) warpgroup_reg_dealloc<L::kProducerRegs>();
        // Producer: one thread issues the copies, stage after stage.
        if (warp == kMathThreads / 32 && lane == 0) {
            tma_prefetch_map(&map_w);
            tma_prefetch_map(&map_a);
            const int pre = min(nsteps, L::kStages);
            auto stage_a = [&](int s) {
                const uint32_t slot = uint32_t(s % L::kStages);
                unsigned char* base = smem + size_t(slot) * L::kStageBytes;
                const int32_t kb = kb_begin + s;
                tma_load_2d(base + kWBytes, &map_a, kb * kBK, token0, &full[slot]);
                bulk_load(a_scale_s + size_t(slot) * kN, p.a_scales + size_t(kb) * p.a_scale_ld + token0, scale_bytes,
                          &full[slot]);
            };
            auto stage_w = [&](int s) {
                const uint32_t slot = uint32_t(s % L::kStages);
                mbar_arrive_expect_tx(&full[slot], L::kStageBytes + scale_bytes);
                tma_load_2d(smem + size_t(slot) * L::kStageBytes, &map_w, (kb_begin + s) * kBK, row0, &full[slot]);
            };
            // The weights of the first stages depend on no earlier kernel: on their way before the wait.
            for (int s = 0; s < pre; ++s) stage_w(s);
            detail::pdl_wait();
            for (int s = 0; s < pre; ++s) stage_a(s);
            for (int s = pre; s < nsteps; ++s) {
                mbar_wait(&empty[s % L::kStages], ((s / L::kStages) & 1) ^ 1);
                stage_w(s);
                stage_a(s);
            }
        } else {
            detail::pdl_wait();
        }
        __syncwarp();
        detail::pdl_launch_dependents();
        if constexpr (L::kProducerWg) warpgroup_reg_alloc<L::kEntryRegs>();  // the reduction's registers
    } else {
        if constexpr (L::kProducerWg) warpgroup_reg_alloc<L::kMathRegs>();
        detail::pdl_wait();
        detail::pdl_launch_dependents();
        // Math warpgroups. Accumulator element 4 j + 2 h + q sits at weight row r + 8 h, token 8 j + 2 (lane % 4) + q
        // of the tile, r = 16 warp + lane / 4 (warps counted over the math warpgroups). 256 tokens take two wgmma N =
        // 128 halves, one after the other (the element sums are those of one N = 128 wgmma: the same bits).
        constexpr int kNw = kN < 128 ? kN : 128, kSub = kN / kNw;
        float acc[kN / 2];
#pragma unroll
        for (int i = 0; i < kN / 2; ++i) acc[i] = 0.f;
        {
            const float* ws_row = p.w_scales + size_t(row0 / 128) * kblocks + kb_begin;
            const auto w_scale = [&](int s) { return s < nsteps ? __ldg(ws_row + s) : 0.f; };
            // Issues block s's four wgmmas for tokens [kNw sub, kNw sub + kNw) of the tile into part (the first clears
            // it), once its stage has landed.
            const auto issue = [&](int s, int sub, float(&part)[kNw / 2]) {
                const uint32_t slot = uint32_t(s % L::kStages);
                mbar_wait(&full[slot], (s / L::kStages) & 1);
                const unsigned char* base = smem + size_t(slot) * L::kStageBytes;
                const uint64_t desc_w = smem_desc(base + (warp / 4) * kWgRows * kBK);
                const uint64_t desc_a = smem_desc(base + kWBytes + sub * kNw * kBK);
                wgmma_fence();
                wgmma_e4m3<kNw, 0>(part, desc_w, desc_a);
#pragma unroll
                for (int kk = 1; kk < kBK / 32; ++kk) wgmma_e4m3<kNw, 1>(part, desc_w + 2 * kk, desc_a + 2 * kk);
                wgmma_commit();
            };
            // Block s's promotion of those tokens, acc += part x (a_scale x w_scale) per token; after the last part of
            // the tile its stage is free.
            const auto promote = [&](int s, int sub, const float(&part)[kNw / 2], float ws) {
                const uint32_t slot = uint32_t(s % L::kStages);
                const float* sa = a_scale_s + size_t(slot) * kN + sub * kNw + 2 * (lane % 4);
                float* out = acc + sub * (kNw / 2);
#pragma unroll
                for (int j = 0; j < kNw / 8; ++j) {
                    const float f0 = sa[8 * j] * ws, f1 = sa[8 * j + 1] * ws;
                    out[4 * j + 0] = fmaf(part[4 * j + 0], f0, out[4 * j + 0]);
                    out[4 * j + 1] = fmaf(part[4 * j + 1], f1, out[4 * j + 1]);
                    out[4 * j + 2] = fmaf(part[4 * j + 2], f0, out[4 * j + 2]);
                    out[4 * j + 3] = fmaf(part[4 * j + 3], f1, out[4 * j + 3]);
                }
                if (sub == kSub - 1) {
                    __syncwarp();
                    if (lane == 0) mbar_arrive(&empty[slot]);
                }
            };
            if constexpr (kOverlap) {
                // Two partial accumulators: block s + 1's wgmmas run while block s is promoted.
                static_assert(kSub == 1, "the overlapped loop takes one wgmma per K step");
                float part0[kN / 2], part1[kN / 2];
                float ws0 = w_scale(0), ws1 = w_scale(1);
                if (nsteps > 0) issue(0, 0, part0);
                for (int s = 0; s < nsteps; s += 2) {
                    if (s + 1 < nsteps) {
                        issue(s + 1, 0, part1);
                        wgmma_wait<1>();
                    } else {
                        wgmma_wait<0>();
                    }
                    fence_accumulators(part0);
                    promote(s, 0, part0, ws0);
                    ws0 = w_scale(s + 2);
                    if (s + 1 >= nsteps) break;
                    if (s + 2 < nsteps) {
                        issue(s + 2, 0, part0);
                        wgmma_wait<1>();
                    } else {
                        wgmma_wait<0>();
                    }
                    fence_accumulators(part1);
                    promote(s + 1, 0, part1, ws1);
                    ws1 = w_scale(s + 3);
                }
            } else {
                float part[kNw / 2];
                float ws_next = w_scale(0);
                for (int s = 0; s < nsteps; ++s) {
                    const float ws = ws_next;
                    ws_next = w_scale(s + 1);
#pragma unroll
                    for (int sub = 0; sub < kSub; ++sub) {
                        issue(s, sub, part);
                        wgmma_wait<0>();
                        fence_accumulators(part);
                        promote(s, sub, part, ws);
                    }
                }
            }
        }
        named_barrier_sync<kMathThreads>(1);  // every math warp is done with the ring (so every copy landed)
        {
            const int r = warp * 16 + lane / 4;
#pragma unroll
            for (int j = 0; j < kN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int row = r + (e >= 2 ? 8 : 0), token = 8 * j + 2 * (lane % 4) + (e & 1);
                    partial[token * kPartialStride + row] = acc[4 * j + e];
                }
        }
        if constexpr (L::kProducerWg) warpgroup_reg_dealloc<L::kEntryRegs>();
    }
    cluster.sync();  // every rank's partial tile is complete and visible to the cluster

    // Rank r sums groups of 4 rows r, r + splits, ... over the ranks in rank order (all remote loads of a group
    // issued before the sums) and stores them as BF16.
    constexpr int kGroups = kTileRows / 4;
    const bool vector_store = p.n % 4 == 0 && (reinterpret_cast<uintptr_t>(p.c) & 7) == 0;
    for (int gi = rank * kThreads + int(threadIdx.x); gi < tokens * kGroups; gi += splits * kThreads) {
        const int token = gi / kGroups, row = (gi % kGroups) * 4;
        const float4 sum =
            detail::cluster_rank_sum4<kMaxSplits>(cluster, partial, splits, token * kPartialStride + row);
        float v[4] = {sum.x, sum.y, sum.z, sum.w};
        const int64_t col = int64_t(row0) + row;
        bf16* out = p.c + size_t(token0 + token) * p.n + col;
        if (vector_store && col + 4 <= p.n) {
            __align__(8) bf16 packed[4] = {__float2bfloat16(v[0]), __float2bfloat16(v[1]), __float2bfloat16(v[2]),
                                           __float2bfloat16(v[3])};
            *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(packed);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (col + i < p.n) out[i] = __float2bfloat16(v[i]);
        }
    }
    cluster.sync();  // no CTA leaves while another still reads its shared memory
#endif
}

/// Tensor map of a row-major e4m3 matrix [rows, cols], boxes of 128 bytes x box_rows, 128-byte swizzle; reads past
/// the matrix are zero-filled.
CUtensorMap make_map(const uint8_t* base, int64_t rows, int32_t cols, int32_t box_rows) {
    CUtensorMap map{};
    const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(cols)};
    const cuuint32_t box[2] = {cuuint32_t(kBK), cuuint32_t(box_rows)};
    const cuuint32_t elem_strides[2] = {1, 1};
    const CUresult res =
        encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(base), dims, strides, box,
                       elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    ZMOE_KERNEL_REQUIRE(res == CUDA_SUCCESS, "gemm_fp8_sm90: cuTensorMapEncodeTiled failed");
    return map;
}

template <int kN, int kWg>
void launch_as(const gemm_fp8_params& p, int splits, bool overlap, cudaStream_t stream) {
    using L = sm90_layout<kN, kWg>;
    auto kernel = gemm_fp8_sm90_kernel<kN, kWg, false>;
    if constexpr (kN <= 128) {
        if (overlap) kernel = gemm_fp8_sm90_kernel<kN, kWg, true>;
    }
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::kBytes)));
    const int64_t tiles = (int64_t(p.n) + L::kTileRows - 1) / L::kTileRows;
    const int64_t slices = (int64_t(p.m) + kN - 1) / kN;
    ZMOE_KERNEL_REQUIRE(tiles <= 65535 && slices <= 65535, "gemm_fp8_sm90: n or m too large for the grid");
    const CUtensorMap map_w = make_map(p.w, p.n, p.k, L::kTileRows);
    const CUtensorMap map_a = make_map(p.a, p.m, p.k, kN);

    // Token slices next to each other in launch order: a tile's slices read its weights about together (from L2
    // after the first).
    detail::launch_pdl_clustered(kernel, dim3(unsigned(splits), unsigned(slices), unsigned(tiles)), dim3(L::kThreads),
                                 L::kBytes, unsigned(splits), stream, map_w, map_a, p);
}

bool aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

}  // namespace

namespace detail {

bool gemm_fp8_sm90_applies(const gemm_fp8_params& p) {
    return current_device().major == 9 && p.m >= 1 && p.m <= kGemmFp8Sm90MaxRows && p.n >= 1 && p.k > 0 &&
           p.k % 16 == 0 && p.a_scale_ld >= p.m && p.a_scale_ld % 4 == 0 && p.c != nullptr && aligned(p.a, 16) &&
           aligned(p.w, 16) && aligned(p.a_scales, 16) && aligned(p.w_scales, 4) && p.a != nullptr && p.w != nullptr &&
           p.a_scales != nullptr && p.w_scales != nullptr;
}

bool gemm_fp8_sm90_routed(const gemm_fp8_params& p) {
    return p.m <= kGemmFp8Sm90MaxRoutedRows && gemm_fp8_sm90_applies(p);
}

gemm_fp8_sm90_config gemm_fp8_sm90_choice(const gemm_fp8_params& p) {
    const int tokens = p.m <= 8 ? 8 : p.m <= 16 ? 16 : p.m <= 32 ? 32 : p.m <= 64 ? 64 : 128;
    const int64_t tiles = (int64_t(p.n) + kWgRows - 1) / kWgRows;
    const int kblocks = std::max(1, (p.k + kBK - 1) / kBK);
    // The fewest of 1, 2, 4, 8 splits that give 64-row CTAs for about 0.9 of the SMs, from n and k alone
    // (gemm_fp8_bench --sweep-sm90, H100, 16-128 rows: Qwen3's q/k/v (80 tiles) fastest at 2 splits, o (32 tiles) at
    // 4, DeepSeek-V3's o and shared down (112 tiles) at 2, q_a (24) and kv_a (9) at 8 or near it; about two CTAs per
    // SM ran 1.3-1.8x slower on Qwen3's, one split 1.6x slower on DeepSeek's o at 128 rows).
    const int64_t sms = current_device().sms;
    int splits = 1;
    while (splits < kMaxSplits && splits < kblocks && tiles * splits * 10 < sms * 9) splits *= 2;
    splits = std::min(splits, kblocks);
    // Two warpgroups (128 weight rows sharing a tile of 128 tokens) past 64 rows: half the activation traffic from L2
    // (at 256 rows of Qwen3-30B-A3B's o projection, 64-row tiles would read 32 MB of activations).
    const int wgs = tokens == 128 ? 2 : 1;
    return {.splits = splits, .tokens_per_cta = tokens, .math_warpgroups = wgs, .overlap = 1};
}

void launch_gemm_fp8_sm90(const gemm_fp8_params& p, const gemm_fp8_sm90_config& config, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(gemm_fp8_sm90_applies(p), "gemm_fp8_sm90: unsupported parameters (gemm_fp8_sm90_applies)");
    const gemm_fp8_sm90_config auto_config = gemm_fp8_sm90_choice(p);
    const int kblocks = (p.k + kBK - 1) / kBK;
    const int splits =
        std::clamp(config.splits > 0 ? config.splits : auto_config.splits, 1, std::min(kMaxSplits, kblocks));
    const int tokens = config.tokens_per_cta > 0 ? config.tokens_per_cta : auto_config.tokens_per_cta;
    const int wgs = config.math_warpgroups > 0 ? config.math_warpgroups : auto_config.math_warpgroups;
    ZMOE_KERNEL_REQUIRE(wgs == 1 || wgs == 2, "gemm_fp8_sm90: math_warpgroups must be 1 or 2");
    const bool two = wgs == 2;
    const int overlap_mode = config.overlap > 0 ? config.overlap : auto_config.overlap;
    ZMOE_KERNEL_REQUIRE(overlap_mode == 1 || overlap_mode == 2, "gemm_fp8_sm90: overlap must be 1 or 2");
    const bool overlap = overlap_mode == 2;
    switch (tokens) {
        case 8:
            two ? launch_as<8, 2>(p, splits, overlap, stream) : launch_as<8, 1>(p, splits, overlap, stream);
            break;
        case 16:
            two ? launch_as<16, 2>(p, splits, overlap, stream) : launch_as<16, 1>(p, splits, overlap, stream);
            break;
        case 32:
            two ? launch_as<32, 2>(p, splits, overlap, stream) : launch_as<32, 1>(p, splits, overlap, stream);
            break;
        case 64:
            two ? launch_as<64, 2>(p, splits, overlap, stream) : launch_as<64, 1>(p, splits, overlap, stream);
            break;
        case 128:
            two ? launch_as<128, 2>(p, splits, overlap, stream) : launch_as<128, 1>(p, splits, overlap, stream);
            break;
        case 256:  // two wgmma N = 128 halves a K block: no overlap
            two ? launch_as<256, 2>(p, splits, false, stream) : launch_as<256, 1>(p, splits, false, stream);
            break;
        default:
            ZMOE_KERNEL_REQUIRE(false, "gemm_fp8_sm90: tokens_per_cta must be 8, 16, 32, 64, 128 or 256");
    }
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace zmoe::kernels
