#pragma once
// The architecture hyper-parameters of a Hugging Face MoE checkpoint, read from its config.json (transformers
// 4.x and 5.x spellings) and generation_config.json.

#include <cstdint>
#include <string>
#include <vector>

namespace zmoe {

enum class model_arch : uint8_t { qwen3_moe, qwen2_moe, mixtral, olmoe, deepseek_v2, deepseek_v3 };

/// The model_type spelling of `a` ("qwen3_moe", ...).
const char* model_arch_name(model_arch a);

/// Where q/k RMSNorms sit, if any.
enum class qk_norm_kind : uint8_t {
    none,
    per_head,  ///< qwen3_moe: RMSNorm over head_dim, weight [head_dim], shared by all heads
    full,      ///< olmoe: RMSNorm over the whole projection, weight [heads * head_dim]
};

/// How a router turns logits into the top-k experts and their weights (see workers/router.hpp).
enum class router_kind : uint8_t {
    softmax_topk,           ///< softmax over all experts, top-k, renormalised iff norm_topk_prob (qwen, mixtral, olmoe,
                            ///< deepseek_v2 "greedy")
    softmax_group_limited,  ///< deepseek_v2 "group_limited_greedy": softmax; keep the topk_group groups with the
                            ///< highest max score (others scored 0); top-k
    sigmoid_group_limited,  ///< deepseek_v3 "noaux_tc": sigmoid; selection by score + e_score_correction_bias
                            ///< within the topk_group groups whose top-2 sum is highest; weights are the plain
                            ///< sigmoid scores, renormalised iff norm_topk_prob
};

/// RoPE frequencies: HF "default" or "yarn" (the DeepSeek family).
struct rope_params {
    std::string type = "default";  ///< "default" or "yarn"
    double theta = 10000.0;
    double factor = 1.0;  ///< yarn
    int64_t original_max_position_embeddings = 0;
    double attention_factor = 1.0;  ///< cos and sin are multiplied by this (yarn's mscale / mscale_all_dim ratio)
    double beta_fast = 32.0, beta_slow = 1.0;
    bool truncate = true;
    double mscale_all_dim = 0.0;  ///< DeepSeek: the softmax scale is multiplied by yarn_mscale(factor, this)^2
};

/// Multi-head latent attention (deepseek_v2 / deepseek_v3). Zero kv_lora_rank = ordinary attention.
struct mla_params {
    int64_t q_lora_rank = 0;  ///< 0 = no q LoRA (q_proj straight from the hidden state, as DeepSeek-V2-Lite)
    int64_t kv_lora_rank = 0;
    int64_t qk_nope_head_dim = 0;
    int64_t qk_rope_head_dim = 0;
    int64_t v_head_dim = 0;
    bool rope_interleave = true;  ///< rotate pairs (2i, 2i+1) rather than (i, i + d/2)
};

/// Weight quantization: config.json's quantization_config (the checkpoint stores quantized weights), or
/// `--quantization` (the BF16 checkpoint is quantized at load). Only DeepSeek-V3's block-scaled FP8 is implemented
/// (docs/fp8.md, workers/fp8.hpp).
struct quantization_params {
    /// "" = none (weights in their checkpoint dtype); "fp8": e4m3 weights with one fp32 scale per 128 x 128 block,
    /// activations quantized per token and 128-channel group at run time ("dynamic").
    std::string method;
    bool in_checkpoint = false;  ///< the checkpoint's weights are quantized (quantization_config); else at load
    /// modules_to_not_convert / ignored_layers: a linear whose tensor name contains one of these stays unquantized.
    std::vector<std::string> modules_to_not_convert;

    bool fp8() const { return method == "fp8"; }
    /// Whether the linear whose weight tensor is `tensor_name` is exempted by modules_to_not_convert.
    bool not_converted(const std::string& tensor_name) const;
};

struct model_config {
    model_arch arch = model_arch::qwen3_moe;
    std::string dtype = "bfloat16";  ///< torch_dtype / dtype, informational: weights keep their file dtype

    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t num_layers = 0;
    int64_t num_heads = 0;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;  ///< with MLA: qk_nope_head_dim + qk_rope_head_dim (the q.k width); num_kv_heads = num_heads

