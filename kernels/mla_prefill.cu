// MLA prefill in the expanded form: the data movement around the up-projection GEMM and the prefill attention
// kernel (gather of the latents a chunk sees, per-head K/V layout, zero padding of heads to a supported head dim; or,
// where the kernel takes the model's head dims, the gather writing K's rope part for the batched K/V GEMMs).

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/mla_gemm.hpp"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ detail::bf16x8 zero8() {
    detail::bf16x8 x;
    *reinterpret_cast<uint4*>(&x) = make_uint4(0, 0, 0, 0);
    return x;
}

__global__ void __launch_bounds__(kThreads) mla_gather_latent_kernel(const mla_gather_latent_params p) {
    const int32_t chunks = p.kv_lora_rank / 8, width = p.kv_lora_rank + p.rope_dim;
    const int64_t total = int64_t(p.num_rows) * chunks;
    for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < total; v += int64_t(gridDim.x) * blockDim.x) {
        const int32_t i = int32_t(v / chunks), c = int32_t(v % chunks);
        const int32_t slot = p.slots[i];
        detail::bf16x8 x = zero8();
        if (slot >= 0) x = *reinterpret_cast<const detail::bf16x8*>(p.cache + size_t(slot) * width + c * 8);
        *reinterpret_cast<detail::bf16x8*>(p.latent + size_t(i) * p.kv_lora_rank + c * 8) = x;
    }
}

// One block per row: the latent chunks, then k_pe's chunks broadcast to every head's rope slot of K.
__global__ void __launch_bounds__(kThreads) mla_gather_latent_rope_kernel(const mla_gather_latent_rope_params p) {
    const int32_t i = blockIdx.x, slot = p.slots[i];
    const int32_t lc = p.kv_lora_rank / 8, rc = p.rope_dim / 8, width = p.kv_lora_rank + p.rope_dim;
    const int32_t qk = p.nope_dim + p.rope_dim;
    const bf16* row = slot >= 0 ? p.cache + size_t(slot) * width : nullptr;
    for (int32_t c = threadIdx.x; c < lc; c += blockDim.x) {
        detail::bf16x8 x = zero8();
        if (row != nullptr) x = *reinterpret_cast<const detail::bf16x8*>(row + c * 8);
        *reinterpret_cast<detail::bf16x8*>(p.latent + size_t(i) * p.kv_lora_rank + c * 8) = x;
    }
    bf16* k = p.k + size_t(i) * p.num_heads * qk + p.nope_dim;
    for (int32_t e = threadIdx.x; e < p.num_heads * rc; e += blockDim.x) {
        const int32_t h = e / rc, c = e % rc;
        detail::bf16x8 x = zero8();
        if (row != nullptr) x = *reinterpret_cast<const detail::bf16x8*>(row + p.kv_lora_rank + c * 8);
        *reinterpret_cast<detail::bf16x8*>(k + size_t(h) * qk + c * 8) = x;
    }
}

// One block per row: K then V, element by element (any dims).
__global__ void __launch_bounds__(kThreads) mla_build_kv_kernel(const mla_build_kv_params p) {
    const int32_t i = blockIdx.x, slot = p.slots[i];
    const int32_t dn = p.nope_dim, dr = p.rope_dim, dv = p.v_dim, up = dn + dv;
    const bf16* src = p.kv_up + size_t(i) * p.num_heads * up;
    const bf16* pe = slot >= 0 ? p.cache + size_t(slot) * (p.kv_lora_rank + dr) + p.kv_lora_rank : nullptr;
    const bf16 zero = __float2bfloat16(0.f);
    bf16* k = p.k + size_t(i) * p.num_heads * p.k_dim;
    for (int32_t e = threadIdx.x; e < p.num_heads * p.k_dim; e += blockDim.x) {
        const int32_t h = e / p.k_dim, d = e % p.k_dim;
        k[e] = d < dn ? src[h * up + d] : d < dn + dr ? (pe != nullptr ? pe[d - dn] : zero) : zero;
    }
    bf16* v = p.v + size_t(i) * p.num_heads * p.v_out_dim;
    for (int32_t e = threadIdx.x; e < p.num_heads * p.v_out_dim; e += blockDim.x) {
        const int32_t h = e / p.v_out_dim, d = e % p.v_out_dim;
        v[e] = d < dv ? src[h * up + dn + d] : zero;
    }
}

