#include "workers/model_config.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.hpp"

namespace zmoe {
namespace {

using json = nlohmann::json;

constexpr const char* kSupported = "qwen3_moe, qwen2_moe, mixtral, olmoe";

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
    throw error(errc::unsupported,
                file + ": model_type '" + type + "' is not supported (supported: " + kSupported + ")");
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
    }
    return "?";
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
    if (c.arch == model_arch::qwen2_moe)
        c.shared_expert_intermediate_size = get_int_or(j, file, "shared_expert_intermediate_size", 0);

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

    // Sliding-window attention is not implemented; refuse rather than silently attend to everything.
    if (c.arch == model_arch::qwen2_moe && get_bool_or(j, file, "use_sliding_window", false))
        throw error(errc::unsupported, file + ": use_sliding_window=true is not supported");
    if (c.arch == model_arch::mixtral && present(j, "sliding_window") && j["sliding_window"].is_number_integer() &&
        j["sliding_window"].get<int64_t>() < c.max_position_embeddings)
        c.sliding_window = j["sliding_window"].get<int64_t>();

    append_token_ids(j, file, "eos_token_id", c.eos_token_ids);
    if (present(j, "bos_token_id")) {
        if (!j["bos_token_id"].is_number_integer()) bad(file, "field 'bos_token_id' is not an integer");
        c.bos_token_id = static_cast<int32_t>(j["bos_token_id"].get<int64_t>());
    }
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
