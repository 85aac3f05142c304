// launch_fp8_weight_quantize: one CTA per 128 x 128 block; each of its 8 warps takes 16 rows, each lane 4 columns.
// The block's amax is reduced over the CTA, then every element is divided by the scale (IEEE division, as the
// host reference does) and rounded to e4m3 by the hardware conversion (round to nearest even, saturating).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/fp8_weight_quantize.hpp"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 128 / kWarps;

__global__ void fp8_weight_quantize_kernel(const fp8_weight_quantize_params p) {
    __shared__ float warp_amax[kWarps];
    const int64_t r0 = int64_t(blockIdx.y) * 128;
    const int32_t c = int32_t(blockIdx.x) * 128 + int32_t(threadIdx.x % 32) * 4;
    const int warp = int(threadIdx.x / 32);
    float v[kRowsPerWarp][4];
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
        const int64_t r = r0 + warp * kRowsPerWarp + i;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const bool in = r < p.rows && c + j < p.cols;
            v[i][j] = in ? __bfloat162float(p.w[size_t(r) * p.cols + c + j]) : 0.f;
            amax = fmaxf(amax, fabsf(v[i][j]));
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (threadIdx.x % 32 == 0) warp_amax[warp] = amax;
    __syncthreads();
    amax = warp_amax[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) amax = fmaxf(amax, warp_amax[w]);
    const float scale = amax > 0.f ? __fdiv_rn(amax, 448.f) : 1.f;
    if (threadIdx.x == 0) p.scales[size_t(blockIdx.y) * gridDim.x + blockIdx.x] = scale;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
        const int64_t r = r0 + warp * kRowsPerWarp + i;
        if (r >= p.rows) break;
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
            uint16_t pair;
            asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
                : "=h"(pair)
                : "f"(__fdiv_rn(v[i][j + 1], scale)), "f"(__fdiv_rn(v[i][j], scale)));
            uint8_t* out = p.codes + size_t(r) * p.codes_ld + c + j;
            if (c + j < p.cols) out[0] = uint8_t(pair & 0xff);
            if (c + j + 1 < p.cols) out[1] = uint8_t(pair >> 8);
        }
    }
}

__global__ void fp8_weight_dequantize_kernel(const fp8_weight_dequantize_params p) {
    const int64_t n = p.rows * p.cols, kb = (p.cols + 127) / 128;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / p.cols, c = i % p.cols;
        __half_raw h;
        h.x = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(p.codes[i]), __NV_E4M3).x;
        const float v = __half2float(__half(h)) * p.scales[(r / 128) * kb + c / 128];
        p.w[i] = __float2bfloat16_rn(v);
    }
}

}  // namespace

void launch_fp8_weight_dequantize(const fp8_weight_dequantize_params& p, cudaStream_t stream) {
    const int64_t n = p.rows * p.cols;
    if (n == 0) return;
    const int blocks = int(std::min<int64_t>((n + 255) / 256, 4096));
    fp8_weight_dequantize_kernel<<<blocks, 256, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_fp8_weight_quantize(const fp8_weight_quantize_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.rows >= 0 && p.cols >= 0 && p.codes_ld >= p.cols,
                        "fp8_weight_quantize: codes_ld must be >= cols");
    if (p.rows == 0 || p.cols == 0) return;
    const dim3 grid(unsigned((p.cols + 127) / 128), unsigned((p.rows + 127) / 128));
    fp8_weight_quantize_kernel<<<grid, kWarps * 32, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
