#include "model/model_config.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "synthetic_model.hpp"
#include "workers/kv_cache.hpp"

namespace zmoe {
namespace {

using json = nlohmann::json;

using testing::error_of;

json qwen3_v5() {
    return {{"model_type", "qwen3_moe"},
            {"vocab_size", 512},
            {"hidden_size", 64},
            {"num_hidden_layers", 4},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"head_dim", 16},
            {"num_local_experts", 8},
            {"num_experts_per_tok", 2},
            {"moe_intermediate_size", 32},
            {"intermediate_size", 96},
            {"mlp_only_layers", {1}},
            {"decoder_sparse_step", 1},
            {"norm_topk_prob", true},
            {"dtype", "bfloat16"},
            {"rope_parameters", {{"rope_theta", 5000.0}, {"rope_type", "default"}}},
            {"eos_token_id", {1, 2}},
            {"bos_token_id", 0}};
}

TEST(ModelConfig, ParsesTransformers5Spelling) {
    const model_config c = model_config::parse(qwen3_v5().dump());
    EXPECT_EQ(c.arch, model_arch::qwen3_moe);
    EXPECT_EQ(c.num_experts, 8);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_DOUBLE_EQ(c.rope_theta, 5000.0);
    EXPECT_EQ(c.dtype, "bfloat16");
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_EQ(c.qk_norm, qk_norm_kind::per_head);
    EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{1, 2}));
    EXPECT_EQ(c.bos_token_id, 0);
    EXPECT_EQ(c.moe_layer_indices(), (std::vector<int64_t>{0, -1, 1, 2}));
    EXPECT_EQ(c.num_moe_layers(), 3);
}

TEST(ModelConfig, ParsesTransformers4Spelling) {
    json j = qwen3_v5();
    j.erase("rope_parameters");
    j.erase("num_local_experts");
    j.erase("dtype");
    j["rope_theta"] = 1e6;
    j["num_experts"] = 16;
    j["torch_dtype"] = "float16";
    j["eos_token_id"] = 7;
    j["decoder_sparse_step"] = 2;
    j["mlp_only_layers"] = json::array();
    const model_config c = model_config::parse(j.dump());
    EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.num_experts, 16);
    EXPECT_EQ(c.dtype, "float16");
    EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{7}));
    EXPECT_EQ(c.moe_layer_indices(), (std::vector<int64_t>{-1, 0, -1, 1}));  // (layer + 1) % 2 == 0
}

TEST(ModelConfig, ArchitectureDefaults) {
    json mixtral = {{"model_type", "mixtral"},  {"vocab_size", 32},         {"hidden_size", 64},
                    {"num_hidden_layers", 2},   {"num_attention_heads", 8}, {"num_key_value_heads", 2},
                    {"num_local_experts", 8},   {"num_experts_per_tok", 2}, {"intermediate_size", 128},
                    {"sliding_window", nullptr}};
    model_config c = model_config::parse(mixtral.dump());
    EXPECT_EQ(c.head_dim, 8);  // hidden / heads
    EXPECT_EQ(c.sliding_window, 0);
    mixtral["sliding_window"] = 4096;
    mixtral["max_position_embeddings"] = 32768;
    EXPECT_EQ(model_config::parse(mixtral.dump()).sliding_window, 4096);
    mixtral["sliding_window"] = nullptr;
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_EQ(c.moe_intermediate_size, 128);
    EXPECT_EQ(c.num_moe_layers(), 2);
    EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
    EXPECT_FALSE(c.qkv_bias);

    json olmoe = mixtral;
    olmoe["model_type"] = "olmoe";
    olmoe.erase("num_local_experts");
    olmoe["num_experts"] = 8;
    olmoe["attention_bias"] = true;
    c = model_config::parse(olmoe.dump());
    EXPECT_FALSE(c.norm_topk_prob);
    EXPECT_EQ(c.qk_norm, qk_norm_kind::full);
    EXPECT_TRUE(c.qkv_bias);
    EXPECT_TRUE(c.o_bias);

    json qwen2 = qwen3_v5();
    qwen2["model_type"] = "qwen2_moe";
    qwen2["shared_expert_intermediate_size"] = 48;
    qwen2.erase("norm_topk_prob");
    c = model_config::parse(qwen2.dump());
    EXPECT_TRUE(c.qkv_bias);
    EXPECT_FALSE(c.o_bias);
    EXPECT_FALSE(c.norm_topk_prob);
    EXPECT_EQ(c.qk_norm, qk_norm_kind::none);
    EXPECT_EQ(c.shared_expert_intermediate_size, 48);
}