    int64_t num_experts = 0;
    int64_t num_experts_per_tok = 0;
    int64_t moe_intermediate_size = 0;    ///< per routed expert
    int64_t dense_intermediate_size = 0;  ///< dense MLP layers (mlp_only_layers / decoder_sparse_step); 0 if none
    int64_t shared_expert_intermediate_size = 0;  ///< qwen2_moe / deepseek shared expert; 0 = no shared expert
    bool shared_expert_gated = false;             ///< qwen2_moe: sigmoid(shared_expert_gate x) scales the shared expert
    bool norm_topk_prob = false;                  ///< renormalise the top-k routing weights to sum to 1
    router_kind router = router_kind::softmax_topk;
    int64_t n_group = 1;                 ///< group-limited routers: experts split into this many groups
    int64_t topk_group = 1;              ///< ... of which this many are kept
    double routed_scaling_factor = 1.0;  ///< routed weights are multiplied by this (after any renormalisation)
    bool router_bias = false;            ///< deepseek_v3: gate.e_score_correction_bias [E] shifts the selection
    std::vector<int64_t> mlp_only_layers;
    int64_t decoder_sparse_step = 1;

    float rms_norm_eps = 1e-6f;
    double rope_theta = 10000.0;
    rope_params rope;  ///< rope.theta == rope_theta
    mla_params mla;    ///< DeepSeek only
    bool tie_word_embeddings = false;
    bool qkv_bias = false;  ///< q/k/v projections carry a bias
    bool o_bias = false;    ///< o projection carries a bias
    qk_norm_kind qk_norm = qk_norm_kind::none;
    float clip_qkv = 0.f;  ///< olmoe: clamp q/k/v to [-clip, clip] after the norms; 0 = off
    int64_t max_position_embeddings = 0;
    int64_t sliding_window = 0;  ///< mixtral: attend to the last this-many positions; 0 = full causal attention

    quantization_params quantization;

    std::vector<int32_t> eos_token_ids;  ///< config.json then generation_config.json, duplicates removed
    int32_t bos_token_id = -1;           ///< -1 = none

    /// Whether attention is multi-head latent attention (DeepSeek): the KV cache then holds, per token and layer,
    /// the normalised latent [kv_lora_rank] followed by the rotated rope key [qk_rope_head_dim], and no V.
    bool is_mla() const { return mla.kv_lora_rank > 0; }
    /// Floats one token takes in one layer's K (and, without MLA, V) cache.
    int64_t kv_width() const;
    /// RoPE inverse frequencies of the rotated dimensions (head_dim, or qk_rope_head_dim with MLA), fp32 as
    /// transformers computes them (yarn included).
    std::vector<float> rope_inv_freq() const;
    /// The attention softmax scale: 1/sqrt(q·k dim), times DeepSeek's yarn mscale(factor, mscale_all_dim)^2.
    float softmax_scale() const;

    /// Whether layer `layer` routes through experts (otherwise it has a dense MLP).
    bool is_moe_layer(int64_t layer) const;
    /// Number of MoE layers.
    int64_t num_moe_layers() const;
    /// For every layer, its index among MoE layers, or -1 for a dense layer.
    std::vector<int64_t> moe_layer_indices() const;

    /// Applies `--quantization` (vLLM's flag): "" keeps the checkpoint's own format; "fp8" quantizes a BF16
    /// checkpoint's linears at load to the block-scaled FP8 format (a no-op on an FP8 checkpoint). Throws
    /// zmoe::error(unsupported) naming any other value.
    void apply_quantization_flag(const std::string& flag);

    /// Parses `config_text` (contents of `file`, named in errors). Throws zmoe::error(unsupported) for an
    /// architecture, RoPE type or quantization_config we do not implement (naming the quant_method), and
    /// (invalid_checkpoint) for a missing or malformed field.
    static model_config parse(const std::string& config_text, const std::string& file = "config.json");
    /// Reads DIR/config.json and, if present, DIR/generation_config.json.
    static model_config load(const std::string& model_dir);
};

}  // namespace zmoe
