#pragma once
// The architecture hyper-parameters of a Hugging Face MoE checkpoint, read from its config.json (transformers
// 4.x and 5.x spellings) and generation_config.json.

#include <cstdint>
#include <string>
#include <vector>

namespace zmoe {

enum class model_arch : uint8_t { qwen3_moe, qwen2_moe, mixtral, olmoe };

/// The model_type spelling of `a` ("qwen3_moe", ...).
const char* model_arch_name(model_arch a);

/// Where q/k RMSNorms sit, if any.
enum class qk_norm_kind : uint8_t {
    none,
    per_head,  ///< qwen3_moe: RMSNorm over head_dim, weight [head_dim], shared by all heads
    full,      ///< olmoe: RMSNorm over the whole projection, weight [heads * head_dim]
};

struct model_config {
    model_arch arch = model_arch::qwen3_moe;
    std::string dtype = "bfloat16";  ///< torch_dtype / dtype, informational: weights keep their file dtype

    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t num_layers = 0;
    int64_t num_heads = 0;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;

    int64_t num_experts = 0;
    int64_t num_experts_per_tok = 0;
    int64_t moe_intermediate_size = 0;    ///< per routed expert
    int64_t dense_intermediate_size = 0;  ///< dense MLP layers (mlp_only_layers / decoder_sparse_step); 0 if none
    int64_t shared_expert_intermediate_size = 0;  ///< qwen2_moe shared expert; 0 = no shared expert
    bool norm_topk_prob = false;                  ///< renormalise the top-k routing weights to sum to 1
    std::vector<int64_t> mlp_only_layers;
    int64_t decoder_sparse_step = 1;

    float rms_norm_eps = 1e-6f;
    double rope_theta = 10000.0;
    bool tie_word_embeddings = false;
    bool qkv_bias = false;  ///< q/k/v projections carry a bias
    bool o_bias = false;    ///< o projection carries a bias
    qk_norm_kind qk_norm = qk_norm_kind::none;
    float clip_qkv = 0.f;  ///< olmoe: clamp q/k/v to [-clip, clip] after the norms; 0 = off
    int64_t max_position_embeddings = 0;
    int64_t sliding_window = 0;  ///< mixtral: attend to the last this-many positions; 0 = full causal attention

    std::vector<int32_t> eos_token_ids;  ///< config.json then generation_config.json, duplicates removed
    int32_t bos_token_id = -1;           ///< -1 = none

    /// Whether layer `layer` routes through experts (otherwise it has a dense MLP).
    bool is_moe_layer(int64_t layer) const;
    /// Number of MoE layers.
    int64_t num_moe_layers() const;
    /// For every layer, its index among MoE layers, or -1 for a dense layer.
    std::vector<int64_t> moe_layer_indices() const;

    /// Parses `config_text` (contents of `file`, named in errors). Throws zmoe::error(unsupported) for an
    /// architecture or RoPE type we do not implement, (invalid_checkpoint) for a missing or malformed field.
    static model_config parse(const std::string& config_text, const std::string& file = "config.json");
    /// Reads DIR/config.json and, if present, DIR/generation_config.json.
    static model_config load(const std::string& model_dir);
};

}  // namespace zmoe