TEST(ModelConfig, ArchitecturesFieldIsAFallback) {
    json j = qwen3_v5();
    j.erase("model_type");
    j["architectures"] = {"OlmoeForCausalLM"};
    EXPECT_EQ(model_config::parse(j.dump()).arch, model_arch::olmoe);
}

TEST(ModelConfig, UnsupportedArchitectureIsNamed) {
    json j = qwen3_v5();
    j["model_type"] = "llama";
    const std::string msg = error_of([&] { model_config::parse(j.dump(), "/m/config.json"); }, errc::unsupported);
    EXPECT_NE(msg.find("/m/config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model_type 'llama' is not supported"), std::string::npos) << msg;
    EXPECT_NE(msg.find("qwen3_moe, qwen2_moe, mixtral, olmoe"), std::string::npos) << msg;
}

TEST(ModelConfig, UnsupportedRopeTypeIsNamed) {
    json j = qwen3_v5();
    j["rope_parameters"]["rope_type"] = "yarn";
    std::string msg = error_of([&] { model_config::parse(j.dump()); }, errc::unsupported);
    EXPECT_NE(msg.find("yarn"), std::string::npos) << msg;
    j = qwen3_v5();
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
    msg = error_of([&] { model_config::parse(j.dump()); }, errc::unsupported);
    EXPECT_NE(msg.find("linear"), std::string::npos) << msg;
}

