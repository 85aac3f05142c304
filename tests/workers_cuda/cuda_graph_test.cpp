// Decode CUDA graphs and dummy weights on one GPU: graph replay (batches padded up to a captured size) gives the
// eager run's tokens and logits on every fixture; padding rows are never counted as expert load; graphs survive
// expert moves; `--load-format dummy` weights are deterministic, finite, and route tokens over many experts.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "cuda_test_util.hpp"
#include "messages/expert_placement.hpp"
#include "workers/cuda/cuda_step_executor.hpp"

namespace zmoe::cuda {
namespace {

using namespace zmoe::cuda::testing;
using zmoe::testing::step_driver;

std::unique_ptr<cuda_step_executor> make_executor(const std::string& dir, bool eager,
                                                  const std::string& load_format = "auto") {
    executor_options o = cuda_options(dir);
    o.config.enforce_eager = eager;
    o.config.max_num_seqs = 32;
    o.config.max_num_batched_tokens = 1024;
    o.config.load_format = load_format;
    const model_config& c = o.model;
    return std::make_unique<cuda_step_executor>(
        o, expert_placement::initial(c.num_moe_layers(), c.num_experts, 0, o.world_size()));
}

/// Runs `driver` to the end, checking after every step that the load counts add up to the real tokens' choices.
void run_counting(cuda_step_executor& ex, step_driver& driver) {
    const model_config& c = ex.config();
    while (!driver.all_done()) {
        const step_request r = driver.next();
        std::vector<std::vector<float>> logits;
        const step_result res = ex.execute(r, &logits);
        uint64_t tokens = 0, routed = 0;
        for (const scheduled_seq& q : r.seqs) tokens += q.token_ids.size();
        for (uint32_t n : res.expert_counts) routed += n;
        ASSERT_EQ(routed, tokens * c.num_experts_per_tok * c.num_moe_layers()) << "step " << r.step_id;
        driver.record(r, res, logits);
    }
}

/// Runs the same sequences (prompt, new tokens) on an eager executor and on one with graphs: the graph executor
/// replays at least one decode step and gives the eager one's tokens and logits.
void expect_replay_matches_eager(cuda_step_executor& eager, cuda_step_executor& graphs,
                                 const std::vector<std::pair<std::vector<int32_t>, int64_t>>& seqs,
                                 const std::string& label) {
    step_driver a(kBlockSize, 7), b(kBlockSize, 7);
    for (size_t i = 0; i < seqs.size(); ++i) {
        a.add(i, seqs[i].first, seqs[i].second);
        b.add(i, seqs[i].first, seqs[i].second);
    }
    const int64_t replays = graphs.graph_replays();
    run_counting(eager, a);
    run_counting(graphs, b);
    EXPECT_GT(graphs.graph_replays(), replays) << label << ": no decode step replayed a graph";
    for (size_t i = 0; i < seqs.size(); ++i)
        expect_same_run(b.seqs()[i], a.seqs()[i], kSelfMargin, kSelfTolerance, label + " seq " + std::to_string(i));
}

class CudaGraphs : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        dir_ = fixture_dir(GetParam());
        prompts_ = load_reference(dir_);
        ASSERT_FALSE(prompts_.empty());
    }
    std::string dir_;
    std::vector<ref_prompt> prompts_;
};

TEST_P(CudaGraphs, ReplayMatchesEager) {
    auto eager = make_executor(dir_, true);
    auto graphs = make_executor(dir_, false);
    EXPECT_TRUE(eager->graph_batch_sizes().empty());
    EXPECT_EQ(graphs->graph_batch_sizes(), decode_graph_batch_sizes(32));
    // 1 sequence (exact bucket), then all prompts (padded up to the next bucket), then 5 copies of them (more
    // padding, and batches shrinking as sequences finish at different lengths), at most max_num_seqs.
    for (size_t n : {size_t{1}, prompts_.size(), std::min<size_t>(32, 5 * prompts_.size())}) {
        std::vector<std::pair<std::vector<int32_t>, int64_t>> seqs;
        for (size_t i = 0; i < n; ++i) seqs.emplace_back(prompts_[i % prompts_.size()].token_ids, 6 + int64_t(i % 3));
        expect_replay_matches_eager(*eager, *graphs, seqs, GetParam() + " batch " + std::to_string(n));
    }
    EXPECT_EQ(eager->graph_replays(), 0);
}