// Rows of 8-element chunks when every dim allows it (DeepSeek's 128 / 64 / 128), the element path otherwise.
__global__ void __launch_bounds__(kThreads) mla_build_kv_vec_kernel(const mla_build_kv_params p) {
    const int32_t i = blockIdx.x, slot = p.slots[i];
    const int32_t dn = p.nope_dim, dr = p.rope_dim, dv = p.v_dim, up = dn + dv;
    const int32_t kc = p.k_dim / 8, vc = p.v_out_dim / 8;
    const bf16* src = p.kv_up + size_t(i) * p.num_heads * up;
    const bf16* pe = slot >= 0 ? p.cache + size_t(slot) * (p.kv_lora_rank + dr) + p.kv_lora_rank : nullptr;
    bf16* k = p.k + size_t(i) * p.num_heads * p.k_dim;
    for (int32_t e = threadIdx.x; e < p.num_heads * kc; e += blockDim.x) {
        const int32_t h = e / kc, d = (e % kc) * 8;
        detail::bf16x8 x = zero8();
        if (d < dn)
            x = *reinterpret_cast<const detail::bf16x8*>(src + h * up + d);
        else if (d < dn + dr && pe != nullptr)
            x = *reinterpret_cast<const detail::bf16x8*>(pe + d - dn);
        *reinterpret_cast<detail::bf16x8*>(k + size_t(e) * 8) = x;
    }
    bf16* v = p.v + size_t(i) * p.num_heads * p.v_out_dim;
    for (int32_t e = threadIdx.x; e < p.num_heads * vc; e += blockDim.x) {
        const int32_t h = e / vc, d = (e % vc) * 8;
        detail::bf16x8 x = zero8();
        if (d < dv) x = *reinterpret_cast<const detail::bf16x8*>(src + h * up + dn + d);
        *reinterpret_cast<detail::bf16x8*>(v + size_t(e) * 8) = x;
    }
}

__global__ void __launch_bounds__(kThreads) mla_repack_heads_kernel(const mla_repack_heads_params p) {
    const int64_t total = int64_t(p.num_rows) * p.num_heads * p.out_dim;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
        const int64_t row_head = e / p.out_dim;
        const int32_t d = int32_t(e % p.out_dim);
        p.out[e] = d < p.in_dim ? p.in[row_head * p.in_dim + d] : __float2bfloat16(0.f);
    }
}

int grid_for(int64_t items) { return int(std::min<int64_t>((items + kThreads - 1) / kThreads, 8192)); }

}  // namespace

void launch_mla_gather_latent(const mla_gather_latent_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.kv_lora_rank % 8 == 0 && p.rope_dim % 8 == 0,
                        "mla_gather_latent: kv_lora_rank and rope_dim must be multiples of 8");
    if (p.num_rows == 0) return;
    mla_gather_latent_kernel<<<grid_for(int64_t(p.num_rows) * p.kv_lora_rank / 8), kThreads, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_mla_gather_latent_rope(const mla_gather_latent_rope_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.kv_lora_rank % 8 == 0 && p.rope_dim % 8 == 0 && p.nope_dim % 8 == 0,
                        "mla_gather_latent_rope: kv_lora_rank, rope_dim and nope_dim must be multiples of 8");
    if (p.num_rows == 0) return;
    mla_gather_latent_rope_kernel<<<p.num_rows, kThreads, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_mla_build_kv(const mla_build_kv_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.k_dim >= p.nope_dim + p.rope_dim && p.v_out_dim >= p.v_dim,
                        "mla_build_kv: k_dim must hold nope + rope and v_out_dim v");
    if (p.num_rows == 0) return;
    const bool vec = p.nope_dim % 8 == 0 && p.rope_dim % 8 == 0 && p.v_dim % 8 == 0 && p.k_dim % 8 == 0 &&
                     p.v_out_dim % 8 == 0 && p.kv_lora_rank % 8 == 0;
    if (vec)
        mla_build_kv_vec_kernel<<<p.num_rows, kThreads, 0, stream>>>(p);
    else
        mla_build_kv_kernel<<<p.num_rows, kThreads, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_mla_repack_heads(const mla_repack_heads_params& p, cudaStream_t stream) {
    if (p.num_rows == 0) return;
    mla_repack_heads_kernel<<<grid_for(int64_t(p.num_rows) * p.num_heads * p.out_dim), kThreads, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
