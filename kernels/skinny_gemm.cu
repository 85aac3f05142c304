// Skinny BF16 GEMM for decode steps of tens of sequences: y[m, n] = x[m, k] . w[n, k]^T (+ bias[n]), m <= 64,
// fp32 accumulation on tensor cores (mma.sync m16n8k16). Memory bound: the n x k weights are the bytes that count.
//
// The weight rows are the MMA's M side and the tokens its N side, so one CTA covers 64 weight rows and every token.
// A CTA of four warps streams its rows' slice of k through a four-stage cp.async ring (64-wide k steps: 8 KB of
// weights per stage, XOR-swizzled 128-byte shared-memory rows read with ldmatrix); warp w multiplies the 16-wide k
// slice w of each stage for all 64 rows and all tokens, so every staged byte is read from shared memory once, and
// the four warps' partial tiles are summed (in warp order) at the end. Too few 64-row
// tiles to fill the GPU (5 120 rows: 80 tiles; 2 048: 32) split k over a thread-block cluster of `splits` CTAs; the
// cluster reduces its fp32 partials through distributed shared memory, each CTA summing a share of the tile over the
// ranks in rank order (deterministic: no atomics, no global scratch). Launched programmatically dependent (pdl.cuh):
// each CTA sends its first weight stages towards L2 before waiting for the kernel before it.

#include <cooperative_groups.h>

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cluster_sum.cuh"
#include "kernels/cuda_check.hpp"
#include "kernels/mma_sm80.cuh"
#include "kernels/pdl.cuh"
#include "kernels/stream_load.cuh"

