#pragma once
// Writes a tiny random checkpoint (config.json + model.safetensors) of a supported architecture into a
// temporary directory, with hooks to break it: the way the loader's error tests get bad checkpoints.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "workers/safetensors_writer.hpp"

namespace zmoe::testing {

/// Runs `fn`, expects a zmoe::error with `code`, and returns its message (a test failure when none is thrown).
template <class F>
std::string error_of(F&& fn, errc code) {
    try {
        fn();
    } catch (const error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "no zmoe::error thrown";
    return "";
}

/// A fresh empty directory under the system temp dir, removed on destruction.
class temp_dir {
  public:
    temp_dir() {
        static int counter = 0;
        path_ = std::filesystem::temp_directory_path() /
                ("zmoe_workers_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~temp_dir() { std::filesystem::remove_all(path_); }
    std::string str() const { return path_.string(); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

  private:
    std::filesystem::path path_;
};

struct synthetic_model {
    nlohmann::json config;
    std::vector<tensor_to_write> tensors;

    /// A qwen3_moe with 2 layers (layer 1 dense), 4 experts, top-2, hidden 32, 4 heads / 2 kv heads of dim 8.
    static synthetic_model qwen3_moe(dtype type = dtype::bf16, uint32_t seed = 7) {
        synthetic_model m;
        m.config = {{"model_type", "qwen3_moe"},
                    {"architectures", {"Qwen3MoeForCausalLM"}},
                    {"vocab_size", 64},
                    {"hidden_size", 32},
                    {"num_hidden_layers", 2},
                    {"num_attention_heads", 4},
                    {"num_key_value_heads", 2},
                    {"head_dim", 8},
                    {"num_experts", 4},
                    {"num_experts_per_tok", 2},
                    {"moe_intermediate_size", 16},
                    {"intermediate_size", 24},
                    {"mlp_only_layers", {1}},
                    {"norm_topk_prob", true},
                    {"rms_norm_eps", 1e-6},
                    {"rope_theta", 10000.0},
                    {"max_position_embeddings", 256},
                    {"tie_word_embeddings", false},
                    {"eos_token_id", 1},
                    {"bos_token_id", 0},
                    {"torch_dtype", "bfloat16"}};
        std::mt19937 rng(seed);
        std::normal_distribution<float> normal(0.f, 0.2f);
        auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm = false) {
            int64_t n = 1;
            for (int64_t d : shape) n *= d;
            std::vector<float> v(static_cast<size_t>(n));
            for (float& x : v) x = norm ? 1.f + normal(rng) : normal(rng);
            m.tensors.push_back({name, type, std::move(shape), std::move(v)});
        };
        add("model.embed_tokens.weight", {64, 32});
        add("model.norm.weight", {32}, true);
        add("lm_head.weight", {64, 32});
        for (int l = 0; l < 2; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".";
            add(p + "input_layernorm.weight", {32}, true);
            add(p + "post_attention_layernorm.weight", {32}, true);
            add(p + "self_attn.q_proj.weight", {32, 32});
            add(p + "self_attn.k_proj.weight", {16, 32});
            add(p + "self_attn.v_proj.weight", {16, 32});
            add(p + "self_attn.o_proj.weight", {32, 32});
            add(p + "self_attn.q_norm.weight", {8}, true);
            add(p + "self_attn.k_norm.weight", {8}, true);
            if (l == 1) {
                add(p + "mlp.gate_proj.weight", {24, 32});
                add(p + "mlp.up_proj.weight", {24, 32});
                add(p + "mlp.down_proj.weight", {32, 24});
                continue;
            }
            add(p + "mlp.gate.weight", {4, 32});
            for (int e = 0; e < 4; ++e) {
                const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
                add(ep + "gate_proj.weight", {16, 32});
                add(ep + "up_proj.weight", {16, 32});
                add(ep + "down_proj.weight", {32, 16});
            }
        }
        return m;
    }

    tensor_to_write* find(const std::string& name) {
        for (auto& t : tensors)
            if (t.name == name) return &t;
        return nullptr;
    }
    void remove(const std::string& name) {
        std::erase_if(tensors, [&](const tensor_to_write& t) { return t.name == name; });
    }

    void write(const std::string& dir) const {
        std::ofstream(dir + "/config.json") << config.dump(2);
        write_safetensors(dir + "/model.safetensors", tensors);
    }
};

}  // namespace zmoe::testing
