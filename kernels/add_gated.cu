// The shared expert's output added to the MoE output: scaled by sigmoid(shared_expert_gate(x)) (qwen2_moe), or
// as it is (DeepSeek, no gate logits). Launched programmatically dependent (pdl.cuh).

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void add_gated_kernel(bf16* out, const bf16* shared, const float* gate, int64_t total, int32_t hidden) {
    detail::pdl_wait();  // both terms come from kernels before
    detail::pdl_launch_dependents();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        float s = __bfloat162float(shared[i]);
        if (gate != nullptr) {
            const float g = 1.f / (1.f + __expf(-gate[i / hidden]));
            s = __bfloat162float(__float2bfloat16(g * s));
        }
        out[i] = __float2bfloat16(__bfloat162float(out[i]) + s);
    }
}

}  // namespace

void launch_add_gated(const add_gated_params& p, cudaStream_t stream) {
    const int64_t total = int64_t(p.num_tokens) * p.hidden;
    if (total == 0) return;
    const int grid = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535));
    detail::launch_pdl(add_gated_kernel, dim3(grid), dim3(kThreads), 0, stream, p.out, p.shared, p.gate_logits, total,
                       p.hidden);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
