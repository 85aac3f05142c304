#pragma once
// The weights of one CUDA worker rank in device memory, BF16: every attention, norm, dense and router weight, and
// the experts of this rank's placement slots stacked as the grouped GEMM reads them. Uploaded from the mapped
// checkpoint through model_weights (which knows every architecture's tensor names and both expert layouts);
// F16/F32 tensors are converted to BF16 on the host on the way.

#include <cstdint>
#include <vector>

#include "workers/cuda/device_buffer.hpp"
#include "workers/model_weights.hpp"

namespace zmoe::cuda {

/// A gated MLP on the device: gate_up [2 * inter, hidden] (gate rows, then up rows), down [hidden, inter].
struct cuda_mlp {
    device_buffer gate_up;
    device_buffer down;
    int64_t inter = 0;
};

/// Multi-head latent attention (DeepSeek) on the device; shapes as mla_weights (r = kv_lora_rank).
struct cuda_mla {
    device_buffer q_a;        // [q_lora_rank, H]; empty without q LoRA
    device_buffer q_a_norm;   // [q_lora_rank]
    device_buffer q_b;        // [heads * (dn + dr), q_lora_rank], or q_proj [heads * (dn + dr), H] without q LoRA
    device_buffer kv_a;       // [r + dr, H]
    device_buffer kv_a_norm;  // [r]
    device_buffer kv_b;       // [heads * (dn + dv), r]
};

struct cuda_layer {
    device_buffer input_norm;  // [H]
    device_buffer post_norm;   // [H]
    device_buffer qkv;         // [(heads + 2 * kv_heads) * head_dim, H]: q | k | v rows
    device_buffer qkv_bias;    // [(heads + 2 * kv_heads) * head_dim] or empty
    device_buffer o;           // [H, heads * head_dim]
    device_buffer o_bias;      // [H] or empty
    device_buffer q_norm;      // [head_dim] (per head) or [heads * head_dim] (whole), or empty
    device_buffer k_norm;      // [head_dim] or [kv_heads * head_dim], or empty
    cuda_mla mla;              // DeepSeek only (qkv empty then; o is [H, heads * v_head_dim])
    int64_t moe_index = -1;    // index among MoE layers, -1 for a dense layer
    cuda_mlp dense;            // dense layers only
    // MoE layers only:
    device_buffer router;           // [E, H]
    device_buffer router_bias;      // deepseek_v3: e_score_correction_bias [E], fp32; else empty
    device_buffer experts_gate_up;  // [num_slots, 2 * I, H]
    device_buffer experts_down;     // [num_slots, H, I]
    int32_t num_slots = 0;
    bool has_shared = false;
    cuda_mlp shared;
    device_buffer shared_gate;  // [1, H]; empty: ungated (DeepSeek)
};

struct cuda_weights {
    device_buffer embed;    // [V, H]
    device_buffer lm_head;  // [V, H]; empty when tied to embed
    device_buffer final_norm;
    std::vector<cuda_layer> layers;
    int64_t bytes = 0;  ///< device bytes the weights take

    const device_buffer& head() const { return lm_head.empty() ? embed : lm_head; }

    /// Uploads `w` (host views) to the current device. Throws zmoe::error(out_of_memory) when it does not fit.
    static cuda_weights upload(const model_weights& w);
    /// `--load-format dummy`: `rank`'s weights of `placement` generated on the current device from the config alone,
    /// spread like a trained model's: matrices ~ N(0, 0.02^2) (transformers' initializer_range), norms 1, biases 0.
    /// Every tensor has its own deterministic stream (a logical expert's weights do not depend on its slot or rank).
    static cuda_weights dummy(const model_config& c, const expert_placement& placement, int rank);
};

/// Bytes of one expert's weights on the device (gate_up then down, BF16).
int64_t expert_bytes(const model_config& c);

/// `--dummy-router-skew` on the device: the same hot experts as the CPU backend's dummy weights
/// (workers/dummy_weights.hpp: embedding column 0, zero row 0 of every residual writer, router column 0), applied
/// to weights cuda_weights::dummy generated. 0 leaves them as they are. Throws zmoe::error(invalid_argument) for a
/// negative or non-finite skew.
void apply_dummy_router_skew(cuda_weights& w, const model_config& c, double skew);

}  // namespace zmoe::cuda
