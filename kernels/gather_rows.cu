// Row gather: the expert-parallel send buffer and the LM head's last rows.

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::kernels {
namespace {

__global__ void gather_rows_kernel(const bf16* in, const int32_t* rows, bf16* out, int32_t hidden) {
    const int64_t src = rows[blockIdx.x];
    // hidden is a multiple of 8 (checked by the launcher): move 16-byte vectors.
    const uint4* s = reinterpret_cast<const uint4*>(in + src * hidden);
    uint4* d = reinterpret_cast<uint4*>(out + int64_t(blockIdx.x) * hidden);
    for (int i = threadIdx.x; i < hidden / 8; i += blockDim.x) d[i] = s[i];
}

}  // namespace

void launch_gather_rows(const gather_rows_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.hidden % 8 == 0, "gather_rows: hidden must be a multiple of 8");
    if (p.num_rows == 0) return;
    gather_rows_kernel<<<p.num_rows, 128, 0, stream>>>(p.in, p.rows, p.out, p.hidden);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
