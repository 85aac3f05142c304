// bench/configs holds config.json files of real models at their published dimensions. Each must parse, and the
// parameter counts its dimensions imply (total, and active per token) must equal the counts the model's authors
// published, to their rounding: a wrong or missing dimension shows up as a wrong count.

#include <gtest/gtest.h>

#include <filesystem>

#include "model/model_config.hpp"

namespace zmoe {
namespace {

const std::filesystem::path kConfigs = std::filesystem::path(ZMOE_FIXTURES_DIR) / ".." / ".." / "bench" / "configs";

struct param_count {
    double total = 0;
    double active = 0;
};

/// Weights of the model (biases and norms included only where they are large enough to matter: they are not).
param_count count_params(const model_config& c) {
    const double h = static_cast<double>(c.hidden_size), d = static_cast<double>(c.head_dim);
    const double embed = static_cast<double>(c.vocab_size) * h * (c.tie_word_embeddings ? 1 : 2);
    double attn = h * d * (2.0 * c.num_heads + 2.0 * c.num_kv_heads);
    if (c.is_mla()) {  // q (through its LoRA), kv_a, kv_b, o
        const mla_params& m = c.mla;
        const double heads = static_cast<double>(c.num_heads), r = static_cast<double>(m.kv_lora_rank);
        const double qk = static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim);
        const double q = m.q_lora_rank > 0 ? static_cast<double>(m.q_lora_rank) * (h + heads * qk) : h * heads * qk;
        attn = q + h * (r + static_cast<double>(m.qk_rope_head_dim)) +
               r * heads * static_cast<double>(m.qk_nope_head_dim + m.v_head_dim) +
               heads * static_cast<double>(m.v_head_dim) * h;
    }
    const double expert = 3.0 * h * static_cast<double>(c.moe_intermediate_size);
    const double shared = 3.0 * h * static_cast<double>(c.shared_expert_intermediate_size);
    const double dense = 3.0 * h * static_cast<double>(c.dense_intermediate_size);
    param_count p{.total = embed, .active = embed};
    for (int64_t l = 0; l < c.num_layers; ++l) {
        p.total += attn;
        p.active += attn;
        if (c.is_moe_layer(l)) {
            const double router = static_cast<double>(c.num_experts) * h;
            p.total += router + static_cast<double>(c.num_experts) * expert + shared;
            p.active += router + static_cast<double>(c.num_experts_per_tok) * expert + shared;
        } else {
            p.total += dense;
            p.active += dense;
        }
    }
    return p;
}

struct published {
    const char* dir;
    model_arch arch;
    double total_b, active_b;  // billions, as published
    double rounding_b;         // half the last published digit
};

// Mixtral: "46.7B total parameters but only uses 12.9B parameters per token" (Mistral AI). OLMoE-1B-7B: 6.9B
// total, 1.3B active (OLMoE paper). Qwen1.5-MoE-A2.7B: 14.3B total, 2.7B activated (Qwen's model card).
// Qwen3-235B-A22B: 235B total, 22B activated; Qwen3-30B-A3B: 30.5B total, 3.3B activated (Qwen's model cards).
const published kModels[] = {
    {"mixtral-8x7b", model_arch::mixtral, 46.7, 12.9, 0.05},
    {"olmoe-1b-7b", model_arch::olmoe, 6.9, 1.3, 0.05},
    {"qwen1.5-moe-a2.7b", model_arch::qwen2_moe, 14.3, 2.7, 0.05},
    {"qwen3-235b-a22b", model_arch::qwen3_moe, 235, 22, 0.5},
    // Qwen3-30B-A3B's card says 3.3B activated; counting the embedding, the LM head and the routers gives 3.35 B,
    // so the card rounded down: the tolerance is one unit of its last digit here.
    {"qwen3-30b-a3b", model_arch::qwen3_moe, 30.5, 3.3, 0.1},
    // DeepSeek-V3: "671B total parameters with 37B activated for each token" (DeepSeek-V3 technical report), the
    // multi-token-prediction module excluded. Counting the embedding and the LM head both gives 37.55 B active.
    {"deepseek-v3", model_arch::deepseek_v3, 671, 37, 0.6},
    // DeepSeek-V2-Lite: "15.7B parameters, 2.4B activated" (its model card). Counting the LM head but not the
    // embedding lookup gives 2.45 B active (2.66 B with both): the card's rounding of that is one tenth off.
    {"deepseek-v2-lite", model_arch::deepseek_v2, 15.7, 2.4, 0.3},
};

class BenchConfigs : public ::testing::TestWithParam<published> {};

TEST_P(BenchConfigs, ParseAndMatchThePublishedParameterCounts) {
    const auto& m = GetParam();
    const auto dir = kConfigs / m.dir;
    if (!std::filesystem::exists(dir / "config.json")) GTEST_SKIP() << dir << " is not in this tree";
    const model_config c = model_config::load(dir.string());
    EXPECT_EQ(c.arch, m.arch);
    EXPECT_EQ(c.dtype, "bfloat16");
    EXPECT_GT(c.max_position_embeddings, 0);
    EXPECT_FALSE(c.eos_token_ids.empty());
    const param_count p = count_params(c);
    EXPECT_NEAR(p.total / 1e9, m.total_b, m.rounding_b) << "total parameters";
    EXPECT_NEAR(p.active / 1e9, m.active_b, m.rounding_b) << "active parameters per token";
}

INSTANTIATE_TEST_SUITE_P(Published, BenchConfigs, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<published>& info) {
                             std::string name = info.param.dir;
                             for (char& ch : name)
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return name;
                         });

}  // namespace
}  // namespace zmoe
