// The unfused q/k RMSNorm + clamp OLMoE's clip_qkv needs (HF clamps after the norms and before RoPE; the fused
// launch_rope_qk_norm_kv has no clamp).

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;

// One block per token, one warp per normalised segment (a head, or the whole q / k projection).
__global__ void qk_norm_clip_kernel(bf16* qkv, const bf16* q_norm, const bf16* k_norm, int32_t num_q_heads,
                                    int32_t num_kv_heads, int32_t head_dim, bool per_head, float eps, float clip) {
    const int32_t q_dim = num_q_heads * head_dim, kv_dim = num_kv_heads * head_dim;
    const int32_t row_len = q_dim + 2 * kv_dim;
    bf16* row = qkv + int64_t(blockIdx.x) * row_len;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int num_segments = per_head ? num_q_heads + num_kv_heads : 2;
    if (q_norm && k_norm) {
        for (int s = warp; s < num_segments; s += blockDim.x / 32) {
            const bool is_q = per_head ? s < num_q_heads : s == 0;
            const int32_t len = per_head ? head_dim : (is_q ? q_dim : kv_dim);
            const int32_t start = per_head ? s * head_dim : (is_q ? 0 : q_dim);
            const bf16* w = is_q ? q_norm : k_norm;
            float ss = 0.f;
            for (int i = lane; i < len; i += 32) {
                const float v = __bfloat162float(row[start + i]);
                ss += v * v;
            }
            for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            const float inv = rsqrtf(ss / len + eps);
            for (int i = lane; i < len; i += 32)
                row[start + i] = __float2bfloat16(__bfloat162float(row[start + i]) * inv * __bfloat162float(w[i]));
        }
        __syncthreads();
    }
    if (clip > 0.f)
        for (int i = threadIdx.x; i < row_len; i += blockDim.x)
            row[i] = __float2bfloat16(fminf(fmaxf(__bfloat162float(row[i]), -clip), clip));
}

}  // namespace

void launch_qk_norm_clip(const qk_norm_clip_params& p, cudaStream_t stream) {
    if (p.num_tokens == 0) return;
    qk_norm_clip_kernel<<<p.num_tokens, kThreads, 0, stream>>>(p.qkv, p.q_norm_weight, p.k_norm_weight, p.num_q_heads,
                                                               p.num_kv_heads, p.head_dim, p.per_head, p.eps, p.clip);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