namespace zmoe::kernels {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 16 * kWarps;  // weight rows per CTA
constexpr int kStepK = 64;              // k per pipeline stage: 128-byte rows of 8 chunks of 16 bytes
constexpr int kStages = 4;
constexpr int kMaxSplits = 8;                  // portable cluster size
constexpr int kPartialStride = kTileRows + 4;  // fp32 partial tile [token][row]: conflict-free fragment stores

/// Shared-memory byte offset of 16-byte chunk `chunk` (0..7) of 128-byte row `row`: XOR swizzle so that the eight
/// rows one ldmatrix phase reads sit in eight different bank groups.
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    const int bytes = valid ? 16 : 0;  // 0: zero-fill, nothing read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// NT tiles of 8 tokens (m <= 8 * NT). Grid: (splits, ceil(n / 64)), clusters of (splits, 1, 1).
template <int NT, bool kF32>
__global__ void __launch_bounds__(kThreads) skinny_gemm_kernel(const skinny_gemm_bf16_params p) {
    constexpr int kTokens = NT * 8;
    constexpr uint32_t kWBytes = kTileRows * 128, kXBytes = kTokens * 128, kStageBytes = kWBytes + kXBytes;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

    cg::cluster_group cluster = cg::this_cluster();
    const int splits = int(cluster.num_blocks()), rank = int(cluster.block_rank());
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row0 = int64_t(blockIdx.y) * kTileRows;
    const int32_t kc = p.k / 8;  // 16-byte chunks per row
    const int steps = (p.k + kStepK - 1) / kStepK;
    const int step_begin = int(int64_t(steps) * rank / splits), step_end = int(int64_t(steps) * (rank + 1) / splits);
    const int nsteps = step_end - step_begin;

    // Weight chunk i of a stage: row i / 8, chunk i % 8 (4 per thread); x chunk: token i / 8, chunk i % 8.
    auto w_src = [&](int step, int i, bool& valid) {
        const int64_t row = row0 + i / 8;
        const int32_t c = step * 8 + i % 8;
        valid = row < p.n && c < kc;
        return reinterpret_cast<const uint4*>(p.w) + (valid ? row * kc + c : 0);
    };
    // The weights depend on no earlier kernel: send the first stages towards L2 (one prefetch per 128-byte row of a
    // step) while that kernel ends.
    for (int i = threadIdx.x; i < kTileRows * min(nsteps, kStages - 1); i += kThreads) {
        bool valid = false;
        const uint4* src = w_src(step_begin + i / kTileRows, (i % kTileRows) * 8, valid);
        if (valid) detail::prefetch_l2(src);
    }
    detail::pdl_wait();
    detail::pdl_launch_dependents();

    auto load_stage = [&](int s) {
        const int step = step_begin + s;
        const uint32_t base = smem_base + (s % kStages) * kStageBytes;
        for (int i = threadIdx.x; i < kTileRows * 8; i += kThreads) {
            bool valid = false;
            const uint4* src = w_src(step, i, valid);
            cp_async_16(base + swizzle(i / 8, i % 8), src, valid);
        }
        for (int i = threadIdx.x; i < kTokens * 8; i += kThreads) {
            const int32_t t = i / 8, c = step * 8 + i % 8;
            const bool valid = t < p.m && c < kc;
            cp_async_16(base + kWBytes + swizzle(t, i % 8),
                        reinterpret_cast<const uint4*>(p.x) + (valid ? int64_t(t) * kc + c : 0), valid);
        }
    };

    float acc[4][NT][4];  // [16-row tile][8-token tile][fragment]
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < nsteps) load_stage(s);
        cp_async_commit();
    }
    static_assert(kStepK == 16 * kWarps, "one 16-wide k slice of a stage per warp");
    for (int s = 0; s < nsteps; ++s) {
        cp_async_wait<kStages - 2>();
        __syncthreads();  // stage s landed for every thread; stage s - 1's slot is free
        if (s + kStages - 1 < nsteps) load_stage(s + kStages - 1);
        cp_async_commit();
        const uint32_t w_base = smem_base + (s % kStages) * kStageBytes, x_base = w_base + kWBytes;
        uint32_t a[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
            detail::ldmatrix_x4(w_base + swizzle(i * 16 + lane % 16, 2 * warp + lane / 16), a[i]);
        if constexpr (NT == 1) {
            uint32_t b[2];
            detail::ldmatrix_x2(x_base + swizzle(lane % 8, 2 * warp + (lane / 8) % 2), b);
#pragma unroll
            for (int i = 0; i < 4; ++i) detail::mma_bf16_16816(acc[i][0], a[i], b[0], b[1]);
        } else {
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                uint32_t b[4];
                const int q = lane / 8;
                detail::ldmatrix_x4(x_base + swizzle((j + q / 2) * 8 + lane % 8, 2 * warp + q % 2), b);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    detail::mma_bf16_16816(acc[i][j], a[i], b[0], b[1]);
                    detail::mma_bf16_16816(acc[i][j + 1], a[i], b[2], b[3]);
                }
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the ring: reuse it for the partial tiles

    // Warp w's partial tile [token][row] in fp32 at partial + w * kTokens * kPartialStride. Fragment element e of
    // tiles (i, j): row 16 i + g (+ 8 for e >= 2), token 8 j + 2 t (+ 1 for odd e).
    float* partial = reinterpret_cast<float*>(smem);
    {
        const int g = lane / 4, t = lane % 4;
        float* mine = partial + warp * kTokens * kPartialStride;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int row = i * 16 + g + (e >= 2 ? 8 : 0), token = j * 8 + 2 * t + (e & 1);
                    mine[token * kPartialStride + row] = acc[i][j][e];
                }
    }
    __syncthreads();
    // The CTA's tile: the warps' partials summed in warp order, into warp 0's (each element read, then written, by
    // one thread).
    constexpr int kGroups = kTileRows / 4;
    const int tokens = min(p.m, kTokens);
    for (int gi = int(threadIdx.x); gi < tokens * kGroups; gi += kThreads) {
        const int at = (gi / kGroups) * kPartialStride + (gi % kGroups) * 4;
        float4 part[kWarps];
#pragma unroll
        for (int w = 0; w < kWarps; ++w)
            part[w] = *reinterpret_cast<const float4*>(partial + w * kTokens * kPartialStride + at);
#pragma unroll
        for (int w = 1; w < kWarps; ++w) {
            part[0].x += part[w].x;
            part[0].y += part[w].y;
            part[0].z += part[w].z;
            part[0].w += part[w].w;
        }
        *reinterpret_cast<float4*>(partial + at) = part[0];
    }
    cluster.sync();  // every rank's partial tile is complete and visible to the cluster

    // Rank r sums groups of 4 rows r, r + splits, ... (in 128-group runs) over the ranks in rank order, all the
    // remote loads of a group issued before the sums.
    for (int gi = rank * kThreads + int(threadIdx.x); gi < tokens * kGroups; gi += splits * kThreads) {
        const int token = gi / kGroups, row = (gi % kGroups) * 4;
        const float4 sum =
            detail::cluster_rank_sum4<kMaxSplits>(cluster, partial, splits, token * kPartialStride + row);
        float v[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t n_at = row0 + row + j;
            if (n_at >= p.n) break;
            const size_t at = size_t(token) * p.n + n_at;
            float y = v[j];
            if (p.bias != nullptr)
                y = (kF32 ? y : __bfloat162float(__float2bfloat16(y))) + __bfloat162float(p.bias[n_at]);
            if constexpr (kF32)
                static_cast<float*>(p.y)[at] = y;
            else
                static_cast<bf16*>(p.y)[at] = __float2bfloat16(y);
        }
    }
    cluster.sync();  // no CTA leaves while another still reads its shared memory
}

