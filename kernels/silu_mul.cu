// SiLU(gate) * up for the dense MLPs (the shared experts and the dense layers), from one fused gate|up GEMM output.

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void silu_mul_kernel(const bf16* gu, bf16* out, int64_t total, int32_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = i / n, j = i % n;
        const float g = __bfloat162float(gu[t * 2 * n + j]);
        const float u = __bfloat162float(gu[t * 2 * n + n + j]);
        out[i] = __float2bfloat16(g / (1.f + __expf(-g)) * u);
    }
}

}  // namespace

void launch_silu_mul(const silu_mul_params& p, cudaStream_t stream) {
    const int64_t total = int64_t(p.num_tokens) * p.n;
    if (total == 0) return;
    const int grid = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535));
    silu_mul_kernel<<<grid, kThreads, 0, stream>>>(p.gate_up, p.out, total, p.n);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