TEST_P(CudaGraphs, ReplayAfterExpertMovesMatchesEager) {
    auto eager = make_executor(dir_, true);
    auto graphs = make_executor(dir_, false);
    const model_config& c = graphs->config();
    std::vector<expert_slot_move> moves;
    for (uint32_t l = 0; l < c.num_moe_layers(); ++l)
        for (uint32_t s = 0; s < c.num_experts; ++s)
            moves.push_back(
                {l, s, static_cast<int32_t>(c.num_experts - 1 - s), 0, static_cast<uint32_t>(c.num_experts - 1 - s)});
    graphs->apply_expert_moves(moves);
    step_driver a(kBlockSize, 0), b(kBlockSize, 0);
    for (size_t i = 0; i < prompts_.size(); ++i) {
        a.add(i, prompts_[i].token_ids, 5);
        b.add(i, prompts_[i].token_ids, 5);
    }
    run_counting(*eager, a);
    run_counting(*graphs, b);
    EXPECT_GT(graphs->graph_replays(), 0);
    for (size_t i = 0; i < prompts_.size(); ++i)
        expect_same_run(b.seqs()[i], a.seqs()[i], kSelfMargin, kSelfTolerance,
                        GetParam() + " moved, seq " + std::to_string(i));
}

TEST_P(CudaGraphs, DummyWeightsAreDeterministicAndRouteWidely) {
    auto first = make_executor(dir_, false, "dummy");
    auto second = make_executor(dir_, true, "dummy");
    const model_config& c = first->config();
    step_driver a(kBlockSize, 0), b(kBlockSize, 0);
    for (size_t i = 0; i < prompts_.size(); ++i) {
        a.add(i, prompts_[i].token_ids, 4);
        b.add(i, prompts_[i].token_ids, 4);
    }
    // Routing spread: the prefill's tokens pick many distinct experts in every MoE layer.
    const step_request r = a.next(), rb = b.next();
    std::vector<std::vector<float>> logits;
    const step_result res = first->execute(r, &logits);
    a.record(r, res, logits);
    std::vector<std::vector<float>> logits_b;
    const step_result res_b = second->execute(rb, &logits_b);
    b.record(rb, res_b, logits_b);
    int64_t tokens = 0;
    for (const scheduled_seq& q : r.seqs) tokens += static_cast<int64_t>(q.token_ids.size());
    for (int64_t l = 0; l < c.num_moe_layers(); ++l) {
        int64_t used = 0;
        for (int64_t e = 0; e < c.num_experts; ++e) used += res.expert_counts[l * c.num_experts + e] > 0 ? 1 : 0;
        EXPECT_GE(used, std::min<int64_t>(c.num_experts, 2 * c.num_experts_per_tok))
            << "layer " << l << ": " << tokens << " tokens routed to only " << used << " experts";
    }
    for (const auto& row : logits)
        for (float x : row) ASSERT_TRUE(std::isfinite(x));
    run_all(*first, a);
    run_all(*second, b);
    for (size_t i = 0; i < prompts_.size(); ++i)
        expect_same_run(a.seqs()[i], b.seqs()[i], kSelfMargin, kSelfTolerance,
                        GetParam() + " dummy seq " + std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGraphs,
                         ::testing::Values("qwen3_moe", "qwen3_moe_alt", "qwen2_moe", "qwen2_moe_alt", "mixtral",
                                           "mixtral_alt", "olmoe", "olmoe_alt", "deepseek_v3", "deepseek_v3_alt",
                                           "deepseek_v3_flat", "deepseek_v2", "deepseek_v2_alt", "deepseek_v2_greedy"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

/// A Qwen3-MoE config at the decode kernels' shapes (head_dim 128, 8 query heads per KV head, 32 experts, top-8),
/// in a directory of its own with no weights: it runs with --load-format dummy.
class DecodeShapesModel {
  public:
    DecodeShapesModel() {
        dir_ = std::filesystem::temp_directory_path() / ("zmoe_decode_shapes_" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir_);
        nlohmann::json c = nlohmann::json::parse(std::ifstream(fixture_dir("qwen3_moe") + "/config.json"));
        c["hidden_size"] = 256;
        c["head_dim"] = 128;
        c["num_attention_heads"] = 16;
        c["num_key_value_heads"] = 2;
        c["num_hidden_layers"] = 3;
        c["mlp_only_layers"] = nlohmann::json::array({1});
        c["intermediate_size"] = 256;
        c["moe_intermediate_size"] = 128;
        c["num_experts"] = 32;
        c["num_local_experts"] = 32;
        c["num_experts_per_tok"] = 8;
        std::ofstream(dir_ / "config.json") << c.dump(2);
    }
    ~DecodeShapesModel() { std::filesystem::remove_all(dir_); }
    std::string dir() const { return dir_.string(); }

  private:
    std::filesystem::path dir_;
};

TEST(CudaGraphsDecodeShapes, ReplayMatchesEagerThroughTheDecodeKernels) {
    // One sequence and six (few-token MoE path, decode attention), then twenty (grouped-GEMM path): graph replay
    // gives the eager executor's tokens and logits.
    const DecodeShapesModel model;
    auto eager = make_executor(model.dir(), true, "dummy");
    auto graphs = make_executor(model.dir(), false, "dummy");
    const model_config& c = graphs->config();
    std::mt19937 rng(11);
    for (size_t n : {size_t{1}, size_t{6}, size_t{20}}) {
        std::vector<std::pair<std::vector<int32_t>, int64_t>> seqs;
        for (size_t i = 0; i < n; ++i) {
            std::vector<int32_t> prompt(5 + rng() % 40);
            for (auto& t : prompt) t = static_cast<int32_t>(rng() % c.vocab_size);
            seqs.emplace_back(std::move(prompt), 5 + int64_t(i % 4));
        }
        expect_replay_matches_eager(*eager, *graphs, seqs, "decode shapes, batch " + std::to_string(n));
    }
}

// --dummy-router-skew: the same random prompts on dummy weights with and without the skew. With it, the highest
// expert ids win most routings in every MoE layer (the hot experts EPLB is measured on); without it, they do not.
TEST(CudaGraphsDecodeShapes, DummyRouterSkewMakesTheLastExpertsHot) {
    const DecodeShapesModel model;
    std::vector<std::vector<uint32_t>> counts;
    int64_t tokens = 0;
    for (double skew : {0.0, 1.0}) {
        executor_options o = cuda_options(model.dir());
        o.config.enforce_eager = true;
        o.config.load_format = "dummy";
        o.config.dummy_router_skew = skew;
        const model_config& c = o.model;
        cuda_step_executor ex(o, expert_placement::initial(c.num_moe_layers(), c.num_experts, 0, 1));
        step_driver d(kBlockSize, 0);
        std::mt19937 rng(5);
        for (size_t i = 0; i < 8; ++i) {
            std::vector<int32_t> prompt(32);
            for (auto& t : prompt) t = static_cast<int32_t>(rng() % c.vocab_size);
            d.add(i, prompt, 1);
        }
        const step_request r = d.next();
        tokens = 0;
        for (const scheduled_seq& q : r.seqs) tokens += static_cast<int64_t>(q.token_ids.size());
        counts.push_back(ex.execute(r).expert_counts);
    }
    const model_config c = model_config::load(model.dir());
    for (int64_t l = 0; l < c.num_moe_layers(); ++l) {
        auto hot = [&](size_t run) {  // tokens routed to the two highest expert ids
            return counts[run][(l + 1) * c.num_experts - 1] + counts[run][(l + 1) * c.num_experts - 2];
        };
        EXPECT_GE(hot(1), static_cast<uint32_t>(tokens)) << "layer " << l << ": the last two experts are not hot";
        EXPECT_LT(hot(0), static_cast<uint32_t>(tokens)) << "layer " << l << ": hot without the skew";
    }
}

TEST(DecodeGraphBatchSizes, BucketsUpToTheLimit) {
    EXPECT_EQ(decode_graph_batch_sizes(1), (std::vector<int32_t>{1}));
    EXPECT_EQ(decode_graph_batch_sizes(6), (std::vector<int32_t>{1, 2, 4, 6}));
    EXPECT_EQ(decode_graph_batch_sizes(8), (std::vector<int32_t>{1, 2, 4, 8}));
    EXPECT_EQ(decode_graph_batch_sizes(20), (std::vector<int32_t>{1, 2, 4, 8, 16, 20}));
    const auto big = decode_graph_batch_sizes(256);
    EXPECT_EQ(big.front(), 1);
    EXPECT_EQ(big.back(), 256);
    EXPECT_TRUE(std::is_sorted(big.begin(), big.end()));
    EXPECT_EQ(std::set<int32_t>(big.begin(), big.end()).size(), big.size());
}

}  // namespace
}  // namespace zmoe::cuda
