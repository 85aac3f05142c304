#pragma once
// The weights of one rank, mapped from Hugging Face tensor names per architecture. Views point into the
// memory-mapped checkpoint and keep its dtype; only the 1D tensors (norms, biases) are widened to fp32 at load.
// A rank holds every attention/dense/router weight and only the experts of its slots in the expert placement.
// Block-scaled FP8 (config.quantization, docs/fp8.md): the linear projections of the decoder layers are f8_e4m3
// views with their fp32 block scales, straight from an FP8 checkpoint (scales widened to fp32 at load) or quantized
// at load from a BF16 one (`--quantization fp8`, codes and scales owned here); embeddings, norms, routers, the
// shared-expert gate and lm_head stay in their checkpoint dtype.

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "messages/expert_placement.hpp"
#include "model/model_config.hpp"
#include "workers/safetensors.hpp"
#include "workers/tensor_view.hpp"

namespace zmoe {

class dummy_checkpoint;

/// A gated MLP: down(silu(gate x) * up x). gate/up: [I, H], down: [H, I].
struct mlp_weights {
    matrix_view gate;
    matrix_view up;
    matrix_view down;
};

/// Multi-head latent attention (DeepSeek), dn = qk_nope_head_dim, dr = qk_rope_head_dim, dv = v_head_dim,
/// r = kv_lora_rank.
struct mla_weights {
    matrix_view q_a;               ///< [q_lora_rank, H]; empty without q LoRA (attention_weights::q is q_proj then)
    std::vector<float> q_a_norm;   ///< [q_lora_rank]
    matrix_view q_b;               ///< [heads * (dn + dr), q_lora_rank]
    matrix_view kv_a;              ///< [r + dr, H]: the latent, then the shared rope key
    std::vector<float> kv_a_norm;  ///< [r]
    std::vector<float> kv_b;       ///< kv_b_proj widened to fp32: [heads * (dn + dv), r], per head dn key rows
                                   ///< then dv value rows
};

struct attention_weights {
    matrix_view q;                                      ///< [heads * head_dim, H] (MLA: q_proj, or empty)
    matrix_view k;                                      ///< [kv_heads * head_dim, H]
    matrix_view v;                                      ///< [kv_heads * head_dim, H]
    matrix_view o;                                      ///< [H, heads * head_dim]
    std::vector<float> q_bias, k_bias, v_bias, o_bias;  ///< empty when the architecture has none
    std::vector<float> q_norm, k_norm;  ///< [head_dim] (per_head) or [heads|kv_heads * head_dim] (full); or empty
    mla_weights mla;                    ///< MLA only (k, v unused; o is [H, heads * dv])
};

struct moe_weights {
    matrix_view router;                ///< [E, H]
    std::vector<float> router_bias;    ///< deepseek_v3: e_score_correction_bias [E]; else empty
    std::vector<mlp_weights> experts;  ///< this rank's slots, in placement order
    std::vector<int32_t> slot_expert;  ///< logical expert of each slot
    bool has_shared = false;           ///< qwen2_moe / DeepSeek shared expert(s)
    mlp_weights shared;
    matrix_view shared_gate;  ///< qwen2_moe: [1, H]; empty = ungated (DeepSeek)
};

struct layer_weights {
    std::vector<float> input_norm;  ///< [H]
    std::vector<float> post_norm;   ///< [H]
    attention_weights attn;
    int64_t moe_index = -1;  ///< index among MoE layers, -1 for a dense layer
    mlp_weights dense;       ///< dense layers only
    moe_weights moe;         ///< MoE layers only
};

class model_weights {
  public:
    /// Maps the checkpoint in `model_dir` for `rank` of `placement`. Throws zmoe::error(invalid_checkpoint) naming
    /// the file and tensor for a missing tensor or a wrong shape (expected vs got), (unsupported) for a dtype.
    /// config.quantization fp8: from an FP8 checkpoint (in_checkpoint) each FP8 linear's `weight_scale_inv` is read
    /// with it (shape [ceil(rows / 128), ceil(cols / 128)] checked); otherwise the linears are quantized at load
    /// (quantize_fp8_blocks), dummy weights included.
    /// load_format "dummy" (vLLM's name): no checkpoint is read; every tensor is generated from the config
    /// (dummy_checkpoint: N(0, 0.02^2) matrices, norms 1, biases 0).
    /// dummy_router_skew > 0 (with "dummy"): dummy_checkpoint's hot experts.
    model_weights(const std::string& model_dir, const model_config& config, const expert_placement& placement, int rank,
                  const std::string& load_format = "auto", double dummy_router_skew = 0);
    ~model_weights();
    model_weights(model_weights&&) noexcept;
    model_weights& operator=(model_weights&&) noexcept;

    const model_config& config() const { return config_; }
    const matrix_view& embed() const { return embed_; }      ///< [V, H]
    const matrix_view& lm_head() const { return lm_head_; }  ///< [V, H] (the embedding when tied)
    const std::vector<float>& final_norm() const { return final_norm_; }
    const std::vector<layer_weights>& layers() const { return layers_; }
    /// For EPLB expert moves (model_runner::apply_expert_moves): slots are re-pointed at received weights.
    std::vector<layer_weights>& mutable_layers() { return layers_; }
    /// Whether the checkpoint stores experts as fused 3D tensors (transformers 5) rather than one 2D tensor each.
    bool fused_experts() const { return fused_experts_; }
    /// Bytes of FP8 codes and scales quantized at load (0 when read from an FP8 checkpoint or unquantized).
    int64_t quantized_bytes() const { return quantized_bytes_; }

  private:
    template <class Source>
    void load(const Source& source, const expert_placement& placement, int rank);
    /// A linear projection's weight `name` ("....weight") [rows, cols]: FP8 with its scales (from the checkpoint,
    /// or quantized here), or in the checkpoint dtype where the format keeps it so.
    template <class Source>
    matrix_view linear(const Source& source, const std::string& name, int64_t rows, int64_t cols);
    /// A weight the format never quantizes (embeddings, lm_head, routers, gates): an FP8 one is refused.
    template <class Source>
    matrix_view plain(const Source& source, const std::string& name, int64_t rows, int64_t cols) const;
    /// `m` (any dtype) quantized to block-scaled FP8 into owned storage.
    matrix_view quantize(const matrix_view& m);

    model_config config_;
    std::unique_ptr<safetensors_checkpoint> checkpoint_;
    std::unique_ptr<dummy_checkpoint> dummy_;  // load_format "dummy": owns the generated tensors
    matrix_view embed_;
    matrix_view lm_head_;
    std::vector<float> final_norm_;
    std::vector<layer_weights> layers_;
    bool fused_experts_ = false;
    bool quantize_at_load_ = false;  // fp8 requested but the weights read are not FP8 (BF16 checkpoint, dummy)
    std::deque<std::vector<uint8_t>> fp8_codes_;  // quantized at load
    std::deque<std::vector<float>> fp8_scales_;   // block scales (read from the checkpoint, or computed)
    int64_t quantized_bytes_ = 0;
};

}  // namespace zmoe
