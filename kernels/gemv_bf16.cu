// Dense BF16 GEMV for a few rows of activations (decode steps of a few sequences): y[m, n] = x[m, k] . w[n, k]^T
// (+ bias[n]), fp32 accumulation. Memory bound: w is streamed once, so the kernel keeps many 16-byte loads in flight.
//
// Blocks of four warps; x is staged once per block in shared memory (bf16 [m][k], 16-byte rows). A warp owns R
// consecutive rows of w at a time (grid-stride over the rows): lane j reads 16-byte chunks j, j + 32, ... of each
// row, 16 / R chunks per row in flight, converts each chunk once and multiplies it with the m rows of x; the lanes'
// partial sums meet in a warp reduction (fixed order, and a lane's chunks in the same order for every R: a row's bits
// do not depend on the grid). R is the smallest of 1, 2, 4 whose warps all fit on the device at once (one wave), and
// each warp loads its first chunks (at the decode shapes, QKV and O, its whole share) into registers before the
// programmatic wait (pdl.cuh), under the kernel before: a kernel that lets this one launch early (the decode
// attention's combine) hides the weights' streaming under its own. A launch larger than a wave (the LM head) takes
// R = 2 on a grid-stride loop.

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/pdl.cuh"
#include "kernels/stream_load.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 4;  // small blocks: the launch spreads evenly over the multiprocessors
constexpr int kThreads = kWarps * 32;
constexpr int kMaxBlocks = 4096;  // grid-stride beyond (enough to fill any current GPU several times)
constexpr size_t kMaxSmem = 64u << 10;

__device__ __forceinline__ void to_f32x8(const uint4& u, float (&f)[8]) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 v = __bfloat1622float2(h[i]);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}

template <int M, int R, bool kF32>
__global__ void __launch_bounds__(kThreads) gemv_bf16_kernel(const gemv_bf16_params p) {
    constexpr int kUnroll = 16 / R;  // 16-byte chunks of one row in flight per lane: 16 loads per lane in all
    extern __shared__ __align__(16) unsigned char smem[];  // x: [M][k] bf16
    uint4* x_s = reinterpret_cast<uint4*>(smem);
    const int32_t kv = p.k / 8;  // 16-byte chunks per row
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t first_row = (int64_t(blockIdx.x) * kWarps + warp) * R, row_stride = int64_t(gridDim.x) * kWarps * R;

    // Chunks c0, c0 + 32, ..., c0 + 32 (kUnroll - 1) of rows row0 .. row0 + R - 1 (zero past the rows or the chunks).
    uint4 wv[R][kUnroll];
    auto load = [&](int64_t row0, int32_t c0) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
            for (int r = 0; r < R; ++r)
                wv[r][u] =
                    row0 + r < p.n && c0 + 32 * u < kv
                        ? detail::load_stream(reinterpret_cast<const uint4*>(p.w) + (row0 + r) * kv + c0 + 32 * u)
                        : make_uint4(0, 0, 0, 0);
    };
    // The weights depend on no earlier kernel: this warp's first chunks are loaded into registers while that kernel
    // ends (at the decode shapes, QKV and O, the warp's whole share), the rest of its first rows sent towards L2.
    load(first_row, lane);
    {
        const int32_t lines = (kv + 7) / 8;
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (first_row + r < p.n)
                for (int32_t l = 4 * kUnroll + lane; l < lines; l += 32)
                    detail::prefetch_l2(reinterpret_cast<const uint4*>(p.w) + (first_row + r) * kv + l * 8);
    }
    detail::pdl_wait();
    detail::pdl_launch_dependents();
    const uint4* x = reinterpret_cast<const uint4*>(p.x);
    for (int32_t i = threadIdx.x; i < M * kv; i += kThreads) x_s[i] = x[i];
    __syncthreads();

    for (int64_t row0 = first_row; row0 < p.n; row0 += row_stride) {
        float acc[R][M];
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
        for (int32_t c0 = lane; c0 < kv; c0 += 32 * kUnroll) {
            if (row0 != first_row || c0 != lane) load(row0, c0);  // the first were loaded before the wait
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int32_t c = c0 + 32 * u;
                if (c >= kv) break;
                float wf[R][8];
#pragma unroll
                for (int r = 0; r < R; ++r) to_f32x8(wv[r][u], wf[r]);
#pragma unroll
                for (int m = 0; m < M; ++m) {
                    float xf[8];
                    to_f32x8(x_s[m * kv + c], xf);
#pragma unroll
                    for (int r = 0; r < R; ++r)
#pragma unroll
                        for (int e = 0; e < 8; ++e) acc[r][m] += wf[r][e] * xf[e];
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const bool live = row0 + r < p.n;
            const bool bias = live && p.bias != nullptr;
            const float b = bias ? __bfloat162float(p.bias[row0 + r]) : 0.f;
#pragma unroll
            for (int m = 0; m < M; ++m) {
                float v = detail::warp_sum(acc[r][m]);
                // A BF16 output's bias meets the BF16-rounded product, as launch_add_bias after cuBLASLt does: both
                // paths round alike.
                if (bias) v = (kF32 ? v : __bfloat162float(__float2bfloat16(v))) + b;
                if (lane == r * M + m && live) {
                    const size_t at = size_t(m) * p.n + row0 + r;
                    if constexpr (kF32)
                        static_cast<float*>(p.y)[at] = v;
                    else
                        static_cast<bf16*>(p.y)[at] = __float2bfloat16(v);
                }
            }
        }
    }
}

