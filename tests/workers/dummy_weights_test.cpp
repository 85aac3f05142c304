// --load-format dummy on the CPU backend: the generated tensors (deterministic, N(0, 0.02^2), norms 1, biases 0,
// the per-expert layout), and a model runner built from config.json alone for every fixture architecture: it runs,
// is deterministic across runners, gives finite logits and spreads a prefill's tokens over many experts.

#include "workers/dummy_weights.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "base/error.hpp"
#include "synthetic_model.hpp"
#include "workers/model_runner.hpp"
#include "workers/step_executor.hpp"

namespace zmoe {
namespace {

using testing::temp_dir;

model_config config_of(const std::string& fixture) {
    return model_config::load(std::string(ZMOE_FIXTURES_DIR) + "/models/" + fixture);
}

TEST(DummyCheckpoint, MatricesAreDeterministicNormalAndKeyedOnTheName) {
    const model_config c = config_of("qwen3_moe");
    const dummy_checkpoint a(c), b(c);
    const matrix_view m1 = a.get_matrix("model.layers.0.self_attn.q_proj.weight", 300, 200);
    const matrix_view m2 = b.get_matrix("model.layers.0.self_attn.q_proj.weight", 300, 200);
    const matrix_view other = a.get_matrix("model.layers.1.self_attn.q_proj.weight", 300, 200);
    ASSERT_EQ(m1.type, dtype::bf16);
    ASSERT_EQ(m1.rows, 300);
    ASSERT_EQ(m1.cols, 200);
    std::vector<float> r1(200), r2(200), r3(200);
    double sum = 0, sum_sq = 0;
    int64_t same_as_other = 0;
    for (int64_t r = 0; r < m1.rows; ++r) {
        m1.row_to_f32(r, r1.data());
        m2.row_to_f32(r, r2.data());
        other.row_to_f32(r, r3.data());
        ASSERT_EQ(r1, r2) << "row " << r;
        for (int i = 0; i < 200; ++i) {
            sum += r1[i];
            sum_sq += double(r1[i]) * r1[i];
            same_as_other += r1[i] == r3[i];
            ASSERT_EQ(r1[i], dummy_weight_value("model.layers.0.self_attn.q_proj.weight", uint64_t(r * 200 + i)));
        }
    }
    const double n = 300.0 * 200.0, mean = sum / n, stddev = std::sqrt(sum_sq / n - mean * mean);
    EXPECT_LT(std::abs(mean), 0.001);
    EXPECT_NEAR(stddev, 0.02, 0.001);
    EXPECT_LT(same_as_other, int64_t(n / 50)) << "another tensor's values must differ";
    EXPECT_EQ(a.bytes(), 2 * 300 * 200 * 2);
}

TEST(DummyCheckpoint, VectorsAndLayout) {
    model_config c = config_of("qwen3_moe");
    const dummy_checkpoint d(c);
    EXPECT_EQ(d.get_vector("model.layers.0.input_layernorm.weight", 4), std::vector<float>(4, 1.f));
    EXPECT_EQ(d.get_vector("model.layers.0.self_attn.q_norm.weight", 3), std::vector<float>(3, 1.f));
    EXPECT_EQ(d.get_vector("model.layers.0.self_attn.q_proj.bias", 5), std::vector<float>(5, 0.f));
    EXPECT_TRUE(d.contains("model.layers.0.mlp.experts.3.gate_proj.weight"));
    EXPECT_FALSE(d.contains("model.layers.0.mlp.experts.gate_up_proj"));
    EXPECT_FALSE(d.contains("model.layers.0.block_sparse_moe.gate.weight"));
    EXPECT_FALSE(d.contains("model.layers.0.mlp.experts.3.w1.weight"));
    EXPECT_EQ(d.contains("lm_head.weight"), !c.tie_word_embeddings);
    EXPECT_THROW(d.get("model.layers.0.mlp.experts.gate_up_proj", {8, 64, 64}), error);
}

class DummyRunner : public ::testing::TestWithParam<std::string> {};

std::vector<std::vector<float>> prefill_logits(const std::string& dir, const model_config& c,
                                               std::vector<uint32_t>* counts, double router_skew = 0) {
    runner_options o;
    o.num_kv_blocks = 8;
    o.block_size = 16;
    o.num_threads = 2;
    o.load_format = "dummy";
    o.dummy_router_skew = router_skew;
    model_runner r(c, dir, o);
    step_request q;
    scheduled_seq s;
    s.request_id = 1;
    for (int32_t i = 0; i < 24; ++i) s.token_ids.push_back(int32_t((i * 37 + 5) % c.vocab_size));
    s.block_table = {0, 1};
    s.do_sample = true;
    q.seqs = {s};
    std::vector<std::vector<float>> logits;
    const step_result res = r.execute(q, &logits);
    EXPECT_EQ(res.tokens.size(), 1u);
    if (counts) counts->assign(res.expert_counts.begin(), res.expert_counts.end());
    return logits;
}

TEST_P(DummyRunner, RunsFromConfigAloneDeterministicallyAndRoutesWidely) {
    const model_config c = config_of(GetParam());
    temp_dir dir;  // config.json only: no weights on disk
    std::filesystem::copy_file(std::string(ZMOE_FIXTURES_DIR) + "/models/" + GetParam() + "/config.json",
                               dir.file("config.json"));
    std::vector<uint32_t> counts;
    const auto a = prefill_logits(dir.str(), c, &counts);
    const auto b = prefill_logits(dir.str(), c, nullptr);
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(a[0].size(), size_t(c.vocab_size));
    EXPECT_EQ(a, b) << "dummy weights must be the same in every runner";
    for (float v : a[0]) ASSERT_TRUE(std::isfinite(v));
    const int64_t E = c.num_experts, K = c.num_experts_per_tok;
    ASSERT_EQ(counts.size(), size_t(c.num_moe_layers() * E));
    for (int64_t l = 0; l < c.num_moe_layers(); ++l) {
        int64_t touched = 0, total = 0;
        for (int64_t e = 0; e < E; ++e) {
            touched += counts[l * E + e] > 0;
            total += counts[l * E + e];
        }
        EXPECT_EQ(total, 24 * K) << "layer " << l;
        EXPECT_GE(touched, std::min<int64_t>(E, 2 * K)) << "layer " << l << ": routing must not collapse";
    }
}

// --dummy-router-skew: the shared component, the writers' zero row and the readers' zero column are where
// dummy_weights.hpp puts them, and a prefill's tokens then pick the two highest expert ids far more often than
// without the skew, in every MoE layer.
TEST(DummyRunner, RouterSkewMakesTheLastExpertsHot) {
    const model_config c = config_of("qwen3_moe");
    const dummy_checkpoint plain(c), skewed(c, 0.5);
    const int64_t H = c.hidden_size, E = c.num_experts;
    auto at = [](const matrix_view& m, int64_t r, int64_t k) {
        std::vector<float> row(static_cast<size_t>(m.cols));
        m.row_to_f32(r, row.data());
        return row[static_cast<size_t>(k)];
    };
    const matrix_view embed = skewed.get_matrix("model.embed_tokens.weight", 4, H);
    const matrix_view o = skewed.get_matrix("model.layers.1.self_attn.o_proj.weight", H, 8);
    const matrix_view router = skewed.get_matrix("model.layers.1.mlp.gate.weight", E, H);
    const matrix_view plain_router = plain.get_matrix("model.layers.1.mlp.gate.weight", E, H);
    for (int64_t r = 0; r < 4; ++r) EXPECT_FLOAT_EQ(at(embed, r, 0), bf16_to_f32(f32_to_bf16(dummy_embed_column0(c))));
    for (int64_t k = 0; k < 8; ++k) EXPECT_EQ(at(o, 0, k), 0.f);
    EXPECT_NE(at(o, 1, 0), 0.f);
    const matrix_view q = skewed.get_matrix("model.layers.1.self_attn.q_proj.weight", 8, H);
    for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(at(q, r, 0), 0.f);
    EXPECT_NE(at(q, 0, 1), 0.f);
    EXPECT_GT(at(router, E - 1, 0), at(router, E - 2, 0));
    EXPECT_GT(at(router, E - 2, 0), at(router, 0, 0));
    EXPECT_GT(at(router, 0, 0), 0.f);
    EXPECT_EQ(at(router, 0, 1), at(plain_router, 0, 1)) << "only column 0 leans";
    EXPECT_GT(dummy_router_column0(c, 0.5, 3, E - 1), dummy_router_column0(c, 0.5, 0, E - 1))
        << "deeper layers lean more";

    temp_dir dir;
    std::filesystem::copy_file(std::string(ZMOE_FIXTURES_DIR) + "/models/qwen3_moe/config.json",
                               dir.file("config.json"));
    std::vector<uint32_t> even, hot;
    prefill_logits(dir.str(), c, &even, 0);
    prefill_logits(dir.str(), c, &hot, 0.5);
    for (int64_t l = 0; l < c.num_moe_layers(); ++l) {
        // 24 tokens: with the skew the last two experts take at least one of each token's picks on average.
        EXPECT_GE(hot[(l + 1) * E - 1] + hot[(l + 1) * E - 2], 24u) << "layer " << l;
        EXPECT_LT(even[(l + 1) * E - 1] + even[(l + 1) * E - 2], 24u) << "layer " << l;
    }
}

TEST(DummyRunner, StepExecutorTakesTheDummyFormatOnCpu) {
    temp_dir dir;
    std::filesystem::copy_file(std::string(ZMOE_FIXTURES_DIR) + "/models/qwen3_moe/config.json",
                               dir.file("config.json"));
    executor_options eo;
    eo.model = model_config::load(dir.str());
    eo.config.model = dir.str();
    eo.config.device = "cpu";
    eo.config.load_format = "dummy";
    eo.config.num_kv_blocks = 4;
    const auto placement = expert_placement::initial(eo.model.num_moe_layers(), eo.model.num_experts, 0, 1);
    EXPECT_NO_THROW(make_step_executor(eo, placement));
    eo.config.load_format = "pt";
    EXPECT_THROW(make_step_executor(eo, placement), error);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DummyRunner,
                         ::testing::Values("qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "deepseek_v3"));

}  // namespace
}  // namespace zmoe
