// Bias add after the dense projections (Qwen2's q/k/v bias, OLMo-style o bias).

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void add_bias_kernel(bf16* y, const bf16* bias, int64_t total, int32_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = __float2bfloat16(__bfloat162float(y[i]) + __bfloat162float(bias[i % n]));
}

}  // namespace

void launch_add_bias(const add_bias_params& p, cudaStream_t stream) {
    const int64_t total = int64_t(p.num_tokens) * p.n;
    if (total == 0) return;
    const int grid = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535));
    add_bias_kernel<<<grid, kThreads, 0, stream>>>(p.y, p.bias, total, p.n);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