template <int M, int R, bool kF32>
void launch_one(const gemv_bf16_params& p, cudaStream_t stream) {
    const size_t smem = size_t(M) * p.k * sizeof(bf16);
    ZMOE_CUDA_CHECK(
        cudaFuncSetAttribute(gemv_bf16_kernel<M, R, kF32>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
    const int64_t blocks = std::min<int64_t>((int64_t(p.n) + kWarps * R - 1) / (kWarps * R), kMaxBlocks);
    detail::launch_pdl(gemv_bf16_kernel<M, R, kF32>, dim3(int(blocks)), dim3(kThreads), smem, stream, p);
}

/// Warps of gemv_bf16_kernel<M, R, kF32> the device holds at once with x of k columns in shared memory.
template <int M, int R, bool kF32>
int64_t resident_warps(int32_t k) {
    int device = 0, sms = 0, per_sm = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&device));
    ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    ZMOE_CUDA_CHECK(
        cudaFuncSetAttribute(gemv_bf16_kernel<M, R, kF32>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
    ZMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_bf16_kernel<M, R, kF32>, kThreads,
                                                                  size_t(M) * k * sizeof(bf16)));
    return int64_t(per_sm) * sms * kWarps;
}

template <int M, bool kF32>
void launch_rows(const gemv_bf16_params& p, cudaStream_t stream) {
    // The fewest rows per warp whose launch fits one wave (H100, one row: QKV's 5 120 rows at 4 a warp, O's 2 048 at
    // 1); beyond a wave, 2 (more loads in flight per warp on the grid-stride loop).
    if (p.n <= resident_warps<M, 1, kF32>(p.k))
        launch_one<M, 1, kF32>(p, stream);
    else if (p.n <= 2 * resident_warps<M, 2, kF32>(p.k))
        launch_one<M, 2, kF32>(p, stream);
    else if (p.n <= 4 * resident_warps<M, 4, kF32>(p.k))
        launch_one<M, 4, kF32>(p, stream);
    else
        launch_one<M, 2, kF32>(p, stream);
}

template <int M>
void launch_rows(const gemv_bf16_params& p, cudaStream_t stream) {
    if (p.y_fp32)
        launch_rows<M, true>(p, stream);
    else
        launch_rows<M, false>(p, stream);
}

}  // namespace

bool gemv_bf16_supported(int32_t m, int32_t n, int32_t k) {
    return m >= 1 && m <= kGemvMaxRows && n >= 1 && k >= 8 && k % 8 == 0 && size_t(m) * k * sizeof(bf16) <= kMaxSmem;
}

void launch_gemv_bf16(const gemv_bf16_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.m == 0 || gemv_bf16_supported(p.m, p.n, p.k),
                        "gemv_bf16: m in [1, kGemvMaxRows], k a multiple of 8, m * k * 2 bytes <= 64 KB");
    ZMOE_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0,
                        "gemv_bf16: x and w must be 16-byte aligned");
    if (p.m == 0 || p.n == 0) return;
    switch (p.m) {
        case 1:
            launch_rows<1>(p, stream);
            break;
        case 2:
            launch_rows<2>(p, stream);
            break;
        case 3:
            launch_rows<3>(p, stream);
            break;
        case 4:
            launch_rows<4>(p, stream);
            break;
        case 5:
            launch_rows<5>(p, stream);
            break;
        case 6:
            launch_rows<6>(p, stream);
            break;
        case 7:
            launch_rows<7>(p, stream);
            break;
        default:
            launch_rows<8>(p, stream);
            break;
    }
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
