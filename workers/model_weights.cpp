#include "workers/model_weights.hpp"

#include <cmath>
#include <type_traits>

#include "base/error.hpp"
#include "workers/dummy_weights.hpp"
#include "workers/fp8.hpp"

namespace zmoe {
namespace {

// The name of `tensor` for errors: safetensors files say where, dummy weights have no file.
template <class Source>
std::string where(const Source& ck, const std::string& tensor) {
    if constexpr (std::is_same_v<Source, safetensors_checkpoint>) {
        return ck.file_of(tensor) + ": tensor '" + tensor + "'";
    } else {
        return "tensor '" + tensor + "'";
    }
}

// The MoE block's name prefix in layer `l`: "mlp." everywhere except Mixtral checkpoints written by transformers
// 4.x, which say "block_sparse_moe.".
template <class Source>
std::string moe_prefix(const Source& ck, const model_config& c, const std::string& layer) {
    if (c.arch == model_arch::mixtral && (ck.contains(layer + "block_sparse_moe.gate.weight")))
        return layer + "block_sparse_moe.";
    return layer + "mlp.";
}

// The linear projections (`Linear` = a callable (name, rows, cols) -> matrix_view: model_weights::linear).
template <class Linear>
mlp_weights load_mlp(Linear&& W, const std::string& prefix, int64_t hidden, int64_t inter) {
    return {W(prefix + "gate_proj.weight", inter, hidden), W(prefix + "up_proj.weight", inter, hidden),
            W(prefix + "down_proj.weight", hidden, inter)};
}

// One expert of a per-expert checkpoint: gate_proj/up_proj/down_proj, or Mixtral's w1/w3/w2.
template <class Source, class Linear>
mlp_weights load_expert(const Source& ck, Linear&& W, const std::string& prefix, int64_t e, int64_t hidden,
                        int64_t inter) {
    const std::string p = prefix + "experts." + std::to_string(e) + ".";
    if (!ck.contains(p + "gate_proj.weight") && ck.contains(p + "w1.weight")) {
        return {W(p + "w1.weight", inter, hidden), W(p + "w3.weight", inter, hidden),
                W(p + "w2.weight", hidden, inter)};
    }
    return load_mlp(W, p, hidden, inter);
}

template <class Source, class Linear>
void load_attention(const Source& ck, Linear&& W, const model_config& c, const std::string& ap, attention_weights& a) {
    const int64_t H = c.hidden_size, D = c.head_dim;
    const int64_t q_dim = c.num_heads * D, kv_dim = c.num_kv_heads * D;
    a.q = W(ap + "q_proj.weight", q_dim, H);
    a.k = W(ap + "k_proj.weight", kv_dim, H);
    a.v = W(ap + "v_proj.weight", kv_dim, H);
    a.o = W(ap + "o_proj.weight", H, q_dim);
    if (c.qkv_bias) {
        a.q_bias = ck.get_vector(ap + "q_proj.bias", q_dim);
        a.k_bias = ck.get_vector(ap + "k_proj.bias", kv_dim);
        a.v_bias = ck.get_vector(ap + "v_proj.bias", kv_dim);
    }
    if (c.o_bias) a.o_bias = ck.get_vector(ap + "o_proj.bias", H);
    if (c.qk_norm == qk_norm_kind::per_head) {
        a.q_norm = ck.get_vector(ap + "q_norm.weight", D);
        a.k_norm = ck.get_vector(ap + "k_norm.weight", D);
    } else if (c.qk_norm == qk_norm_kind::full) {
        a.q_norm = ck.get_vector(ap + "q_norm.weight", q_dim);
        a.k_norm = ck.get_vector(ap + "k_norm.weight", kv_dim);
    }
}

// DeepSeek's multi-head latent attention. kv_b_proj is widened to fp32 (FP8: dequantized, e4m3 * block scale):
// the attention absorbs it, so its input is never quantized (docs/fp8.md).
template <class Source, class Linear>
void load_mla(const Source& ck, Linear&& W, const model_config& c, const std::string& ap, attention_weights& a) {
    const mla_params& m = c.mla;
    const int64_t H = c.hidden_size, heads = c.num_heads;
    const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
    if (m.q_lora_rank > 0) {
        a.mla.q_a = W(ap + "q_a_proj.weight", m.q_lora_rank, H);
        a.mla.q_a_norm = ck.get_vector(ap + "q_a_layernorm.weight", m.q_lora_rank);
        a.mla.q_b = W(ap + "q_b_proj.weight", heads * qk, m.q_lora_rank);
    } else {
        a.q = W(ap + "q_proj.weight", heads * qk, H);
    }
    a.mla.kv_a = W(ap + "kv_a_proj_with_mqa.weight", m.kv_lora_rank + m.qk_rope_head_dim, H);
    a.mla.kv_a_norm = ck.get_vector(ap + "kv_a_layernorm.weight", m.kv_lora_rank);
    const matrix_view kv_b = W(ap + "kv_b_proj.weight", heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank);
    a.mla.kv_b.resize(static_cast<size_t>(kv_b.rows * kv_b.cols));
    for (int64_t r = 0; r < kv_b.rows; ++r) kv_b.row_to_f32(r, a.mla.kv_b.data() + r * kv_b.cols);
    a.o = W(ap + "o_proj.weight", H, heads * m.v_head_dim);
}

}  // namespace

model_weights::model_weights(const std::string& model_dir, const model_config& config,
                             const expert_placement& placement, int rank, const std::string& load_format,
                             double dummy_router_skew)
    : config_(config) {
    const model_config& c = config_;
    if (placement.num_moe_layers() != c.num_moe_layers() || placement.num_experts != c.num_experts)
        throw error(errc::invalid_argument, "expert placement has " + std::to_string(placement.num_moe_layers()) +
                                                " MoE layers x " + std::to_string(placement.num_experts) +
                                                " experts, the model " + std::to_string(c.num_moe_layers()) + " x " +
                                                std::to_string(c.num_experts));
    if (rank < 0 || rank >= placement.num_ranks)
        throw error(errc::invalid_argument, "rank " + std::to_string(rank) +
                                                " outside the expert placement's world of " +
                                                std::to_string(placement.num_ranks));
    // Dummy weights are BF16: an FP8 model's are quantized at load, like a BF16 checkpoint's.
    quantize_at_load_ = c.quantization.fp8() && (!c.quantization.in_checkpoint || load_format == "dummy");
    if (load_format == "dummy") {
        dummy_ = std::make_unique<dummy_checkpoint>(config_, dummy_router_skew);
        load(*dummy_, placement, rank);
    } else if (load_format == "auto") {
        if (dummy_router_skew != 0)
            throw error(errc::invalid_argument, "--dummy-router-skew needs --load-format dummy");
        checkpoint_ = std::make_unique<safetensors_checkpoint>(model_dir);
        load(*checkpoint_, placement, rank);
    } else {
        throw error(errc::invalid_argument, "load format '" + load_format + "' (auto or dummy)");
    }
}

template <class Source>
matrix_view model_weights::plain(const Source& ck, const std::string& name, int64_t rows, int64_t cols) const {
    const matrix_view m = ck.get_matrix(name, rows, cols);
    if (m.type == dtype::f8_e4m3)
        throw error(errc::unsupported, where(ck, name) +
                                           " is F8_E4M3: only the linear projections of the decoder layers may be "
                                           "FP8 (embeddings, lm_head, routers and gates are read in BF16/F16/F32)");
    return m;
}

template <class Source>
matrix_view model_weights::linear(const Source& ck, const std::string& name, int64_t rows, int64_t cols) {
    const quantization_params& q = config_.quantization;
    const matrix_view m = ck.get_matrix(name, rows, cols);
    if (m.type == dtype::f8_e4m3) {
        if (!q.fp8() || !q.in_checkpoint)
            throw error(errc::invalid_checkpoint, where(ck, name) +
                                                      " is F8_E4M3 but config.json has no quantization_config "
                                                      "(quant_method 'fp8') to say how it is scaled");
        if constexpr (std::is_same_v<Source, safetensors_checkpoint>) {
            const std::string scale_name =
                name.substr(0, name.size() - std::string("weight").size()) + "weight_scale_inv";
            if (!ck.contains(scale_name))
                throw error(errc::invalid_checkpoint,
                            where(ck, name) + " is F8_E4M3 but its block scales '" + scale_name + "' are missing");
            const tensor_view s = ck.get(scale_name, {fp8_blocks(rows), fp8_blocks(cols)});
            if (s.type == dtype::f8_e4m3)
                throw error(errc::unsupported, where(ck, scale_name) + " is F8_E4M3 (block scales are F32 or BF16)");
            std::vector<float>& scales = fp8_scales_.emplace_back(s.to_f32());
            for (const float v : scales)
                if (!std::isfinite(v))
                    throw error(errc::invalid_checkpoint, where(ck, scale_name) + " holds a non-finite scale");
            matrix_view out = m;
            out.scale = scales.data();
            out.scale_row0 = 0;
            return out;
        }
    }
    if (quantize_at_load_ && !q.not_converted(name)) return quantize(m);
    return m;
}

matrix_view model_weights::quantize(const matrix_view& m) {
    std::vector<float> w(static_cast<size_t>(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) m.row_to_f32(r, w.data() + r * m.cols);
    std::vector<uint8_t>& codes = fp8_codes_.emplace_back(w.size());
    std::vector<float>& scales = fp8_scales_.emplace_back(static_cast<size_t>(fp8_blocks(m.rows) * fp8_blocks(m.cols)));
    quantize_fp8_blocks(w.data(), m.rows, m.cols, m.cols, codes.data(), scales.data());
    quantized_bytes_ += static_cast<int64_t>(codes.size() + scales.size() * sizeof(float));
    matrix_view out{dtype::f8_e4m3, reinterpret_cast<const std::byte*>(codes.data()), m.rows, m.cols};
    out.scale = scales.data();
    return out;
}

model_weights::~model_weights() = default;
model_weights::model_weights(model_weights&&) noexcept = default;
model_weights& model_weights::operator=(model_weights&&) noexcept = default;

template <class Source>
void model_weights::load(const Source& ck, const expert_placement& placement, int rank) {
    const model_config& c = config_;
    const int64_t H = c.hidden_size, V = c.vocab_size;
    auto W = [&](const std::string& name, int64_t rows, int64_t cols) { return linear(ck, name, rows, cols); };
    embed_ = plain(ck, "model.embed_tokens.weight", V, H);
    final_norm_ = ck.get_vector("model.norm.weight", H);
    if (c.tie_word_embeddings || !ck.contains("lm_head.weight")) {
        if (!c.tie_word_embeddings) ck.get("lm_head.weight");  // throws: missing tensor, naming the file
        lm_head_ = embed_;
    } else {
        lm_head_ = plain(ck, "lm_head.weight", V, H);
    }

    const std::vector<int64_t> moe_index = c.moe_layer_indices();
    layers_.resize(static_cast<size_t>(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        layer_weights& lw = layers_[l];
        const std::string p = "model.layers." + std::to_string(l) + ".";
        lw.input_norm = ck.get_vector(p + "input_layernorm.weight", H);
        lw.post_norm = ck.get_vector(p + "post_attention_layernorm.weight", H);

        attention_weights& a = lw.attn;
        const std::string ap = p + "self_attn.";
        if (c.is_mla()) {
            load_mla(ck, W, c, ap, a);
        } else {
            load_attention(ck, W, c, ap, a);
        }

        lw.moe_index = moe_index[l];
        if (lw.moe_index < 0) {
            lw.dense = load_mlp(W, p + "mlp.", H, c.dense_intermediate_size);
            continue;
        }
        moe_weights& m = lw.moe;
        const std::string mp = moe_prefix(ck, c, p);
        const int64_t E = c.num_experts, I = c.moe_intermediate_size;
        m.router = plain(ck, mp + "gate.weight", E, H);
        if (c.router_bias) m.router_bias = ck.get_vector(mp + "gate.e_score_correction_bias", E);
        const auto slots = placement.slots(static_cast<int32_t>(lw.moe_index), rank);
        m.slot_expert.assign(slots.begin(), slots.end());
        const bool fused = ck.contains(mp + "experts.gate_up_proj");
        fused_experts_ = fused_experts_ || fused;
        matrix_view gate_up, down;
        if (fused) {
            const tensor_view gu = ck.get(mp + "experts.gate_up_proj", {E, 2 * I, H});
            const tensor_view dn = ck.get(mp + "experts.down_proj", {E, H, I});
            if (gu.type == dtype::f8_e4m3 || dn.type == dtype::f8_e4m3)
                throw error(errc::unsupported, where(ck, mp + "experts.gate_up_proj") +
                                                   ": fused 3D FP8 experts are not supported (FP8 checkpoints store "
                                                   "one 2D tensor per expert, each with its weight_scale_inv)");
            gate_up = matrix_view{gu.type, gu.data, E * 2 * I, H};
            down = matrix_view{dn.type, dn.data, E * H, I};
        }
        for (const int32_t e : m.slot_expert) {
            if (fused) {
                // gate rows first, then up rows, within expert e's [2I, H] block; quantized as the per-expert
                // layout's separate gate_proj / up_proj / down_proj would be.
                mlp_weights x{gate_up.slice_rows(e * 2 * I, I), gate_up.slice_rows(e * 2 * I + I, I),
                              down.slice_rows(e * H, H)};
                if (quantize_at_load_ && !c.quantization.not_converted(mp + "experts.gate_up_proj"))
                    x = {quantize(x.gate), quantize(x.up), quantize(x.down)};
                m.experts.push_back(x);
            } else {
                m.experts.push_back(load_expert(ck, W, mp, e, H, I));
            }
        }
        if (c.shared_expert_intermediate_size > 0) {
            m.has_shared = true;
            if (c.shared_expert_gated) {
                m.shared = load_mlp(W, mp + "shared_expert.", H, c.shared_expert_intermediate_size);
                m.shared_gate = plain(ck, mp + "shared_expert_gate.weight", 1, H);
            } else {
                m.shared = load_mlp(W, mp + "shared_experts.", H, c.shared_expert_intermediate_size);
            }
        }
    }
}

}  // namespace zmoe
