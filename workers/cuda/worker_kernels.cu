#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "workers/cuda/worker_kernels.hpp"

namespace zmoe::cuda {
namespace {

constexpr int kThreads = 256;

int grid_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

__global__ void add_bias_kernel(bf16* y, const bf16* bias, int64_t total, int32_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = __float2bfloat16(__bfloat162float(y[i]) + __bfloat162float(bias[i % n]));
}

__global__ void silu_mul_kernel(const bf16* gu, bf16* out, int64_t total, int32_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = i / n, j = i % n;
        const float g = __bfloat162float(gu[t * 2 * n + j]);
        const float u = __bfloat162float(gu[t * 2 * n + n + j]);
        out[i] = __float2bfloat16(g / (1.f + __expf(-g)) * u);
    }
}

__global__ void gather_rows_kernel(const bf16* in, const int32_t* rows, bf16* out, int32_t hidden) {
    const int64_t src = rows[blockIdx.x];
    // hidden is a multiple of 8 (checked by the launcher): move 16-byte vectors.
    const uint4* s = reinterpret_cast<const uint4*>(in + src * hidden);
    uint4* d = reinterpret_cast<uint4*>(out + int64_t(blockIdx.x) * hidden);
    for (int i = threadIdx.x; i < hidden / 8; i += blockDim.x) d[i] = s[i];
}

__global__ void add_gated_kernel(bf16* out, const bf16* shared, const float* gate, int64_t total, int32_t hidden) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const float g = 1.f / (1.f + __expf(-gate[i / hidden]));
        const float s = __bfloat162float(__float2bfloat16(g * __bfloat162float(shared[i])));
        out[i] = __float2bfloat16(__bfloat162float(out[i]) + s);
    }
}

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

void launch_add_bias(bf16* y, const bf16* bias, int32_t num_tokens, int32_t n, cudaStream_t stream) {
    const int64_t total = int64_t(num_tokens) * n;
    if (total == 0) return;
    add_bias_kernel<<<grid_for(total), kThreads, 0, stream>>>(y, bias, total, n);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_silu_mul(const bf16* gate_up, bf16* out, int32_t num_tokens, int32_t n, cudaStream_t stream) {
    const int64_t total = int64_t(num_tokens) * n;
    if (total == 0) return;
    silu_mul_kernel<<<grid_for(total), kThreads, 0, stream>>>(gate_up, out, total, n);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_gather_rows(const bf16* in, const int32_t* rows, bf16* out, int32_t num_rows, int32_t hidden,
                        cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(hidden % 8 == 0, "gather_rows: hidden must be a multiple of 8");
    if (num_rows == 0) return;
    gather_rows_kernel<<<num_rows, 128, 0, stream>>>(in, rows, out, hidden);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_add_gated(bf16* out, const bf16* shared, const float* gate_logits, int32_t num_tokens, int32_t hidden,
                      cudaStream_t stream) {
    const int64_t total = int64_t(num_tokens) * hidden;
    if (total == 0) return;
    add_gated_kernel<<<grid_for(total), kThreads, 0, stream>>>(out, shared, gate_logits, total, hidden);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_qk_norm_clip(bf16* qkv, const bf16* q_norm, const bf16* k_norm, int32_t num_tokens, int32_t num_q_heads,
                         int32_t num_kv_heads, int32_t head_dim, bool per_head, float eps, float clip,
                         cudaStream_t stream) {
    if (num_tokens == 0) return;
    qk_norm_clip_kernel<<<num_tokens, kThreads, 0, stream>>>(qkv, q_norm, k_norm, num_q_heads, num_kv_heads, head_dim,
                                                             per_head, eps, clip);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::cuda