int sm_count() {
    static const int count = [] {
        int device = 0, n = 0;
        ZMOE_CUDA_CHECK(cudaGetDevice(&device));
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
        return n;
    }();
    return count;
}

template <int NT, bool kF32>
void launch_one(const skinny_gemm_bf16_params& p, cudaStream_t stream) {
    constexpr size_t stage_bytes = size_t(kTileRows + NT * 8) * 128;
    constexpr size_t smem = std::max(kStages * stage_bytes, size_t(kWarps * NT * 8) * kPartialStride * sizeof(float));
    static_assert(smem <= 227u << 10, "shared memory");
    ZMOE_CUDA_CHECK(
        cudaFuncSetAttribute(skinny_gemm_kernel<NT, kF32>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const int tiles = (p.n + kTileRows - 1) / kTileRows;
    const int steps = (p.k + kStepK - 1) / kStepK;
    int splits = p.splits;
    if (splits <= 0) splits = (3 * sm_count()) / tiles;  // about three CTAs per SM
    splits = std::clamp(std::min(splits, steps), 1, kMaxSplits);

    detail::launch_pdl_clustered(skinny_gemm_kernel<NT, kF32>, dim3(unsigned(splits), unsigned(tiles)), dim3(kThreads),
                                 smem, unsigned(splits), stream, p);
}

template <int NT>
void launch_tokens(const skinny_gemm_bf16_params& p, cudaStream_t stream) {
    p.y_fp32 ? launch_one<NT, true>(p, stream) : launch_one<NT, false>(p, stream);
}

}  // namespace

bool skinny_gemm_bf16_supported(int32_t m, int32_t n, int32_t k) {
    return m >= 1 && m <= kSkinnyGemmMaxRows && n >= 1 && k >= 8 && k % 8 == 0;
}

void launch_skinny_gemm_bf16(const skinny_gemm_bf16_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.m == 0 || skinny_gemm_bf16_supported(p.m, p.n, p.k),
                        "skinny_gemm_bf16: m in [1, kSkinnyGemmMaxRows], k a multiple of 8");
    ZMOE_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0,
                        "skinny_gemm_bf16: x and w must be 16-byte aligned");
    if (p.m == 0 || p.n == 0) return;
    if (p.m <= 8)
        launch_tokens<1>(p, stream);
    else if (p.m <= 16)
        launch_tokens<2>(p, stream);
    else if (p.m <= 32)
        launch_tokens<4>(p, stream);
    else
        launch_tokens<8>(p, stream);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
