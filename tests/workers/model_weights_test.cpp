#include "workers/model_weights.hpp"

#include <gtest/gtest.h>

#include "base/error.hpp"
#include "synthetic_model.hpp"
#include "workers/model_runner.hpp"

namespace zmoe {
namespace {

using testing::synthetic_model;
using testing::temp_dir;

using testing::error_of;

runner_options small_options() {
    runner_options o;
    o.num_kv_blocks = 8;
    o.num_threads = 1;
    return o;
}

TEST(ModelWeights, LoadsEveryDtypeAndMapsLayers) {
    for (dtype t : {dtype::bf16, dtype::f16, dtype::f32}) {
        temp_dir dir;
        synthetic_model::qwen3_moe(t).write(dir.str());
        const model_config c = model_config::load(dir.str());
        const model_weights w(dir.str(), c, expert_placement::initial(c.num_moe_layers(), c.num_experts, 0, 2), 1);
        ASSERT_EQ(w.layers().size(), 2u);
        EXPECT_EQ(w.layers()[0].moe_index, 0);
        EXPECT_EQ(w.layers()[1].moe_index, -1);
        EXPECT_EQ(w.layers()[0].moe.slot_expert, (std::vector<int32_t>{2, 3}));  // rank 1 of 2 owns experts 2, 3
        EXPECT_EQ(w.layers()[0].moe.experts.size(), 2u);
        EXPECT_EQ(w.layers()[1].dense.gate.rows, 24);
        EXPECT_EQ(w.embed().type, t);
        EXPECT_EQ(w.layers()[0].attn.q_norm.size(), 8u);
    }
}

TEST(ModelWeights, MissingTensorNamesFileAndTensor) {
    temp_dir dir;
    synthetic_model m = synthetic_model::qwen3_moe();
    m.remove("model.layers.0.mlp.experts.3.up_proj.weight");
    m.write(dir.str());
    const std::string msg = error_of([&] { model_runner r(dir.str(), small_options()); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find(dir.file("model.safetensors")), std::string::npos) << msg;
    EXPECT_NE(msg.find("'model.layers.0.mlp.experts.3.up_proj.weight'"), std::string::npos) << msg;
}

TEST(ModelWeights, WrongShapeNamesExpectedAndActual) {
    temp_dir dir;
    synthetic_model m = synthetic_model::qwen3_moe();
    tensor_to_write* t = m.find("model.layers.0.self_attn.k_proj.weight");
    t->shape = {32, 16};
    m.write(dir.str());
    const std::string msg = error_of([&] { model_runner r(dir.str(), small_options()); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'model.layers.0.self_attn.k_proj.weight' has shape [32, 16], expected [16, 32]"),
              std::string::npos)
        << msg;
}

TEST(ModelWeights, MissingLmHeadUnlessTied) {
    temp_dir dir;
    synthetic_model m = synthetic_model::qwen3_moe();
    m.remove("lm_head.weight");
    m.write(dir.str());
    const std::string msg = error_of([&] { model_runner r(dir.str(), small_options()); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("'lm_head.weight'"), std::string::npos) << msg;
    m.config["tie_word_embeddings"] = true;
    m.write(dir.str());
    model_runner tied(dir.str(), small_options());
    EXPECT_EQ(tied.config().vocab_size, 64);
}

TEST(ModelWeights, UnsupportedArchitectureAndDtype) {
    temp_dir dir;
    synthetic_model m = synthetic_model::qwen3_moe();
    m.config["model_type"] = "gpt_oss";
    m.write(dir.str());
    std::string msg = error_of([&] { model_runner r(dir.str(), small_options()); }, errc::unsupported);
    EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'gpt_oss'"), std::string::npos) << msg;

    // A weight in a dtype we do not compute with: patch one F32 tensor's header entry to I32 (same byte size).
    temp_dir dir2;
    synthetic_model::qwen3_moe(dtype::f32).write(dir2.str());
    std::string bytes;
    {
        std::ifstream in(dir2.file("model.safetensors"), std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    // model.norm.weight: F32 [32] (128 bytes) becomes I32 [32], same size.
    const std::string key = "\"model.norm.weight\":{\"data_offsets\":";
    const size_t at = bytes.find(key);
    ASSERT_NE(at, std::string::npos);
    const size_t dt = bytes.find("\"F32\"", at);
    bytes.replace(dt, 5, "\"I32\"");
    std::ofstream(dir2.file("model.safetensors"), std::ios::binary) << bytes;
    msg = error_of([&] { model_runner r(dir2.str(), small_options()); }, errc::unsupported);
    EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'model.norm.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("I32"), std::string::npos) << msg;
}

TEST(ModelWeights, DtypesGiveCloseLogits) {
    // The same random model stored as f32 and bf16: both load and run, logits close (bf16 rounding only).
    std::vector<std::vector<float>> logits[2];
    int k = 0;
    for (dtype t : {dtype::f32, dtype::bf16}) {
        temp_dir dir;
        synthetic_model::qwen3_moe(t).write(dir.str());
        model_runner r(dir.str(), small_options());
        step_request q;
        scheduled_seq s;
        s.request_id = 1;
        s.token_ids = {3, 4, 5, 6, 7};
        s.block_table = {0};
        s.do_sample = true;
        q.seqs.push_back(s);
        r.execute(q, &logits[k++]);
    }
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < logits[0][0].size(); ++i) {
        max_err = std::max<double>(max_err, std::abs(logits[0][0][i] - logits[1][0][i]));
        max_ref = std::max<double>(max_ref, std::abs(logits[0][0][i]));
    }
    EXPECT_GT(max_ref, 0.0);
    EXPECT_LT(max_err / max_ref, 0.1);
    EXPECT_NE(logits[0], logits[1]);  // bf16 really was rounded
}

}  // namespace
}  // namespace zmoe