TEST(ModelConfig, MissingFieldNamesFieldAndFile) {
    for (const char* field : {"hidden_size", "num_experts_per_tok", "moe_intermediate_size", "vocab_size"}) {
        json j = qwen3_v5();
        j.erase(field);
        const std::string msg =
            error_of([&] { model_config::parse(j.dump(), "dir/config.json"); }, errc::invalid_checkpoint);
        EXPECT_NE(msg.find("dir/config.json"), std::string::npos) << msg;
        EXPECT_NE(msg.find(std::string("'") + field + "'"), std::string::npos) << msg;
    }
    json j = qwen3_v5();
    j.erase("num_local_experts");
    const std::string msg = error_of([&] { model_config::parse(j.dump()); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("num_experts"), std::string::npos) << msg;
    EXPECT_NE(msg.find("n_routed_experts"), std::string::npos) << msg;
}

TEST(ModelConfig, MalformedJsonIsReported) {
    const std::string msg =
        error_of([&] { model_config::parse("{\"model_type\": ", "c.json"); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("c.json"), std::string::npos) << msg;
}

TEST(ModelConfig, LoadMergesGenerationConfigEos) {
    testing::temp_dir dir;
    std::ofstream(dir.file("config.json")) << qwen3_v5().dump();
    std::ofstream(dir.file("generation_config.json")) << json{{"eos_token_id", {2, 5}}}.dump();
    const model_config c = model_config::load(dir.str());
    EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{1, 2, 5}));
    testing::temp_dir empty;
    const std::string msg = error_of([&] { model_config::load(empty.str()); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
}

// ---- DeepSeek (deepseek_v2 / deepseek_v3 / kimi_k2) ----

json read_json_file(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    return json::parse(in);
}

std::string deepseek_fixture(const std::string& name) { return std::string(ZMOE_FIXTURES_DIR) + "/models/" + name; }

// transformers 5's spelling, as saved for the fixtures; the RoPE frequencies, YaRN attention factor and softmax
// scale are the ones transformers computed for them (reference.json).
TEST(ModelConfig, DeepseekFixturesMatchTransformersRope) {
    for (const char* name : {"deepseek_v3", "deepseek_v2", "deepseek_v3_flat", "deepseek_v2_greedy"}) {
        const model_config c = model_config::load(deepseek_fixture(name));
        const json ref = read_json_file(deepseek_fixture(name) + "/reference.json");
        const auto want = ref["rope"]["inv_freq"].get<std::vector<float>>();
        const std::vector<float> got = c.rope_inv_freq();
        ASSERT_EQ(got.size(), want.size()) << name;
        for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << name << " inv_freq " << i;
        EXPECT_NEAR(c.rope.attention_factor, ref["rope"]["attention_scaling"].get<double>(), 1e-12) << name;
        EXPECT_FLOAT_EQ(c.softmax_scale(), ref["softmax_scale"].get<float>()) << name;
        EXPECT_TRUE(c.is_mla());
        EXPECT_EQ(c.kv_width(), c.mla.kv_lora_rank + c.mla.qk_rope_head_dim);
    }
}

TEST(ModelConfig, DeepseekV3Fields) {
    const model_config c = model_config::load(deepseek_fixture("deepseek_v3"));
    EXPECT_EQ(c.arch, model_arch::deepseek_v3);
    EXPECT_EQ(c.mla.q_lora_rank, 32);
    EXPECT_EQ(c.mla.kv_lora_rank, 32);
    EXPECT_EQ(c.mla.v_head_dim, 12);
    EXPECT_EQ(c.head_dim, 24);
    EXPECT_EQ(c.num_kv_heads, c.num_heads);
    EXPECT_TRUE(c.mla.rope_interleave);
    EXPECT_EQ(c.rope.type, "yarn");
    EXPECT_EQ(c.router, router_kind::sigmoid_group_limited);
    EXPECT_TRUE(c.router_bias);
    EXPECT_EQ(c.n_group, 4);
    EXPECT_EQ(c.topk_group, 2);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
    EXPECT_EQ(c.shared_expert_intermediate_size, 24);
    EXPECT_FALSE(c.shared_expert_gated);
    EXPECT_EQ(c.moe_layer_indices(), (std::vector<int64_t>{-1, 0, 1}));  // first_k_dense_replace = 1
    // MLA caches the latent and the rope key only: one row of kv_lora_rank + qk_rope_head_dim floats, no V.
    EXPECT_EQ(kv_cache::bytes_per_block(c, 16), 3 * 16 * (32 + 8) * 4);

    const model_config v2 = model_config::load(deepseek_fixture("deepseek_v2"));
    EXPECT_EQ(v2.router, router_kind::softmax_group_limited);
    EXPECT_EQ(v2.mla.q_lora_rank, 0);  // q_lora_rank: null (V2-Lite)
    EXPECT_EQ(v2.shared_expert_intermediate_size, 48);
    const model_config greedy = model_config::load(deepseek_fixture("deepseek_v2_greedy"));
    EXPECT_EQ(greedy.router, router_kind::softmax_topk);
    EXPECT_FALSE(greedy.norm_topk_prob);  // transformers' V2 router never renormalises
}

// The same checkpoint's config in transformers 4.x spelling (rope_theta + rope_scaling with "type") and as
// Kimi-K2 ships it (model_type kimi_k2) parses to the same thing.
TEST(ModelConfig, DeepseekTransformers4AndKimiSpellings) {
    const model_config v5 = model_config::load(deepseek_fixture("deepseek_v3"));
    json j = read_json_file(deepseek_fixture("deepseek_v3") + "/config.json");
    json rope = j["rope_parameters"];
    j.erase("rope_parameters");
    j["rope_theta"] = rope["rope_theta"];
    rope.erase("rope_theta");
    rope.erase("rope_type");
    rope["type"] = "yarn";
    j["rope_scaling"] = rope;
    j["scoring_func"] = "sigmoid";
    j["topk_method"] = "noaux_tc";
    j["moe_layer_freq"] = 1;
    for (const char* type : {"deepseek_v3", "kimi_k2"}) {
        j["model_type"] = type;
        const model_config v4 = model_config::parse(j.dump());
        EXPECT_EQ(v4.arch, model_arch::deepseek_v3);
        EXPECT_EQ(v4.rope_inv_freq(), v5.rope_inv_freq()) << type;
        EXPECT_EQ(v4.rope.attention_factor, v5.rope.attention_factor) << type;
        EXPECT_EQ(v4.softmax_scale(), v5.softmax_scale()) << type;
        EXPECT_EQ(v4.router, v5.router);
        EXPECT_EQ(v4.moe_layer_indices(), v5.moe_layer_indices());
    }
    // Kimi-K2 style: one expert group.
    j["n_group"] = 1;
    j["topk_group"] = 1;
    const model_config kimi = model_config::parse(j.dump());
    EXPECT_EQ(kimi.n_group, 1);
    EXPECT_EQ(kimi.router, router_kind::sigmoid_group_limited);
}

// quantization_config: DeepSeek-V3's block-scaled FP8 loads (any architecture); every other method or FP8 variant
// is refused at parse time, naming the method and what differs.
TEST(ModelConfig, QuantizationConfigFp8BlockAcceptedOthersRefusedByName) {
    for (const char* fixture : {"deepseek_v3", "qwen3_moe", "mixtral"}) {
        json j = read_json_file(deepseek_fixture(fixture) + "/config.json");
        const model_config plain = model_config::parse(j.dump());
        EXPECT_FALSE(plain.quantization.fp8());
        j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                    {"fmt", "e4m3"},
                                    {"quant_method", "fp8"},
                                    {"weight_block_size", {128, 128}},
                                    {"modules_to_not_convert", {"lm_head", "model.layers.0.self_attn.o_proj"}}};
        const model_config c = model_config::parse(j.dump(), "/m/config.json");
        EXPECT_TRUE(c.quantization.fp8()) << fixture;
        EXPECT_TRUE(c.quantization.in_checkpoint);
        EXPECT_TRUE(c.quantization.not_converted("model.layers.0.self_attn.o_proj.weight"));
        EXPECT_FALSE(c.quantization.not_converted("model.layers.1.self_attn.o_proj.weight"));
        // Qwen3-FP8 spells the list ignored_layers; fmt and activation_scheme may be absent (their defaults).
        json q = j;
        q["quantization_config"] = {
            {"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"ignored_layers", {"mlp.gate"}}};
        const model_config qc = model_config::parse(q.dump());
        EXPECT_TRUE(qc.quantization.fp8());
        EXPECT_EQ(qc.quantization.modules_to_not_convert, std::vector<std::string>{"mlp.gate"});
        // The rest of the config is unaffected.
        EXPECT_EQ(c.hidden_size, plain.hidden_size);
        EXPECT_EQ(c.num_experts, plain.num_experts);
    }
    const json base = read_json_file(deepseek_fixture("deepseek_v3") + "/config.json");
    auto refused = [&](const json& qc, const std::vector<std::string>& words) {
        json j = base;
        j["quantization_config"] = qc;
        const std::string msg = error_of([&] { model_config::parse(j.dump(), "/m/config.json"); }, errc::unsupported);
        EXPECT_NE(msg.find("/m/config.json"), std::string::npos) << msg;
        EXPECT_NE(msg.find("quantization_config"), std::string::npos) << msg;
        for (const std::string& w : words) EXPECT_NE(msg.find(w), std::string::npos) << w << " in " << msg;
    };
    refused({{"quant_method", "awq"}, {"bits", 4}}, {"awq"});
    refused({{"quant_method", "gptq"}}, {"gptq"});
    refused({{"quant_method", "compressed-tensors"}}, {"compressed-tensors"});
    refused({{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}}, {"fp8", "weight_block_size", "64"});
    refused({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"activation_scheme", "static"}},
            {"fp8", "static"});
    refused({{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}}, {"fp8", "per-tensor"});
    refused({{"quant_method", "fp8"}, {"fmt", "e5m2"}, {"weight_block_size", {128, 128}}}, {"e5m2"});

    // --quantization: fp8 quantizes a BF16 checkpoint at load; anything else is refused by name.
    model_config c = model_config::parse(base.dump());
    c.apply_quantization_flag("");
    EXPECT_FALSE(c.quantization.fp8());
    c.apply_quantization_flag("fp8");
    EXPECT_TRUE(c.quantization.fp8());
    EXPECT_FALSE(c.quantization.in_checkpoint);
    const std::string msg = error_of([&] { c.apply_quantization_flag("int8"); }, errc::unsupported);
    EXPECT_NE(msg.find("int8"), std::string::npos) << msg;
}

TEST(ModelConfig, DeepseekUnsupportedVariantsNameTheField) {
    const json base = read_json_file(deepseek_fixture("deepseek_v3") + "/config.json");
    json j = base;
    j = base;
    j["scoring_func"] = "softmax";
    EXPECT_NE(error_of([&] { model_config::parse(j.dump()); }, errc::unsupported).find("scoring_func"),
              std::string::npos);
    j = base;
    j["topk_method"] = "greedy";
    EXPECT_NE(error_of([&] { model_config::parse(j.dump()); }, errc::unsupported).find("topk_method"),
              std::string::npos);
    j = base;
    j["rope_parameters"]["rope_type"] = "longrope";
    EXPECT_NE(error_of([&] { model_config::parse(j.dump()); }, errc::unsupported).find("longrope"), std::string::npos);
    j = base;
    j["n_group"] = 3;  // does not divide 16 experts
    EXPECT_NE(error_of([&] { model_config::parse(j.dump()); }, errc::invalid_checkpoint).find("n_group"),
              std::string::npos);
    json v2 = read_json_file(deepseek_fixture("deepseek_v2") + "/config.json");
    v2["topk_method"] = "noaux_tc";
    EXPECT_NE(error_of([&] { model_config::parse(v2.dump()); }, errc::unsupported).find("topk_method"),
              std::string::npos);
}

// Absent fields take the transformers config classes' defaults (DeepSeek-V3's published shape).
TEST(ModelConfig, DeepseekV3Defaults) {
    const json j = {{"model_type", "deepseek_v3"}, {"vocab_size", 129280},       {"hidden_size", 7168},
                    {"num_hidden_layers", 61},     {"num_attention_heads", 128}, {"intermediate_size", 18432}};
    const model_config c = model_config::parse(j.dump());
    EXPECT_EQ(c.num_experts, 256);
    EXPECT_EQ(c.num_experts_per_tok, 8);
    EXPECT_EQ(c.n_group, 8);
    EXPECT_EQ(c.topk_group, 4);
    EXPECT_EQ(c.mla.q_lora_rank, 1536);
    EXPECT_EQ(c.mla.kv_lora_rank, 512);
    EXPECT_EQ(c.head_dim, 192);
    EXPECT_EQ(c.moe_intermediate_size, 2048);
    EXPECT_EQ(c.shared_expert_intermediate_size, 2048);
    EXPECT_EQ(c.num_moe_layers(), 58);  // first_k_dense_replace = 3
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
    EXPECT_EQ(c.rope.type, "default");
}

// DeepSeek-V2-Lite's published config.json (transformers 4.x spelling, remote-code fields included).
TEST(ModelConfig, DeepseekV2LitePublishedConfig) {
    const json j = {{"architectures", {"DeepseekV2ForCausalLM"}},
                    {"aux_loss_alpha", 0.001},
                    {"bos_token_id", 100000},
                    {"eos_token_id", 100001},
                    {"ep_size", 1},
                    {"first_k_dense_replace", 1},
                    {"hidden_act", "silu"},
                    {"hidden_size", 2048},
                    {"intermediate_size", 10944},
                    {"kv_lora_rank", 512},
                    {"max_position_embeddings", 163840},
                    {"model_type", "deepseek_v2"},
                    {"moe_intermediate_size", 1408},
                    {"moe_layer_freq", 1},
                    {"n_group", 1},
                    {"n_routed_experts", 64},
                    {"n_shared_experts", 2},
                    {"norm_topk_prob", false},
                    {"num_attention_heads", 16},
                    {"num_experts_per_tok", 6},
                    {"num_hidden_layers", 27},
                    {"num_key_value_heads", 16},
                    {"q_lora_rank", nullptr},
                    {"qk_nope_head_dim", 128},
                    {"qk_rope_head_dim", 64},
                    {"rms_norm_eps", 1e-06},
                    {"rope_scaling",
                     {{"beta_fast", 32},
                      {"beta_slow", 1},
                      {"factor", 40},
                      {"mscale", 0.707},
                      {"mscale_all_dim", 0.707},
                      {"original_max_position_embeddings", 4096},
                      {"type", "yarn"}}},
                    {"rope_theta", 10000},
                    {"routed_scaling_factor", 1.0},
                    {"scoring_func", "softmax"},
                    {"seq_aux", true},
                    {"tie_word_embeddings", false},
                    {"topk_group", 1},
                    {"topk_method", "greedy"},
                    {"torch_dtype", "bfloat16"},
                    {"v_head_dim", 128},
                    {"vocab_size", 102400}};
    const model_config c = model_config::parse(j.dump());
    EXPECT_EQ(c.arch, model_arch::deepseek_v2);
    EXPECT_EQ(c.router, router_kind::softmax_topk);
    EXPECT_EQ(c.mla.q_lora_rank, 0);
    EXPECT_EQ(c.num_moe_layers(), 26);
    EXPECT_EQ(c.shared_expert_intermediate_size, 2816);
    EXPECT_EQ(c.rope.type, "yarn");
    EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
    EXPECT_DOUBLE_EQ(c.rope.attention_factor, 1.0);  // mscale == mscale_all_dim
    // 1/sqrt(192) * (0.1 * 0.707 * ln 40 + 1)^2
    const double m = 0.1 * 0.707 * std::log(40.0) + 1.0;
    EXPECT_FLOAT_EQ(c.softmax_scale(), static_cast<float>(m * m / std::sqrt(192.0)));
    EXPECT_EQ(c.kv_width(), 576);
}

}  // namespace
}  // namespace zmoe
