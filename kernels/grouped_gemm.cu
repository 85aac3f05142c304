// Grouped expert GEMM: c[r] = a[r] . b[e]^T for the rows r of each expert e, BF16 tensor cores (WMMA 16x16x16,
// fp32 accumulate), a kStages-deep cp.async pipeline, and SiLU(gate) * up fused into the epilogue of the first
// expert GEMM. Row tiles never straddle two experts: expert groups start on multiples of row_align, and the
// tile height kBM divides row_align, so a tile finds its expert by a binary search over expert_offsets.

#include <mma.h>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/grouped_gemm_sm90.hpp"
#include "kernels/grouped_gemm_small.hpp"

namespace zmoe::kernels {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kThreads = 256;
constexpr int kBN = 128;  // rows of b per tile (with swiglu: 64 gate rows then the 64 matching up rows)

/// Tile shapes: 16 and 32 rows (8 warps side by side / 2x4 warps, for decode batches bound by streaming expert
/// weights: 128-wide K steps, double-buffered, ~78 / 83 KB of shared memory so that two blocks share an SM and
/// one block's pipeline fill overlaps the other's streaming; measured on H200 against 3-4 stages at one block per
/// SM: the Qwen3-30B-A3B MoE layer at 64 tokens 0.460 -> 0.387 ms, at 256 tokens 0.617 -> 0.458 ms), 64 rows
/// (2x4 warps of 32x32) and 128 rows (2x4 warps of 64x32: more tensor-core work per fragment load).
template <int kBM, bool kSwiglu, int kBKArg, int kStagesArg>
struct gemm_tile {
    static constexpr int kBK = kBKArg;
    static constexpr int kStride = kBK + 8;  // bf16 per smem row: the 16-byte pad staggers rows across banks
    static constexpr int kStages = kStagesArg;
    static constexpr int kWarpsM = kBM == 16 ? 1 : 2;
    static constexpr int kWarpsN = 8 / kWarpsM;
    static constexpr int kFragsM = kBM / kWarpsM / 16;
    static constexpr int kFragsN = kBN / kWarpsN / 16;
    static constexpr int kOutN = kSwiglu ? kBN / 2 : kBN;  // output columns per tile
    static constexpr int kCStride = kBN + 4;               // fp32 per row of the epilogue staging
    // Byte layout (the epilogue staging reuses the pipeline's bytes once the main loop is done):
    //   stage s (s < kStages): a [kBM][kStride] bf16, then b [kBN][kStride] bf16
    //   epilogue:              c [kBM][kCStride] fp32
    static constexpr size_t kStageBytes = size_t(kBM + kBN) * kStride * 2;
    static_assert((16 * kStride * 2) % 32 == 0, "WMMA fragment pointers must stay 32-byte aligned");
    static constexpr size_t kPipeBytes = kStageBytes * kStages;
    static constexpr size_t kCBytes = size_t(kBM) * kCStride * 4;
    static constexpr size_t kSmemBytes = kPipeBytes > kCBytes ? kPipeBytes : kCBytes;
};

__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    const int src_bytes = valid ? 16 : 0;  // 0: zero-fill, nothing read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

template <int kBM, bool kSwiglu, int kBK, int kStages>
__global__ void __launch_bounds__(kThreads, 2) grouped_gemm_kernel(const grouped_gemm_params p) {
    using tile = gemm_tile<kBM, kSwiglu, kBK, kStages>;
    extern __shared__ __align__(128) unsigned char smem[];

    const int32_t m0 = blockIdx.x * kBM;
    const int32_t n0 = blockIdx.y * tile::kOutN;
    if (m0 >= p.expert_offsets[p.num_experts]) return;
    int32_t lo = 0, hi = p.num_experts;  // find e with offsets[e] <= m0 < offsets[e + 1]
    while (hi - lo > 1) {
        const int32_t mid = (lo + hi) / 2;
        if (p.expert_offsets[mid] <= m0)
            lo = mid;
        else
            hi = mid;
    }
    const int32_t expert = lo;
    const int32_t n_b = kSwiglu ? 2 * p.n : p.n;
    const bf16* b = p.b + size_t(expert) * n_b * p.k;

    const auto load_stage = [&](int32_t kt, int stage) {
        bf16* a_s = reinterpret_cast<bf16*>(smem + stage * tile::kStageBytes);
        bf16* b_s = a_s + kBM * tile::kStride;
        const int32_t k0 = kt * tile::kBK;
        for (int v = threadIdx.x; v < kBM * (tile::kBK / 8); v += kThreads) {
            const int r = v / (tile::kBK / 8), c = v % (tile::kBK / 8);
            const int32_t src = p.a_rows ? p.a_rows[m0 + r] : m0 + r;
            const bool valid = src >= 0 && k0 + c * 8 < p.k;
            cp_async_16(a_s + r * tile::kStride + c * 8, valid ? p.a + size_t(src) * p.k + k0 + c * 8 : p.a, valid);
        }
        for (int v = threadIdx.x; v < kBN * (tile::kBK / 8); v += kThreads) {
            const int r = v / (tile::kBK / 8), c = v % (tile::kBK / 8);
            int32_t src_row, out_col;
            if constexpr (kSwiglu) {
                out_col = n0 + r % tile::kOutN;
                src_row = r < tile::kOutN ? out_col : p.n + out_col;
            } else {
                out_col = n0 + r;
                src_row = out_col;
            }
            const bool valid = out_col < p.n && k0 + c * 8 < p.k;
            cp_async_16(b_s + r * tile::kStride + c * 8, valid ? b + size_t(src_row) * p.k + k0 + c * 8 : p.b, valid);
        }
    };

    const int warp = threadIdx.x / 32;
    const int wm = warp / tile::kWarpsN, wn = warp % tile::kWarpsN;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[tile::kFragsM][tile::kFragsN];
#pragma unroll
    for (int i = 0; i < tile::kFragsM; ++i)
#pragma unroll
        for (int j = 0; j < tile::kFragsN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

    const int32_t k_tiles = (p.k + tile::kBK - 1) / tile::kBK;
#pragma unroll
    for (int s = 0; s < tile::kStages - 1; ++s) {
        if (s < k_tiles) load_stage(s, s);
        cp_async_commit();
    }
    for (int32_t kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<tile::kStages - 2>();
        __syncthreads();  // tile kt landed for every thread; the stage refilled below was consumed at kt - 1
        if (kt + tile::kStages - 1 < k_tiles)
            load_stage(kt + tile::kStages - 1, (kt + tile::kStages - 1) % tile::kStages);
        cp_async_commit();

        const bf16* a_s = reinterpret_cast<const bf16*>(smem + (kt % tile::kStages) * tile::kStageBytes);
        const bf16* b_s = a_s + kBM * tile::kStride;
#pragma unroll
        for (int kk = 0; kk < tile::kBK / 16; ++kk) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[tile::kFragsM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb[tile::kFragsN];
#pragma unroll
            for (int i = 0; i < tile::kFragsM; ++i)
                wmma::load_matrix_sync(fa[i], a_s + ((wm * tile::kFragsM + i) * 16) * tile::kStride + kk * 16,
                                       tile::kStride);
#pragma unroll
            for (int j = 0; j < tile::kFragsN; ++j)
                wmma::load_matrix_sync(fb[j], b_s + ((wn * tile::kFragsN + j) * 16) * tile::kStride + kk * 16,
                                       tile::kStride);
#pragma unroll
            for (int i = 0; i < tile::kFragsM; ++i)
#pragma unroll
                for (int j = 0; j < tile::kFragsN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // the pipeline's bytes become the epilogue staging

    float* c_s = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int i = 0; i < tile::kFragsM; ++i)
#pragma unroll
        for (int j = 0; j < tile::kFragsN; ++j)
            wmma::store_matrix_sync(
                c_s + ((wm * tile::kFragsM + i) * 16) * tile::kCStride + (wn * tile::kFragsN + j) * 16, acc[i][j],
                tile::kCStride, wmma::mem_row_major);
    __syncthreads();

    for (int v = threadIdx.x; v < kBM * (tile::kOutN / 8); v += kThreads) {
        const int r = v / (tile::kOutN / 8), c = (v % (tile::kOutN / 8)) * 8;
        if (n0 + c >= p.n) continue;
        float out[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float g = c_s[r * tile::kCStride + c + i];
            if constexpr (kSwiglu) {
                const float u = c_s[r * tile::kCStride + tile::kOutN + c + i];
                out[i] = g / (1.f + __expf(-g)) * u;
            } else {
                out[i] = g;
            }
        }
        detail::store_f32x8(p.c + size_t(m0 + r) * p.n + n0 + c, out);
    }
}

template <int kBM, bool kSwiglu, int kBK, int kStages>
void launch_tile(const grouped_gemm_params& p, cudaStream_t stream) {
    using tile = gemm_tile<kBM, kSwiglu, kBK, kStages>;
    constexpr size_t smem = tile::kSmemBytes;
    if (smem > 48 * 1024)
        ZMOE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_kernel<kBM, kSwiglu, kBK, kStages>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const dim3 grid((p.max_rows + kBM - 1) / kBM, (p.n + tile::kOutN - 1) / tile::kOutN);
    grouped_gemm_kernel<kBM, kSwiglu, kBK, kStages><<<grid, kThreads, smem, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

template <int kBM, int kBK, int kStages>
void launch_swiglu_or_not(const grouped_gemm_params& p, cudaStream_t stream) {
    if (p.swiglu)
        launch_tile<kBM, true, kBK, kStages>(p, stream);
    else
        launch_tile<kBM, false, kBK, kStages>(p, stream);
}

}  // namespace

void launch_grouped_gemm(const grouped_gemm_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.k % 8 == 0 && p.n % 8 == 0, "grouped_gemm: n and k must be multiples of 8");
    ZMOE_KERNEL_REQUIRE(
        p.row_align == 8 || p.row_align == 16 || p.row_align == 32 || (p.row_align > 0 && p.row_align % 64 == 0),
        "grouped_gemm: row_align must be 8, 16, 32 or a multiple of 64");
    if (p.max_rows == 0 || p.n == 0) return;
    // The choice by rows per expert is made with row_align (moe_row_align_for): 8-row groups are few rows per
    // expert, bound by streaming the weights; 64-row groups and up fill the wgmma tiles.
    if (p.impl == grouped_gemm_impl::small || p.row_align == 8) {
        ZMOE_KERNEL_REQUIRE(p.impl != grouped_gemm_impl::wgmma && p.impl != grouped_gemm_impl::mma_sync,
                            "grouped_gemm: row_align 8 runs on the small-group kernel only");
        detail::launch_grouped_gemm_small(p, stream);
        return;
    }
    if (p.impl == grouped_gemm_impl::wgmma ||
        (p.impl == grouped_gemm_impl::automatic && detail::grouped_gemm_wgmma_supported(p))) {
        detail::launch_grouped_gemm_wgmma(p, stream);
        return;
    }
    if (p.row_align == 16) {
        launch_swiglu_or_not<16, 128, 2>(p, stream);
    } else if (p.row_align == 32) {
        launch_swiglu_or_not<32, 128, 2>(p, stream);
    } else if (p.row_align % 128 == 0) {
        launch_swiglu_or_not<128, 64, 3>(p, stream);
    } else {
        launch_swiglu_or_not<64, 64, 4>(p, stream);
    }
}

}  // namespace zmoe::kernels
