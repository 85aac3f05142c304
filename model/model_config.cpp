#include "model/model_config.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.hpp"

namespace zmoe {
namespace {

using json = nlohmann::json;

constexpr const char* kSupported = "qwen3_moe, qwen2_moe, mixtral, olmoe, deepseek_v2, deepseek_v3 (kimi_k2)";

[[noreturn]] void bad(const std::string& file, const std::string& what) {
    throw error(errc::invalid_checkpoint, file + ": " + what);
}

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

int64_t get_int(const json& j, const std::string& file, const char* key) {
    if (!present(j, key)) bad(file, std::string("missing required field '") + key + "'");
    if (!j[key].is_number_integer()) bad(file, std::string("field '") + key + "' is not an integer");
    return j[key].get<int64_t>();
}

int64_t get_int_or(const json& j, const std::string& file, const char* key, int64_t fallback) {
    return present(j, key) ? get_int(j, file, key) : fallback;
}

// The first of `keys` present (HF renamed several fields across architectures and versions).
int64_t get_int_any(const json& j, const std::string& file, std::initializer_list<const char*> keys) {
    for (const char* k : keys)
        if (present(j, k)) return get_int(j, file, k);
    std::string names;
    for (const char* k : keys) names += (names.empty() ? "'" : " / '") + std::string(k) + "'";
    bad(file, "missing required field " + names);
}

bool get_bool_or(const json& j, const std::string& file, const char* key, bool fallback) {
    if (!present(j, key)) return fallback;
    if (!j[key].is_boolean()) bad(file, std::string("field '") + key + "' is not a boolean");
    return j[key].get<bool>();
}

double get_number_or(const json& j, const std::string& file, const char* key, double fallback) {
    if (!present(j, key)) return fallback;
    if (!j[key].is_number()) bad(file, std::string("field '") + key + "' is not a number");
    return j[key].get<double>();
}

void append_token_ids(const json& j, const std::string& file, const char* key, std::vector<int32_t>& out) {
    if (!present(j, key)) return;
    const json& v = j[key];
    auto add = [&](const json& x) {
        if (!x.is_number_integer()) bad(file, std::string("field '") + key + "' holds a non-integer");
        const auto id = static_cast<int32_t>(x.get<int64_t>());
        if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
    };
    if (v.is_array()) {
        for (const json& x : v) add(x);
    } else {
        add(v);
    }
}

model_arch parse_arch(const json& j, const std::string& file) {
    std::string type;
    if (present(j, "model_type")) {
        if (!j["model_type"].is_string()) bad(file, "field 'model_type' is not a string");
        type = j["model_type"].get<std::string>();
    } else if (present(j, "architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
               j["architectures"][0].is_string()) {
        const std::string a = j["architectures"][0].get<std::string>();
        if (a.rfind("Qwen3Moe", 0) == 0) {
            type = "qwen3_moe";
        } else if (a.rfind("Qwen2Moe", 0) == 0) {
            type = "qwen2_moe";
        } else if (a.rfind("Mixtral", 0) == 0) {
            type = "mixtral";
        } else if (a.rfind("Olmoe", 0) == 0) {
            type = "olmoe";
        } else if (a.rfind("DeepseekV3", 0) == 0) {
            type = "deepseek_v3";
        } else if (a.rfind("DeepseekV2", 0) == 0) {
            type = "deepseek_v2";
        } else {
            throw error(errc::unsupported,
                        file + ": architecture '" + a + "' is not supported (supported: " + kSupported + ")");
        }
    } else {
        bad(file, "missing required field 'model_type' (or 'architectures')");
    }
    if (type == "qwen3_moe") return model_arch::qwen3_moe;
    if (type == "qwen2_moe") return model_arch::qwen2_moe;
    if (type == "mixtral") return model_arch::mixtral;
    if (type == "olmoe") return model_arch::olmoe;
    if (type == "deepseek_v2") return model_arch::deepseek_v2;
    // Kimi-K2 ships the DeepSeek-V3 architecture under its own model_type.
    if (type == "deepseek_v3" || type == "kimi_k2") return model_arch::deepseek_v3;
    throw error(errc::unsupported,
                file + ": model_type '" + type + "' is not supported (supported: " + kSupported + ")");
}

void parse_special_tokens(const json& j, const std::string& file, model_config& c) {
    append_token_ids(j, file, "eos_token_id", c.eos_token_ids);
    if (present(j, "bos_token_id")) {
        if (!j["bos_token_id"].is_number_integer()) bad(file, "field 'bos_token_id' is not an integer");
        c.bos_token_id = static_cast<int32_t>(j["bos_token_id"].get<int64_t>());
    }
}

[[noreturn]] void unsupported(const std::string& file, const std::string& what) {
    throw error(errc::unsupported, file + ": " + what);
}

std::string get_string_or(const json& j, const std::string& file, const char* key, const std::string& fallback) {
    if (!present(j, key)) return fallback;
    if (!j[key].is_string()) bad(file, std::string("field '") + key + "' is not a string");
    return j[key].get<std::string>();
}

// RoPE of the DeepSeek family: transformers 5 nests everything in rope_parameters; 4.x has rope_theta at the top
// and an optional rope_scaling {"type"/"rope_type": "yarn", factor, original_max_position_embeddings, mscale,
// mscale_all_dim, beta_fast, beta_slow}. Defaults are transformers' _compute_yarn_parameters'.
void parse_deepseek_rope(const json& j, const std::string& file, model_config& c) {
    rope_params& r = c.rope;
    r.theta = get_number_or(j, file, "rope_theta", 10000.0);
    const char* field = nullptr;
    for (const char* f : {"rope_parameters", "rope_scaling"}) {
        if (!present(j, f)) continue;
        if (!j[f].is_object()) bad(file, std::string("field '") + f + "' is not an object");
        field = field ? field : f;  // rope_parameters wins when both are present
    }
    if (field) {
        const json& p = j[field];
        r.theta = get_number_or(p, file, "rope_theta", r.theta);
        r.type = get_string_or(p, file, "rope_type", get_string_or(p, file, "type", "default"));
        if (r.type != "default" && r.type != "yarn")
            unsupported(file,
                        std::string(field) + " rope_type '" + r.type + "' is not supported (supported: default, yarn)");
        if (r.type == "yarn") {
            r.original_max_position_embeddings =
                get_int_or(p, file, "original_max_position_embeddings",
                           get_int_or(j, file, "original_max_position_embeddings", c.max_position_embeddings));
            if (r.original_max_position_embeddings <= 0)
                bad(file, field + std::string(": original_max_position_embeddings must be positive"));
            if (!present(p, "factor")) bad(file, std::string(field) + ": yarn needs 'factor'");
            r.factor = get_number_or(p, file, "factor", 1.0);
            const double mscale = get_number_or(p, file, "mscale", 0.0);
            r.mscale_all_dim = get_number_or(p, file, "mscale_all_dim", 0.0);
            auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
            if (present(p, "attention_factor")) {
                r.attention_factor = get_number_or(p, file, "attention_factor", 1.0);
            } else if (mscale != 0 && r.mscale_all_dim != 0) {
                r.attention_factor = get_mscale(r.factor, mscale) / get_mscale(r.factor, r.mscale_all_dim);
            } else {
                r.attention_factor = get_mscale(r.factor, 1.0);
            }
            // transformers: `get("beta_fast") or 32`, so 0 means the default too.
            r.beta_fast = get_number_or(p, file, "beta_fast", 0.0);
            r.beta_slow = get_number_or(p, file, "beta_slow", 0.0);
            if (r.beta_fast == 0) r.beta_fast = 32.0;
            if (r.beta_slow == 0) r.beta_slow = 1.0;
            r.truncate = get_bool_or(p, file, "truncate", true);
        }
    }
    if (r.theta <= 0) bad(file, "rope_theta must be positive");
    c.rope_theta = r.theta;
}

// quantization_config: DeepSeek-V3's block-scaled FP8 (also Qwen3-FP8's) and nothing else, refused naming the method.
void parse_quantization(const json& j, const std::string& file, model_config& c) {
    if (!present(j, "quantization_config")) return;
    const json& q = j["quantization_config"];
    if (!q.is_object()) bad(file, "field 'quantization_config' is not an object");
    const std::string method = get_string_or(q, file, "quant_method", "");
    const std::string supported =
        " (supported: quant_method 'fp8' with fmt 'e4m3', weight_block_size [128, 128] and activation_scheme "
        "'dynamic', DeepSeek-V3's format)";
    if (method != "fp8")
        unsupported(file, "quantization_config quant_method '" + method + "' is not supported" + supported);
    const std::string fmt = get_string_or(q, file, "fmt", "e4m3");
    if (fmt != "e4m3")
        unsupported(file, "quantization_config quant_method 'fp8' with fmt '" + fmt + "' is not supported" + supported);
    const std::string act = get_string_or(q, file, "activation_scheme", "dynamic");
    if (act != "dynamic")
        unsupported(file, "quantization_config quant_method 'fp8' with activation_scheme '" + act +
                              "' (static activation scales) is not supported" + supported);
    if (!present(q, "weight_block_size"))
        unsupported(file,
                    "quantization_config quant_method 'fp8' without weight_block_size (per-tensor scales) is not "
                    "supported" +
                        supported);
    const json& b = q["weight_block_size"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() != 128 || b[1].get<int64_t>() != 128)
        unsupported(file, "quantization_config quant_method 'fp8' with weight_block_size " + b.dump() +
                              " is not supported" + supported);
    for (const char* key : {"modules_to_not_convert", "ignored_layers"}) {
        if (!present(q, key)) continue;
        if (!q[key].is_array()) bad(file, std::string("quantization_config field '") + key + "' is not a list");
        for (const json& m : q[key]) {
            if (!m.is_string()) bad(file, std::string("quantization_config field '") + key + "' holds a non-string");
            c.quantization.modules_to_not_convert.push_back(m.get<std::string>());
        }
    }
    c.quantization.method = "fp8";
    c.quantization.in_checkpoint = true;
}

// deepseek_v2 / deepseek_v3 (and kimi_k2): as transformers' DeepseekV2Config / DeepseekV3Config read them, with
// their defaults where a field is absent.
void parse_deepseek(const json& j, const std::string& file, model_config& c) {
    const bool v3 = c.arch == model_arch::deepseek_v3;
    // Refuse what the forward pass does not implement, naming the field.
    if (get_bool_or(j, file, "attention_bias", false)) unsupported(file, "attention_bias=true is not supported");
    if (get_bool_or(j, file, "mlp_bias", false)) unsupported(file, "mlp_bias=true is not supported");
    const std::string act = get_string_or(j, file, "hidden_act", "silu");
    if (act != "silu") unsupported(file, "hidden_act '" + act + "' is not supported (supported: silu)");
    if (present(j, "moe_layer_freq") && get_int(j, file, "moe_layer_freq") != 1)
        unsupported(file, "moe_layer_freq != 1 is not supported");

    mla_params& m = c.mla;
    if (present(j, "q_lora_rank")) {
        m.q_lora_rank = get_int(j, file, "q_lora_rank");
    } else if (!j.contains("q_lora_rank")) {
        m.q_lora_rank = 1536;  // both config classes' default; an explicit null means none
    }
    m.kv_lora_rank = get_int_or(j, file, "kv_lora_rank", 512);
    m.qk_nope_head_dim = get_int_or(j, file, "qk_nope_head_dim", 128);
    m.qk_rope_head_dim = get_int_or(j, file, "qk_rope_head_dim", 64);
    m.v_head_dim = get_int_or(j, file, "v_head_dim", 128);
    m.rope_interleave = v3 ? get_bool_or(j, file, "rope_interleave", true) : true;  // V2 rotates complex pairs
    if (m.q_lora_rank < 0 || m.kv_lora_rank <= 0 || m.qk_nope_head_dim < 0 || m.qk_rope_head_dim <= 0 ||
        m.qk_rope_head_dim % 2 != 0 || m.v_head_dim <= 0)
        bad(file,
            "q_lora_rank >= 0, kv_lora_rank > 0, qk_nope_head_dim >= 0, v_head_dim > 0 and an even "
            "qk_rope_head_dim > 0 are required");
    c.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
    c.num_kv_heads = c.num_heads;  // every head has its own key and value, expanded from the shared latent

    c.num_experts = present(j, "n_routed_experts") || present(j, "num_local_experts") || present(j, "num_experts")
                        ? get_int_any(j, file, {"n_routed_experts", "num_local_experts", "num_experts"})
                        : (v3 ? 256 : 64);
    c.num_experts_per_tok = get_int_or(j, file, "num_experts_per_tok", v3 ? 8 : 0);
    if (c.num_experts <= 0 || c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.num_experts)
        bad(file, "need 0 < num_experts_per_tok <= n_routed_experts");
    c.moe_intermediate_size = get_int_or(j, file, "moe_intermediate_size", v3 ? 2048 : 1407);
    const int64_t n_shared = get_int_or(j, file, "n_shared_experts", v3 ? 1 : 2);
    if (n_shared < 0) bad(file, "field 'n_shared_experts' must not be negative");
    c.shared_expert_intermediate_size = c.moe_intermediate_size * n_shared;
    c.shared_expert_gated = false;
    const int64_t first_dense = get_int_or(j, file, "first_k_dense_replace", v3 ? 3 : 0);
    if (first_dense < 0) bad(file, "field 'first_k_dense_replace' must not be negative");
    for (int64_t l = 0; l < std::min(first_dense, c.num_layers); ++l) c.mlp_only_layers.push_back(l);
    c.decoder_sparse_step = 1;
    c.dense_intermediate_size = get_int_or(j, file, "intermediate_size", 0);
    if (first_dense > 0 && c.dense_intermediate_size <= 0)
        bad(file, "missing required field 'intermediate_size' (the config has dense MLP layers)");

    c.routed_scaling_factor = get_number_or(j, file, "routed_scaling_factor", v3 ? 2.5 : 1.0);
    c.n_group = get_int_or(j, file, "n_group", v3 ? 8 : 0);
    c.topk_group = get_int_or(j, file, "topk_group", v3 ? 4 : 0);
    if (v3) {
        // transformers always scores with sigmoid and selects with the correction bias ("noaux_tc").
        const std::string scoring = get_string_or(j, file, "scoring_func", "sigmoid");
        if (scoring != "sigmoid")
            unsupported(file, "deepseek_v3 scoring_func '" + scoring + "' is not supported (supported: sigmoid)");
        const std::string method = get_string_or(j, file, "topk_method", "noaux_tc");
        if (method != "noaux_tc")
            unsupported(file, "deepseek_v3 topk_method '" + method + "' is not supported (supported: noaux_tc)");
        c.router = router_kind::sigmoid_group_limited;
        c.router_bias = true;
        c.norm_topk_prob = get_bool_or(j, file, "norm_topk_prob", true);
    } else {
        const std::string scoring = get_string_or(j, file, "scoring_func", "softmax");
        if (scoring != "softmax")
            unsupported(file, "deepseek_v2 scoring_func '" + scoring + "' is not supported (supported: softmax)");
        const std::string method = get_string_or(j, file, "topk_method", "greedy");
        if (method == "greedy") {
            c.router = router_kind::softmax_topk;
            c.n_group = c.topk_group = 1;
        } else if (method == "group_limited_greedy") {
            c.router = router_kind::softmax_group_limited;
        } else {
            unsupported(file, "deepseek_v2 topk_method '" + method +
                                  "' is not supported (supported: greedy, group_limited_greedy)");
        }
        // transformers' DeepseekV2 router never renormalises the top-k weights, whatever norm_topk_prob says
        // (the released V2 checkpoints all have it false).
        c.norm_topk_prob = false;
    }
    if (c.router != router_kind::softmax_topk) {
        if (c.n_group <= 0 || c.topk_group <= 0 || c.topk_group > c.n_group || c.num_experts % c.n_group != 0)
            bad(file,
                "group-limited routing needs n_group > 0 dividing n_routed_experts and 0 < topk_group <= n_group");
        const int64_t per_group = c.num_experts / c.n_group;
        if (c.router == router_kind::sigmoid_group_limited && per_group < 2)
            bad(file,
                "deepseek_v3 routing scores each group by its top-2 experts: n_routed_experts / n_group must be >= 2");
        if (c.num_experts_per_tok > c.topk_group * per_group)
            bad(file, "num_experts_per_tok exceeds the experts of the topk_group kept groups");
    }

    c.rms_norm_eps = static_cast<float>(get_number_or(j, file, "rms_norm_eps", 1e-6));
    c.tie_word_embeddings = get_bool_or(j, file, "tie_word_embeddings", false);
    c.max_position_embeddings = get_int_or(j, file, "max_position_embeddings", v3 ? 4096 : 2048);
    parse_deepseek_rope(j, file, c);
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw error(errc::io, path + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

const char* model_arch_name(model_arch a) {
    switch (a) {
        case model_arch::qwen3_moe:
            return "qwen3_moe";
        case model_arch::qwen2_moe:
            return "qwen2_moe";
        case model_arch::mixtral:
            return "mixtral";
        case model_arch::olmoe:
            return "olmoe";
        case model_arch::deepseek_v2:
            return "deepseek_v2";
        case model_arch::deepseek_v3:
            return "deepseek_v3";
    }
    return "?";
}

int64_t model_config::kv_width() const {
    return is_mla() ? mla.kv_lora_rank + mla.qk_rope_head_dim : num_kv_heads * head_dim;
}

std::vector<float> model_config::rope_inv_freq() const {
    const int64_t dim = is_mla() ? mla.qk_rope_head_dim : head_dim;
    const int64_t half = dim / 2;
    std::vector<float> inv(static_cast<size_t>(half));
    // base ** (arange(0, dim, 2) / dim) in fp32, as transformers.
    std::vector<float> pos_freqs(inv.size());
    for (int64_t i = 0; i < half; ++i) {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
        pos_freqs[i] = static_cast<float>(std::pow(rope.theta, static_cast<double>(exponent)));
    }
    if (rope.type != "yarn") {
        for (int64_t i = 0; i < half; ++i) inv[i] = 1.0f / pos_freqs[i];
        return inv;
    }
    // YaRN (transformers' _compute_yarn_parameters): interpolate the low frequencies by `factor`, keep the high
    // ones, with a linear ramp between the correction dimensions of beta_fast and beta_slow rotations.
    const double base = rope.theta;
    const auto orig = static_cast<double>(rope.original_max_position_embeddings);
    auto correction_dim = [&](double num_rotations) {
        return (static_cast<double>(dim) * std::log(orig / (num_rotations * 2 * M_PI))) / (2 * std::log(base));
    };
    double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
    if (rope.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // as transformers: no singularity
    const auto factor = static_cast<float>(rope.factor);
    for (int64_t i = 0; i < half; ++i) {
        const float ramp =
            std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f, 1.0f);
        const float extrapolation_factor = 1.0f - ramp;
        const float extrapolation = 1.0f / pos_freqs[i];
        const float interpolation = 1.0f / (factor * pos_freqs[i]);
        inv[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
    return inv;
}

namespace {
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }
}  // namespace

float model_config::softmax_scale() const {
    double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    if (is_mla() && rope.type != "default" && rope.mscale_all_dim != 0) {
        const double m = yarn_mscale(rope.factor, rope.mscale_all_dim);
        scale = scale * m * m;
    }
    return static_cast<float>(scale);
}

bool model_config::is_moe_layer(int64_t layer) const {
    if (num_experts <= 0) return false;
    if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
    return (layer + 1) % decoder_sparse_step == 0;
}

int64_t model_config::num_moe_layers() const {
    int64_t n = 0;
    for (int64_t l = 0; l < num_layers; ++l) n += is_moe_layer(l) ? 1 : 0;
    return n;
}

std::vector<int64_t> model_config::moe_layer_indices() const {
    std::vector<int64_t> out(static_cast<size_t>(num_layers), -1);
    int64_t n = 0;
    for (int64_t l = 0; l < num_layers; ++l)
        if (is_moe_layer(l)) out[static_cast<size_t>(l)] = n++;
    return out;
}

bool quantization_params::not_converted(const std::string& tensor_name) const {
    for (const std::string& m : modules_to_not_convert)
        if (!m.empty() && tensor_name.find(m) != std::string::npos) return true;
    return false;
}

void model_config::apply_quantization_flag(const std::string& flag) {
    if (flag.empty() || (flag == "fp8" && quantization.fp8())) return;
    if (flag != "fp8")
        throw error(errc::unsupported, "--quantization '" + flag + "' is not supported (supported: fp8)");
    quantization.method = "fp8";
    quantization.in_checkpoint = false;
}

model_config model_config::parse(const std::string& config_text, const std::string& file) {
    json j;
    try {
        j = json::parse(config_text);
    } catch (const json::exception& e) {
        bad(file, std::string("not valid JSON: ") + e.what());
    }
    if (!j.is_object()) bad(file, "not a JSON object");

    model_config c;
    c.arch = parse_arch(j, file);
    const bool qwen = c.arch == model_arch::qwen3_moe || c.arch == model_arch::qwen2_moe;

    for (const char* key : {"torch_dtype", "dtype"}) {
        if (present(j, key) && j[key].is_string()) c.dtype = j[key].get<std::string>();
    }
    c.vocab_size = get_int(j, file, "vocab_size");
    c.hidden_size = get_int(j, file, "hidden_size");
    c.num_layers = get_int(j, file, "num_hidden_layers");
    c.num_heads = get_int(j, file, "num_attention_heads");
    c.num_kv_heads = get_int_or(j, file, "num_key_value_heads", c.num_heads);
    if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0)
        bad(file, "vocab_size, hidden_size, num_hidden_layers and head counts must be positive");
    if (c.num_heads % c.num_kv_heads != 0)
        bad(file, "num_attention_heads " + std::to_string(c.num_heads) + " is not a multiple of num_key_value_heads " +
                      std::to_string(c.num_kv_heads));
    parse_quantization(j, file, c);
    if (c.arch == model_arch::deepseek_v2 || c.arch == model_arch::deepseek_v3) {
        parse_deepseek(j, file, c);
        parse_special_tokens(j, file, c);
        return c;
    }
    if (present(j, "head_dim")) {
        c.head_dim = get_int(j, file, "head_dim");
    } else {
        if (c.hidden_size % c.num_heads != 0)
            bad(file, "missing 'head_dim' and hidden_size % num_attention_heads != 0");
        c.head_dim = c.hidden_size / c.num_heads;
    }
    if (c.head_dim <= 0 || c.head_dim % 2 != 0) bad(file, "field 'head_dim' must be positive and even");

    c.num_experts = get_int_any(j, file, {"num_experts", "num_local_experts", "n_routed_experts"});
    c.num_experts_per_tok = get_int(j, file, "num_experts_per_tok");
    if (c.num_experts <= 0 || c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.num_experts)
        bad(file, "need 0 < num_experts_per_tok <= num_experts");
    if (qwen) {
        c.moe_intermediate_size = get_int(j, file, "moe_intermediate_size");
        c.dense_intermediate_size = get_int_or(j, file, "intermediate_size", 0);
    } else {
        // mixtral and olmoe have no dense layers: intermediate_size is the expert's.
        c.moe_intermediate_size = get_int(j, file, "intermediate_size");
    }
    if (c.arch == model_arch::qwen2_moe) {
        c.shared_expert_intermediate_size = get_int_or(j, file, "shared_expert_intermediate_size", 0);
        c.shared_expert_gated = true;
    }

    // HF defaults per config class where the field is absent.
    c.norm_topk_prob = c.arch == model_arch::mixtral ? true : get_bool_or(j, file, "norm_topk_prob", false);
    if (qwen) {
        c.decoder_sparse_step = get_int_or(j, file, "decoder_sparse_step", 1);
        if (c.decoder_sparse_step <= 0) bad(file, "field 'decoder_sparse_step' must be positive");
        if (present(j, "mlp_only_layers")) {
            if (!j["mlp_only_layers"].is_array()) bad(file, "field 'mlp_only_layers' is not a list");
            for (const json& x : j["mlp_only_layers"]) {
                if (!x.is_number_integer()) bad(file, "field 'mlp_only_layers' holds a non-integer");
                c.mlp_only_layers.push_back(x.get<int64_t>());
            }
        }
        bool any_dense = false;
        for (int64_t l = 0; l < c.num_layers; ++l) any_dense |= !c.is_moe_layer(l);
        if (any_dense && c.dense_intermediate_size <= 0)
            bad(file, "missing required field 'intermediate_size' (the config has dense MLP layers)");
    }
    const bool mixtral_or_olmoe = !qwen;
    c.rms_norm_eps = static_cast<float>(get_number_or(j, file, "rms_norm_eps", mixtral_or_olmoe ? 1e-5 : 1e-6));
    c.tie_word_embeddings = get_bool_or(j, file, "tie_word_embeddings", false);
    const bool attention_bias = get_bool_or(j, file, "attention_bias", false);
    switch (c.arch) {
        case model_arch::qwen2_moe:
            c.qkv_bias = true;  // Qwen2-MoE always has q/k/v biases and no o bias
            break;
        case model_arch::mixtral:
            break;
        case model_arch::qwen3_moe:
        case model_arch::olmoe:
            c.qkv_bias = attention_bias;
            c.o_bias = attention_bias;
            break;
        case model_arch::deepseek_v2:
        case model_arch::deepseek_v3:
            break;  // parse_deepseek
    }
    c.qk_norm = c.arch == model_arch::qwen3_moe ? qk_norm_kind::per_head
                : c.arch == model_arch::olmoe   ? qk_norm_kind::full
                                                : qk_norm_kind::none;
    if (c.arch == model_arch::olmoe) c.clip_qkv = static_cast<float>(get_number_or(j, file, "clip_qkv", 0.0));
    c.max_position_embeddings = get_int_or(j, file, "max_position_embeddings", 32768);

    // RoPE: transformers 5 nests it in rope_parameters; 4.x has rope_theta plus an optional rope_scaling.
    double default_theta = c.arch == model_arch::mixtral ? 1e6 : 10000.0;
    c.rope_theta = get_number_or(j, file, "rope_theta", default_theta);
    auto check_rope_type = [&](const json& p, const char* field) {
        if (!p.is_object()) bad(file, std::string("field '") + field + "' is not an object");
        std::string type = "default";
        for (const char* k : {"rope_type", "type"})
            if (present(p, k) && p[k].is_string()) type = p[k].get<std::string>();
        if (type != "default")
            throw error(errc::unsupported,
                        file + ": " + field + " rope_type '" + type + "' is not supported (supported: default)");
    };
    if (present(j, "rope_parameters")) {
        const json& p = j["rope_parameters"];
        check_rope_type(p, "rope_parameters");
        c.rope_theta = get_number_or(p, file, "rope_theta", c.rope_theta);
    }
    if (present(j, "rope_scaling")) check_rope_type(j["rope_scaling"], "rope_scaling");
    if (c.rope_theta <= 0) bad(file, "rope_theta must be positive");
    c.rope.theta = c.rope_theta;

    // Sliding-window attention is not implemented; refuse rather than silently attend to everything.
    if (c.arch == model_arch::qwen2_moe && get_bool_or(j, file, "use_sliding_window", false))
        throw error(errc::unsupported, file + ": use_sliding_window=true is not supported");
    if (c.arch == model_arch::mixtral && present(j, "sliding_window") && j["sliding_window"].is_number_integer() &&
        j["sliding_window"].get<int64_t>() < c.max_position_embeddings)
        c.sliding_window = j["sliding_window"].get<int64_t>();

    parse_special_tokens(j, file, c);
    return c;
}

model_config model_config::load(const std::string& model_dir) {
    namespace fs = std::filesystem;
    const std::string path = (fs::path(model_dir) / "config.json").string();
    if (!fs::exists(path)) throw error(errc::invalid_checkpoint, path + ": missing (not a model directory?)");
    model_config c = parse(read_file(path), path);
    const std::string gen_path = (fs::path(model_dir) / "generation_config.json").string();
    if (fs::exists(gen_path)) {
        json g;
        try {
            g = json::parse(read_file(gen_path));
        } catch (const json::exception& e) {
            bad(gen_path, std::string("not valid JSON: ") + e.what());
        }
        if (g.is_object()) append_token_ids(g, gen_path, "eos_token_id", c.eos_token_ids);
    }
    return c;
}

}  // namespace zmoe
