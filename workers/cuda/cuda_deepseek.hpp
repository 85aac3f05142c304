#pragma once
// The DeepSeek-V2/V3 parts of the CUDA forward pass, called from cuda_step_executor: multi-head latent attention
// over the paged latent cache, the group-limited routers, and the load-time checks of what the kernels support.
//
// MLA per layer (dn / dr / dv: qk_nope / qk_rope / v head dims, r = kv_lora_rank): q = q_b(RMSNorm(q_a(x))) (or
// q_proj(x) without q LoRA) [T, heads, dn + dr]; kv = kv_a_proj_with_mqa(x) [T, r + dr] → launch_mla_rope_kv:
// the cache row [RMSNorm(kv[:r]) | rope(kv[r:])] and rope of every head's q_pe (YaRN's attention factor on cos
// and sin, interleaved or rotate-half) → absorbed attention: q_lat = W_k^T q_nope (fp32), softmax over
// q_lat . c_j + q_pe . k_pe_j with DeepSeek's softmax scale, o_lat = softmax . c (fp32), out = W_v o_lat →
// o_proj. Neither K nor V is ever expanded: the cache holds (r + dr) BF16 values per token and layer.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/api.hpp"
#include "model/model_config.hpp"
#include "workers/cuda/cuda_weights.hpp"
#include "workers/cuda/device_buffer.hpp"

namespace zmoe::cuda {

/// Throws zmoe::error(unsupported) naming the config.json field when a DeepSeek configuration is outside what
/// the MLA and router kernels support. Does nothing for other architectures' attention.
void check_deepseek_supported(const model_config& c);

/// Whether `c`'s router runs launch_router_grouped (group-limited kinds, or a routed_scaling_factor != 1) rather
/// than launch_router_topk.
bool uses_grouped_router(const model_config& c);

/// logits [num_tokens, E] (fp32) → topk ids and weights (routed_scaling_factor included) for `c`'s router kind.
void launch_deepseek_router(const model_config& c, const cuda_layer& w, const float* logits, int32_t* topk_ids,
                            float* topk_weights, int32_t num_tokens, cudaStream_t stream);

/// What one MLA attention call reads of the step (device pointers from the executor's workspace).
struct mla_step {
    const int32_t* positions = nullptr;     // [num_tokens]
    const int32_t* kv_slots = nullptr;      // [num_tokens]
    const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
    const int32_t* query_start = nullptr;   // [num_seqs + 1]
    const int32_t* start_pos = nullptr;     // [num_seqs]
    int32_t num_tokens = 0;
    int32_t num_seqs = 0;
    int32_t block_size = 0;
    int32_t max_blocks_per_seq = 0;
};

/// The cuBLASLt handle and scratch the executor's GEMMs use.
struct gemm_context {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
};

/// MLA attention for every layer of one executor: its scratch buffers (sized once for max_tokens, fixed addresses
/// for the decode graphs) and the RoPE frequencies.
class mla_attention_runner {
  public:
    /// Allocates on the current device; throws zmoe::error(out_of_memory).
    mla_attention_runner(const model_config& c, int32_t max_tokens);

    /// One layer: xn [num_tokens, H] (input-normed) → out [num_tokens, H] (o_proj's output); the step's rows are
    /// written into `cache` ([num_blocks, block_size, r + dr]) first. Only launches on `stream` (capturable).
    void run(const cuda_layer& w, const mla_step& s, const kernels::bf16* xn, kernels::bf16* cache, kernels::bf16* out,
             const gemm_context& g, cudaStream_t stream) const;

    /// Device bytes of the scratch buffers.
    int64_t bytes() const { return bytes_; }

  private:
    model_config c_;
    device_buffer qa_, q_, kv_, q_lat_, o_lat_, attn_, inv_freq_;
    int64_t bytes_ = 0;
};

}  // namespace zmoe::cuda
