#pragma once
// The glue kernels the CUDA worker needs between zmoe's model kernels (kernels/api.hpp): bias add, SiLU·up for
// the dense MLPs, row gathers for the expert dispatch and the LM head, the qwen2_moe shared-expert gate, and the
// unfused q/k norm + clamp OLMoE's clip_qkv needs. Same conventions as kernels/: BF16 storage, fp32 arithmetic,
// launchers only enqueue on the stream; num_tokens == 0 is a no-op.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace zmoe::cuda {

using bf16 = __nv_bfloat16;

/// y[t, j] = bf16(y[t, j] + bias[j]); y [num_tokens, n], bias [n].
void launch_add_bias(bf16* y, const bf16* bias, int32_t num_tokens, int32_t n, cudaStream_t stream);

/// out[t, j] = bf16(silu(gate_up[t, j]) * gate_up[t, n + j]); gate_up [num_tokens, 2n] (gate | up), out [num_tokens,
/// n].
void launch_silu_mul(const bf16* gate_up, bf16* out, int32_t num_tokens, int32_t n, cudaStream_t stream);

/// out[i] = in[rows[i]]; in [*, hidden], rows [num_rows], out [num_rows, hidden].
void launch_gather_rows(const bf16* in, const int32_t* rows, bf16* out, int32_t num_rows, int32_t hidden,
                        cudaStream_t stream);

/// out[t] = bf16(out[t] + bf16(sigmoid(gate_logits[t]) * shared[t])); out, shared [num_tokens, hidden],
/// gate_logits [num_tokens] fp32 (qwen2_moe's shared expert).
void launch_add_gated(bf16* out, const bf16* shared, const float* gate_logits, int32_t num_tokens, int32_t hidden,
                      cudaStream_t stream);

/// In place on qkv [num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim] (q | k | v): RMSNorm of q and k —
/// per head with weights [head_dim] when per_head, else over the whole projection with weights
/// [num_*_heads * head_dim]; null weights skip the norm — then q, k and v clamped to [-clip, clip].
void launch_qk_norm_clip(bf16* qkv, const bf16* q_norm, const bf16* k_norm, int32_t num_tokens, int32_t num_q_heads,
                         int32_t num_kv_heads, int32_t head_dim, bool per_head, float eps, float clip,
                         cudaStream_t stream);

}  // namespace zmoe::cuda
