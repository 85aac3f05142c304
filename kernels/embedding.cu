// Embedding gather: one warp-strided row copy per token, 16-byte accesses.

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"

namespace zmoe::kernels {
namespace {

__global__ void embedding_kernel(const embedding_params p) {
    const int32_t t = blockIdx.x;
    const int32_t id = p.token_ids[t];
    const bool valid = id >= 0 && id < p.vocab_size;
    const auto* src = reinterpret_cast<const detail::bf16x8*>(p.table + size_t(valid ? id : 0) * p.hidden);
    auto* dst = reinterpret_cast<detail::bf16x8*>(p.out + size_t(t) * p.hidden);
    for (int32_t i = threadIdx.x; i < p.hidden / 8; i += blockDim.x) {
        detail::bf16x8 v{};
        if (valid) v = src[i];
        dst[i] = v;
    }
}

}  // namespace

void launch_embedding(const embedding_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.hidden % 8 == 0, "embedding: hidden must be a multiple of 8");
    if (p.num_tokens == 0) return;
    embedding_kernel<<<p.num_tokens, 128, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
