#include "workers/model_config.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "synthetic_model.hpp"

namespace zmoe {
namespace {

using json = nlohmann::json;

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

}  // namespace
}  // namespace zmoe
