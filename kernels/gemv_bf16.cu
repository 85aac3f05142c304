// Dense BF16 GEMV for a few rows of activations (decode steps of a few sequences): y[m, n] = x[m, k] . w[n, k]^T
// (+ bias[n]), fp32 accumulation. Memory bound: w is streamed once, so the kernel keeps many 16-byte loads in flight.
//
// Blocks of kWarps warps; x is staged once per block in shared memory (bf16 [m][k], 16-byte rows). A warp owns R
// consecutive rows of w at a time (grid-stride over the rows): lane j reads 16-byte chunks j, j + 32, ... of each
// row, 16 / R chunks per row in flight, converts each chunk once and multiplies it with the m rows of x; the lanes'
// partial sums meet in a warp reduction (fixed order, and a lane's chunks in the same order for every R and block
// shape: a row's bits do not depend on the grid, nor on the variant below).
//
// Two block shapes (docs/kernels.md, "Decode step variants", H100 2026-11-28):
// - one row of x (variant gemv_wave, decode_tuning.hpp, the default there): blocks of four warps and R the smallest
//   of 1, 2, 4 whose warps all fit on the device at once (QKV's 5 120 rows: eight-warp blocks of two rows ran 320
//   blocks where 264 fit, so 56 started late and unprefetched), each warp's first chunks (QKV's and O's whole share)
//   loaded into registers before the programmatic wait (pdl.cuh), so a kernel that lets this one launch early (the
//   one-sequence decode attention's combine, variant combine_early) hides the weights' streaming under its own. O at
//   one row: 7.87 -> 6.91 us.
// - 2-8 rows of x (and one row with ZMOE_DECODE_TUNING=none): blocks of eight warps, two rows a warp from 4 096 rows
//   (else one), each warp's first chunks sent towards L2 before the wait (at four rows the four-warp form measured
//   10.10 against 9.95 us for O).

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/decode_tuning.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/pdl.cuh"
#include "kernels/stream_load.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWaveWarps = 4;     // gemv_wave: small blocks, the launch spread evenly over the multiprocessors
constexpr int kWarps = 8;         // otherwise
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

template <int M, int R, bool kF32, bool kWave>
__global__ void __launch_bounds__((kWave ? kWaveWarps : kWarps) * 32) gemv_bf16_kernel(const gemv_bf16_params p) {
    constexpr int kBlockWarps = kWave ? kWaveWarps : kWarps, kThreads = kBlockWarps * 32;
    constexpr int kUnroll = 16 / R;  // 16-byte chunks of one row in flight per lane: 16 loads per lane in all
    extern __shared__ __align__(16) unsigned char smem[];  // x: [M][k] bf16
    uint4* x_s = reinterpret_cast<uint4*>(smem);
    const int32_t kv = p.k / 8;  // 16-byte chunks per row
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t first_row = (int64_t(blockIdx.x) * kBlockWarps + warp) * R;
    const int64_t row_stride = int64_t(gridDim.x) * kBlockWarps * R;

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
    // The weights depend on no earlier kernel: this warp's first chunks are loaded (gemv_wave: into registers, the
    // rest of its first rows sent towards L2; else sent towards L2) while that kernel ends.
    if constexpr (kWave) {
        load(first_row, lane);
        const int32_t lines = (kv + 7) / 8;
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (first_row + r < p.n)
                for (int32_t l = 4 * kUnroll + lane; l < lines; l += 32)
                    detail::prefetch_l2(reinterpret_cast<const uint4*>(p.w) + (first_row + r) * kv + l * 8);
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int u = 0; u < kUnroll; ++u)
                if (first_row + r < p.n && lane + 32 * u < kv)
                    detail::prefetch_l2(reinterpret_cast<const uint4*>(p.w) + (first_row + r) * kv + lane + 32 * u);
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
            if (!kWave || row0 != first_row || c0 != lane) load(row0, c0);  // gemv_wave: the first were loaded
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

template <int M, int R, bool kF32, bool kWave>
void launch_one(const gemv_bf16_params& p, cudaStream_t stream) {
    constexpr int kBlockWarps = kWave ? kWaveWarps : kWarps;
    const size_t smem = size_t(M) * p.k * sizeof(bf16);
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(gemv_bf16_kernel<M, R, kF32, kWave>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
    const int64_t blocks = std::min<int64_t>((int64_t(p.n) + kBlockWarps * R - 1) / (kBlockWarps * R), kMaxBlocks);
    detail::launch_pdl(gemv_bf16_kernel<M, R, kF32, kWave>, dim3(int(blocks)), dim3(kBlockWarps * 32), smem, stream, p);
}

/// gemv_wave: warps of gemv_bf16_kernel<M, R, kF32, true> the device holds at once with x of k columns in shared
/// memory.
template <int M, int R, bool kF32>
int64_t resident_warps(int32_t k) {
    int device = 0, sms = 0, per_sm = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&device));
    ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(gemv_bf16_kernel<M, R, kF32, true>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
    ZMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_bf16_kernel<M, R, kF32, true>,
                                                                  kWaveWarps * 32, size_t(M) * k * sizeof(bf16)));
    return int64_t(per_sm) * sms * kWaveWarps;
}

template <int M, bool kF32>
void launch_rows(const gemv_bf16_params& p, cudaStream_t stream) {
    if constexpr (M == 1) {
        if (current_decode_tuning().gemv_wave) {
            // gemv_wave: the fewest rows per warp whose launch fits one wave (H100: QKV's 5 120 rows at 2 a warp,
            // O's 2 048 at 1); beyond a wave, 2 (more loads in flight per warp on the grid-stride loop).
            if (p.n <= resident_warps<M, 1, kF32>(p.k))
                launch_one<M, 1, kF32, true>(p, stream);
            else if (p.n <= 2 * resident_warps<M, 2, kF32>(p.k))
                launch_one<M, 2, kF32, true>(p, stream);
            else if (p.n <= 4 * resident_warps<M, 4, kF32>(p.k))
                launch_one<M, 4, kF32, true>(p, stream);
            else
                launch_one<M, 2, kF32, true>(p, stream);
            return;
        }
    }
    // Two rows per warp once there are enough rows to fill the GPU with warps anyway (more loads in flight each).
    if (p.n >= 4096)
        launch_one<M, 2, kF32, false>(p, stream);
    else
        launch_one<M, 1, kF32, false>(p, stream);
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
