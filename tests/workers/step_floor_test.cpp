// The memory floor's byte counts against real checkpoints: the fixtures' tensors, summed one by one, in BF16.

#include "model/step_floor.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "workers/safetensors.hpp"

namespace zmoe {
namespace {

const std::string kModels = std::string(ZMOE_FIXTURES_DIR) + "/models/";

int64_t numel(const tensor_view& t) {
    int64_t n = 1;
    for (const int64_t d : t.shape) n *= d;
    return n;
}

class StepFloor : public ::testing::TestWithParam<std::string> {};

// Dense bytes = every tensor but the routed experts and the input embedding (a tied LM head is the embedding);
// expert bytes = the tensors of expert 0 of the first MoE layer.
TEST_P(StepFloor, BytesAreTheCheckpointsTensors) {
    const std::string dir = kModels + GetParam();
    const model_config c = model_config::load(dir);
    const safetensors_checkpoint ckpt(dir);
    int64_t dense = 0, expert0 = 0;
    bool has_lm_head = false;
    const auto moe_layers = c.moe_layer_indices();
    int64_t first_moe = 0;
    while (moe_layers[static_cast<size_t>(first_moe)] < 0) ++first_moe;
    const std::string expert0_prefix = "layers." + std::to_string(first_moe) + ".";
    for (const std::string& name : ckpt.names()) {
        const int64_t n = numel(ckpt.get(name));
        has_lm_head = has_lm_head || name.find("lm_head") != std::string::npos;
        if (name.find(".experts.") != std::string::npos) {
            if (name.find(expert0_prefix) != std::string::npos && name.find(".experts.0.") != std::string::npos)
                expert0 += n;
            continue;
        }
        if (name.find("embed_tokens") != std::string::npos) continue;
        dense += n;
    }
    if (!has_lm_head) dense += c.vocab_size * c.hidden_size;
    const step_floor_model f = step_floor_model::of(c);
    EXPECT_EQ(f.dense_bytes, 2 * dense) << GetParam();
    EXPECT_EQ(f.expert_bytes, 2 * expert0) << GetParam();
    const int64_t kv_row = c.is_mla() ? c.mla.kv_lora_rank + c.mla.qk_rope_head_dim : 2 * c.num_kv_heads * c.head_dim;
    EXPECT_EQ(f.kv_bytes_per_position, 2 * c.num_layers * kv_row) << GetParam();
    EXPECT_DOUBLE_EQ(f.bytes(3, 10),
                     static_cast<double>(f.dense_bytes + 3 * f.expert_bytes + 10 * f.kv_bytes_per_position));
}

// qwen2_moe: biases and a gated shared expert; olmoe: full q/k norms; deepseek: MLA, a dense first layer, shared
// experts (v3: a router bias); mixtral: w1/w2/w3 experts.
INSTANTIATE_TEST_SUITE_P(Fixtures, StepFloor,
                         ::testing::Values("qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "deepseek_v2", "deepseek_v3"),
                         [](const auto& info) { return info.param; });

// FP8 (the checkpoints of tests/fixtures/models/*_fp8, ragged 128-blocks): the floor counts each tensor as the FP8
// checkpoint stores it, one byte per e4m3 weight plus its fp32 weight_scale_inv, BF16 elsewhere, except MLA's kv_b,
// which the worker dequantizes to BF16 at load (two bytes a weight, no scales); and `--quantization fp8` on the BF16
// source counts the same bytes.
class StepFloorFp8 : public ::testing::TestWithParam<std::string> {};

TEST_P(StepFloorFp8, BytesAreTheFp8CheckpointsTensors) {
    const std::string dir = kModels + GetParam();
    const model_config c = model_config::load(dir);
    ASSERT_TRUE(c.quantization.fp8());
    const safetensors_checkpoint ckpt(dir);
    int64_t dense = 0, expert0 = 0;
    const auto moe_layers = c.moe_layer_indices();
    int64_t first_moe = 0;
    while (moe_layers[static_cast<size_t>(first_moe)] < 0) ++first_moe;
    const std::string expert0_prefix = "layers." + std::to_string(first_moe) + ".";
    bool has_lm_head = false;
    for (const std::string& name : ckpt.names()) {
        const tensor_view t = ckpt.get(name);
        // Scales widen to fp32 at load (a BF16 weight_scale_inv is read as fp32 too).
        const bool kv_b = name.find("kv_b_proj.") != std::string::npos;
        if (kv_b && name.ends_with("weight_scale_inv")) continue;
        const int64_t b = numel(t) * (kv_b                                 ? 2
                                      : name.ends_with("weight_scale_inv") ? 4
                                                                           : static_cast<int64_t>(dtype_size(t.type)));
        has_lm_head = has_lm_head || name.find("lm_head") != std::string::npos;
        if (name.find(".experts.") != std::string::npos) {
            if (name.find(expert0_prefix) != std::string::npos && name.find(".experts.0.") != std::string::npos)
                expert0 += b;
            continue;
        }
        if (name.find("embed_tokens") != std::string::npos) continue;
        dense += b;
    }
    if (!has_lm_head) dense += 2 * c.vocab_size * c.hidden_size;
    const step_floor_model f = step_floor_model::of(c);
    EXPECT_EQ(f.dense_bytes, dense) << GetParam();
    EXPECT_EQ(f.expert_bytes, expert0) << GetParam();
    const step_floor_model q = step_floor_model::of(model_config::load(dir + "_source"), "fp8");
    EXPECT_EQ(q.dense_bytes, f.dense_bytes) << GetParam() << " --quantization fp8";
    EXPECT_EQ(q.expert_bytes, f.expert_bytes) << GetParam() << " --quantization fp8";
    EXPECT_LT(f.expert_bytes, step_floor_model::of(model_config::load(dir + "_source")).expert_bytes);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StepFloorFp8, ::testing::Values("qwen3_moe_fp8", "deepseek_v3_fp8"),
                         [](const auto& info) { return info.param; });

TEST(StepFloor, ExpertsTouchedCountsNonZeroEntries) {
    EXPECT_EQ(experts_touched(std::vector<uint32_t>{}), 0);
    EXPECT_EQ(experts_touched(std::vector<uint32_t>{0, 3, 0, 1, 7, 0}), 3);
}

}  // namespace
}  // namespace zmoe
