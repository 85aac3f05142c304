// Block-scaled FP8 on the CPU backend against Hugging Face transformers (tests/fixtures/models/*_fp8, written by
// scripts/make_model_fixtures.py: random BF16 checkpoints with ragged 128 x 128 blocks, quantized by the script,
// the reference computed with dequantized weights and activations quantized per token and 128-channel group), and
// `--quantization fp8` of the BF16 sources against the script's quantization, bit for bit.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "reference_fixture.hpp"
#include "step_driver.hpp"
#include "synthetic_model.hpp"
#include "workers/fp8.hpp"
#include "workers/inproc_expert_comm.hpp"
#include "workers/model_runner.hpp"
#include "workers/model_weights.hpp"
#include "workers/safetensors.hpp"
#include "workers/safetensors_writer.hpp"

namespace zmoe {
namespace {

namespace fs = std::filesystem;
using testing::driven_seq;
using testing::fixture_dir;
using testing::load_reference;
using testing::ref_prompt;
using testing::step_driver;

constexpr int64_t kBlockSize = 16;
// Logits: max abs error / max |reference|. We compute the reference's arithmetic (the same e4m3 weights, the
// activations quantized at the same points with the same rule), so a prompt's logits differ only by fp32 summation
// order: ~1e-6 relative measured, kLogitTolerance allows 100x that. The format's own rounding (relative error up to
// 2^-4 per quantization, 3 mantissa bits) does not enter: both sides round the same values the same way. Except
// where a value lands within that fp32 noise of a discrete decision: an e4m3 rounding tie (then one element moves
// by a whole e4m3 step, 2^-3 of its value) or a near-tied expert choice (then a whole expert's output changes).
// Such a prompt's logits jump by a few percent (measured: 5.4% and 2.7% of the logit scale on one prompt of each
// fixture); at most kMaxFlips prompts of a fixture may show one, bounded by kFlipTolerance. The measured case: in
// qwen3_moe_fp8 only prompt 5 has a close expert choice (gap between the 2nd and 3rd router logit 0.003 at one
// token, >= 0.024 everywhere in the other prompts, all of which match to ~1e-6): one e4m3 rounding flip upstream
// (one element moved by 2^-3 of its value) moves a router logit by about that much.
constexpr double kLogitTolerance = 1e-4;
constexpr double kFlipTolerance = 0.1;
constexpr int kMaxFlips = 1;
// Greedy tokens: compared until the reference's top-2 margin falls below kMinMargin (a near-tie fp32 order can
// decide, as in the BF16 reference tests). A token may differ only where the margin is below kFlipMargin (twice the
// largest flip jump, 0.054 x logit scale ~4), and in at most kMaxFlips prompts; comparison stops there.
constexpr double kMinMargin = 1e-3;
constexpr double kFlipMargin = 0.5;

double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        max_err = std::max(max_err, std::abs(static_cast<double>(got[i]) - ref[i]));
        max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[i])));
    }
    return max_err / std::max(max_ref, 1e-30);
}

runner_options options(const std::string& quantization, int num_threads = 2) {
    runner_options o;
    o.num_kv_blocks = 256;
    o.block_size = kBlockSize;
    o.num_threads = num_threads;
    o.quantization = quantization;
    return o;
}

void run_all(model_runner& runner, step_driver& driver) {
    while (!driver.all_done()) {
        const step_request r = driver.next();
        std::vector<std::vector<float>> logits;
        const step_result res = runner.execute(r, &logits);
        driver.record(r, res, logits);
    }
}

// A run of the FP8 model: the FP8 fixture as stored, or its BF16 source with --quantization fp8. Both are checked
// against the FP8 fixture's reference.
struct fp8_case {
    std::string name;       // fixture holding the reference
    std::string model_dir;  // what is loaded
    std::string quantization;
};

fp8_case case_of(const std::string& param) {
    const std::string suffix = "_quantized_at_load";
    if (param.size() > suffix.size() && param.compare(param.size() - suffix.size(), suffix.size(), suffix) == 0) {
        const std::string name = param.substr(0, param.size() - suffix.size());
        return {name, fixture_dir(name + "_source"), "fp8"};
    }
    return {param, fixture_dir(param), ""};
}

class Fp8Reference : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        c_ = case_of(GetParam());
        ASSERT_TRUE(std::ifstream(c_.model_dir + "/config.json").good()) << "fixture " << c_.model_dir << " is missing";
        prompts_ = load_reference(fixture_dir(c_.name));
        ASSERT_FALSE(prompts_.empty());
    }
    fp8_case c_;
    std::vector<ref_prompt> prompts_;
};

TEST_P(Fp8Reference, LastLogitsMatchTheEmulatedReference) {
    model_runner runner(c_.model_dir, options(c_.quantization));
    ASSERT_TRUE(runner.config().quantization.fp8());
    for (int64_t chunk : {int64_t{0}, int64_t{7}}) {
        double worst = 0, worst_flip = 0;
        int flips = 0;
        for (size_t i = 0; i < prompts_.size(); ++i) {
            step_driver driver(kBlockSize, chunk);
            driver.add(i + 100 * chunk, prompts_[i].token_ids, 1);
            run_all(runner, driver);
            const double err = relative_error(driver.seqs()[0].logits.at(0), prompts_[i].last_logits);
            if (err > kLogitTolerance) {
                ++flips;
                worst_flip = std::max(worst_flip, err);
                EXPECT_LE(err, kFlipTolerance) << GetParam() << " prompt " << i << ", chunk " << chunk;
            } else {
                worst = std::max(worst, err);
            }
        }
        EXPECT_LE(flips, kMaxFlips) << GetParam() << ", chunk " << chunk << ": prompts beyond " << kLogitTolerance;
        std::printf(
            "%s (chunk %ld): worst relative logit error vs the FP8 reference %.3g; %d prompt(s) past a "
            "discrete near-tie, worst %.3g\n",
            GetParam().c_str(), static_cast<long>(chunk), worst, flips, worst_flip);
    }
}

TEST_P(Fp8Reference, GreedyTokensMatchUpToNearTies) {
    model_runner runner(c_.model_dir, options(c_.quantization));
    step_driver driver(kBlockSize, 0);
    for (size_t i = 0; i < prompts_.size(); ++i)
        driver.add(i, prompts_[i].token_ids, static_cast<int64_t>(prompts_[i].greedy.size()));
    run_all(runner, driver);
    size_t total = 0;
    int flips = 0;
    for (size_t i = 0; i < prompts_.size(); ++i) {
        const ref_prompt& p = prompts_[i];
        const driven_seq& s = driver.seqs()[i];
        for (size_t t = 0; t < p.greedy.size() && p.margins[t] >= kMinMargin; ++t) {
            if (s.generated[t] != p.greedy[t]) {
                EXPECT_LT(p.margins[t], kFlipMargin)
                    << GetParam() << " prompt " << i << " step " << t << ": token " << s.generated[t] << ", reference "
                    << p.greedy[t] << " with top-2 margin " << p.margins[t];
                ++flips;
                break;
            }
            ++total;
        }
    }
    std::printf("%s: %zu greedy tokens compared, %d prompt(s) diverged at a near-tie\n", GetParam().c_str(), total,
                flips);
    EXPECT_LE(flips, kMaxFlips) << GetParam();
    EXPECT_GE(total, prompts_.size() * 5) << "too few greedy steps outside near-ties to compare";
}

// Experts spread over two in-process ranks (with replicas, shuffled slots) give the single rank's logits bitwise.
TEST_P(Fp8Reference, ExpertParallelMatchesSingleRank) {
    const int64_t n = 3;
    step_driver single(kBlockSize, 7);
    for (size_t i = 0; i < prompts_.size(); ++i) single.add(i, prompts_[i].token_ids, n);
    model_runner one(c_.model_dir, options(c_.quantization, 1));
    run_all(one, single);
    const model_config& c = one.config();
    const expert_placement placement =
        testing::replicated_two_rank_placement(static_cast<int32_t>(c.num_experts), c.num_moe_layers());
    std::vector<step_driver> drivers(2, step_driver(kBlockSize, 7));
    for (size_t i = 0; i < prompts_.size(); ++i) drivers[i % 2].add(i, prompts_[i].token_ids, n);
    inproc_expert_hub hub(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
        threads.emplace_back([&, r] {
            try {
                inproc_expert_comm comm(hub, r);
                runner_options o = options(c_.quantization, 1);
                o.rank = r;
                o.world_size = 2;
                o.comm = &comm;
                o.placement = &placement;
                model_runner runner(c_.model_dir, o);
                // Both ranks run the same number of steps (the longer schedule; an idle rank runs empty steps).
                for (int s = 0; s < 64; ++s) {
                    const step_request q = drivers[r].next();
                    std::vector<std::vector<float>> logits;
                    const step_result res = runner.execute(q, &logits);
                    drivers[r].record(q, res, logits);
                }
            } catch (const std::exception& e) {
                errors[r] = e.what();
                hub.abort();
            }
        });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
    for (size_t i = 0; i < prompts_.size(); ++i)
        EXPECT_EQ(drivers[i % 2].find(i).logits, single.seqs()[i].logits) << "prompt " << i;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8Reference,
                         ::testing::Values("qwen3_moe_fp8", "deepseek_v3_fp8", "qwen3_moe_fp8_quantized_at_load",
                                           "deepseek_v3_fp8_quantized_at_load"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The bytes of an FP8 matrix: its codes and its block scales.
void expect_same_fp8(const matrix_view& a, const matrix_view& b, const std::string& what) {
    ASSERT_EQ(a.type, dtype::f8_e4m3) << what;
    ASSERT_EQ(b.type, dtype::f8_e4m3) << what;
    ASSERT_EQ(a.rows, b.rows) << what;
    ASSERT_EQ(a.cols, b.cols) << what;
    EXPECT_EQ(std::memcmp(a.data, b.data, static_cast<size_t>(a.rows * a.cols)), 0) << what << ": codes differ";
    for (int64_t r = 0; r < a.rows; r += kFp8Block)
        for (int64_t k = 0; k < fp8_blocks(a.cols); ++k)
            ASSERT_EQ(a.row_scales(r)[k], b.row_scales(r)[k]) << what << ": scale of block " << r / 128 << "," << k;
}

void expect_same_mlp(const mlp_weights& a, const mlp_weights& b, const std::string& what) {
    expect_same_fp8(a.gate, b.gate, what + " gate");
    expect_same_fp8(a.up, b.up, what + " up");
    expect_same_fp8(a.down, b.down, what + " down");
}

// `--quantization fp8` of the BF16 source reproduces the script's quantization (the FP8 fixture) bit for bit:
// every quantized linear's codes and scales; the unquantized tensors stay in BF16 in both.
TEST(Fp8QuantizeAtLoad, BitIdenticalToTheFixtureScriptsQuantization) {
    for (const std::string name : {"qwen3_moe_fp8", "deepseek_v3_fp8"}) {
        SCOPED_TRACE(name);
        model_config src_cfg = model_config::load(fixture_dir(name + "_source"));
        EXPECT_FALSE(src_cfg.quantization.fp8());
        src_cfg.apply_quantization_flag("fp8");
        const model_config fp8_cfg = model_config::load(fixture_dir(name));
        ASSERT_TRUE(fp8_cfg.quantization.fp8());
        ASSERT_TRUE(fp8_cfg.quantization.in_checkpoint);
        const expert_placement placement = expert_placement::initial(static_cast<int32_t>(fp8_cfg.num_moe_layers()),
                                                                     static_cast<int32_t>(fp8_cfg.num_experts), 0, 1);
        const model_weights quantized(fixture_dir(name + "_source"), src_cfg, placement, 0);
        const model_weights stored(fixture_dir(name), fp8_cfg, placement, 0);
        EXPECT_GT(quantized.quantized_bytes(), 0);
        EXPECT_EQ(stored.quantized_bytes(), 0);  // read as stored, not re-quantized
        EXPECT_EQ(stored.embed().type, dtype::bf16);
        EXPECT_EQ(stored.lm_head().type, dtype::bf16);
        int64_t compared = 0;
        for (size_t l = 0; l < stored.layers().size(); ++l) {
            const layer_weights& a = quantized.layers()[l];
            const layer_weights& b = stored.layers()[l];
            const std::string at = "layer " + std::to_string(l);
            if (fp8_cfg.is_mla()) {
                if (!b.attn.mla.q_a.empty()) {
                    expect_same_fp8(a.attn.mla.q_a, b.attn.mla.q_a, at + " q_a");
                    expect_same_fp8(a.attn.mla.q_b, b.attn.mla.q_b, at + " q_b");
                    compared += 2;
                }
                expect_same_fp8(a.attn.mla.kv_a, b.attn.mla.kv_a, at + " kv_a");
                EXPECT_EQ(a.attn.mla.kv_b, b.attn.mla.kv_b) << at << " kv_b (dequantized)";
                compared += 2;
            } else {
                expect_same_fp8(a.attn.q, b.attn.q, at + " q");
                expect_same_fp8(a.attn.k, b.attn.k, at + " k");
                expect_same_fp8(a.attn.v, b.attn.v, at + " v");
                compared += 3;
            }
            expect_same_fp8(a.attn.o, b.attn.o, at + " o");
            ++compared;
            if (b.moe_index < 0) {
                expect_same_mlp(a.dense, b.dense, at + " dense");
                compared += 3;
                continue;
            }
            EXPECT_EQ(b.moe.router.type, dtype::bf16) << at << " router";
            ASSERT_EQ(a.moe.experts.size(), b.moe.experts.size());
            for (size_t e = 0; e < b.moe.experts.size(); ++e) {
                expect_same_mlp(a.moe.experts[e], b.moe.experts[e], at + " expert " + std::to_string(e));
                compared += 3;
            }
            if (b.moe.has_shared) {
                expect_same_mlp(a.moe.shared, b.moe.shared, at + " shared");
                compared += 3;
            }
        }
        // Every FP8 tensor of the checkpoint was compared (its weight_scale_inv count).
        const safetensors_checkpoint ck(fixture_dir(name));
        int64_t scales = 0;
        for (const std::string& n : ck.names()) scales += n.size() > 16 && n.ends_with("weight_scale_inv");
        EXPECT_EQ(compared, scales);
    }
}

// Fused 3D experts (transformers 5's layout) are quantized per expert and per projection, as the per-expert
// layout's tensors: the same logits bit for bit.
TEST(Fp8QuantizeAtLoad, FusedExpertsQuantizeAsPerExpert) {
    const std::vector<ref_prompt> prompts = load_reference(fixture_dir("qwen3_moe"));
    std::vector<std::vector<float>> logits[2];
    int k = 0;
    for (const std::string name : {"qwen3_moe", "qwen3_moe_alt"}) {
        model_runner runner(fixture_dir(name), options("fp8"));
        step_driver driver(kBlockSize, 0);
        driver.add(0, prompts.at(3).token_ids, 3);
        run_all(runner, driver);
        logits[k++] = driver.seqs()[0].logits;
    }
    ASSERT_EQ(logits[0].size(), 3u);
    EXPECT_EQ(logits[0], logits[1]);
    EXPECT_GT(relative_error(logits[0][0], prompts.at(3).last_logits), 1e-4) << "not quantized?";
}

// The same model through both paths gives the same logits bit for bit.
TEST(Fp8QuantizeAtLoad, SameLogitsAsTheFp8Checkpoint) {
    for (const std::string name : {"qwen3_moe_fp8", "deepseek_v3_fp8"}) {
        const std::vector<ref_prompt> prompts = load_reference(fixture_dir(name));
        ASSERT_FALSE(prompts.empty());
        std::vector<std::vector<float>> logits[2];
        int k = 0;
        for (const auto& [dir, q] : {std::pair{fixture_dir(name), std::string()},
                                     std::pair{fixture_dir(name + "_source"), std::string("fp8")}}) {
            model_runner runner(dir, options(q));
            step_driver driver(kBlockSize, 5);
            driver.add(0, prompts.at(4).token_ids, 4);
            run_all(runner, driver);
            logits[k++] = driver.seqs()[0].logits;
        }
        ASSERT_EQ(logits[0].size(), 4u);
        EXPECT_EQ(logits[0], logits[1]) << name;
    }
}

// An FP8 checkpoint written here from a BF16 fixture of another family (Mixtral: w1/w3/w2 experts under
// block_sparse_moe or mlp; OLMoE; Qwen2-MoE with its shared expert; DeepSeek-V2-Lite style MLA) loads and runs exactly
// as `--quantization fp8` of the fixture; modules_to_not_convert keeps a listed linear in BF16 on both paths.
TEST(Fp8Checkpoint, WrittenFp8CheckpointRunsAsQuantizedAtLoad) {
    for (const std::string src : {"mixtral", "olmoe", "qwen2_moe", "deepseek_v2"}) {
        SCOPED_TRACE(src);
        testing::temp_dir dir;
        nlohmann::json cfg = nlohmann::json::parse(std::ifstream(fixture_dir(src) + "/config.json"));
        const std::string keep = "model.layers.1.self_attn.o_proj";
        cfg["quantization_config"] = {{"quant_method", "fp8"},
                                      {"fmt", "e4m3"},
                                      {"activation_scheme", "dynamic"},
                                      {"weight_block_size", {128, 128}},
                                      {"modules_to_not_convert", {keep}}};
        std::ofstream(dir.file("config.json")) << cfg.dump();
        std::vector<tensor_to_write> tensors;
        const safetensors_checkpoint ck(fixture_dir(src));
        int64_t quantized = 0;
        for (const std::string& name : ck.names()) {
            const tensor_view t = ck.get(name);
            const bool linear = t.shape.size() == 2 && name.rfind("model.layers.", 0) == 0 &&
                                name.find("gate.weight") == std::string::npos &&
                                name.find(keep) == std::string::npos;  // router and shared_expert_gate stay
            if (!linear) {
                tensors.push_back({.name = name, .type = t.type, .shape = t.shape, .values = t.to_f32()});
                continue;
            }
            const int64_t rows = t.shape[0], cols = t.shape[1];
            const std::vector<float> w = t.to_f32();
            std::vector<uint8_t> codes(w.size());
            std::vector<float> scales(static_cast<size_t>(fp8_blocks(rows) * fp8_blocks(cols)));
            quantize_fp8_blocks(w.data(), rows, cols, cols, codes.data(), scales.data());
            std::vector<float> values(codes.size());
            for (size_t i = 0; i < codes.size(); ++i) values[i] = e4m3_to_f32(codes[i]);
            tensors.push_back({.name = name, .type = dtype::f8_e4m3, .shape = t.shape, .values = values});
            tensors.push_back({.name = name.substr(0, name.size() - 6) + "weight_scale_inv",
                               .type = dtype::f32,
                               .shape = {fp8_blocks(rows), fp8_blocks(cols)},
                               .values = scales});
            ++quantized;
        }
        ASSERT_GT(quantized, 10);
        write_safetensors(dir.file("model.safetensors"), tensors);
        const model_config stored_cfg = model_config::load(dir.str());
        const expert_placement placement = expert_placement::initial(
            static_cast<int32_t>(stored_cfg.num_moe_layers()), static_cast<int32_t>(stored_cfg.num_experts), 0, 1);
        {
            const model_weights w(dir.str(), stored_cfg, placement, 0);
            EXPECT_EQ(w.layers()[1].attn.o.type, dtype::bf16);  // left unconverted by the checkpoint
            EXPECT_EQ(w.layers()[0].attn.o.type, dtype::f8_e4m3);
            model_config q = model_config::load(fixture_dir(src));
            q.apply_quantization_flag("fp8");
            q.quantization.modules_to_not_convert = {keep};
            const model_weights at_load(fixture_dir(src), q, placement, 0);
            EXPECT_EQ(at_load.layers()[1].attn.o.type, dtype::bf16);
            expect_same_fp8(w.layers()[0].attn.o, at_load.layers()[0].attn.o, "o_proj");
            size_t l = 0;
            while (w.layers()[l].moe_index < 0) ++l;  // the first MoE layer
            expect_same_mlp(w.layers()[l].moe.experts[1], at_load.layers()[l].moe.experts[1], "expert 1");
            if (stored_cfg.is_mla()) {  // V2-Lite style: q_proj without q LoRA, kv_b dequantized
                expect_same_fp8(w.layers()[0].attn.q, at_load.layers()[0].attn.q, "q_proj");
                EXPECT_EQ(w.layers()[0].attn.mla.kv_b, at_load.layers()[0].attn.mla.kv_b);
            }
        }
        // And it runs: the same greedy tokens as the BF16 model for the first steps is not guaranteed (FP8 is
        // lossy), but the logits stay within the FP8 error of the BF16 reference.
        const std::vector<ref_prompt> prompts = load_reference(fixture_dir(src));
        model_runner runner(dir.str(), options(""));
        step_driver driver(kBlockSize, 0);
        driver.add(0, prompts.at(3).token_ids, 1);
        run_all(runner, driver);
        const double err = relative_error(driver.seqs()[0].logits.at(0), prompts.at(3).last_logits);
        EXPECT_LT(err, 0.15) << "FP8 vs the BF16 reference";
        EXPECT_GT(err, 1e-4) << "suspiciously exact for FP8";
    }
}

// Start-up refusals name what is wrong.
TEST(Fp8Checkpoint, UnsupportedQuantizationIsRefusedAtStartUp) {
    testing::temp_dir dir;
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(fixture_dir("qwen3_moe") + "/config.json"));
    cfg["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}};
    std::ofstream(dir.file("config.json")) << cfg.dump();
    fs::copy_file(fixture_dir("qwen3_moe") + "/model.safetensors", dir.file("model.safetensors"));
    std::string msg = testing::error_of([&] { model_runner r(dir.str(), options("")); }, errc::unsupported);
    EXPECT_NE(msg.find("awq"), std::string::npos) << msg;
    msg = testing::error_of([&] { model_runner r(fixture_dir("qwen3_moe"), options("int4")); }, errc::unsupported);
    EXPECT_NE(msg.find("int4"), std::string::npos) << msg;

    // FP8 tensors without a quantization_config, or without their scales, are refused naming the tensor.
    testing::temp_dir bad;
    fs::copy_file(fixture_dir("qwen3_moe_fp8_source") + "/config.json", bad.file("config.json"));
    fs::copy_file(fixture_dir("qwen3_moe_fp8") + "/model.safetensors", bad.file("model.safetensors"));
    msg = testing::error_of([&] { model_runner r(bad.str(), options("")); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("F8_E4M3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("quantization_config"), std::string::npos) << msg;
    testing::temp_dir noscale;
    fs::copy_file(fixture_dir("qwen3_moe_fp8") + "/config.json", noscale.file("config.json"));
    std::vector<tensor_to_write> tensors;
    const safetensors_checkpoint ck(fixture_dir("qwen3_moe_fp8"));
    for (const std::string& name : ck.names()) {
        if (name == "model.layers.0.self_attn.k_proj.weight_scale_inv") continue;
        const tensor_view t = ck.get(name);
        tensors.push_back({.name = name, .type = t.type, .shape = t.shape, .values = t.to_f32()});
    }
    write_safetensors(noscale.file("model.safetensors"), tensors);
    msg = testing::error_of([&] { model_runner r(noscale.str(), options("")); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("model.layers.0.self_attn.k_proj.weight_scale_inv"), std::string::npos) << msg;
}

// `--load-format dummy` with FP8: random BF16 weights quantized at load (the FP8 config's and --quantization's).
TEST(Fp8Checkpoint, DummyWeightsAreQuantized) {
    const model_config cfg = model_config::load(fixture_dir("deepseek_v3_fp8"));
    const expert_placement placement = expert_placement::initial(static_cast<int32_t>(cfg.num_moe_layers()),
                                                                 static_cast<int32_t>(cfg.num_experts), 0, 1);
    const model_weights w("", cfg, placement, 0, "dummy");
    EXPECT_EQ(w.layers()[1].moe.experts[0].gate.type, dtype::f8_e4m3);
    EXPECT_EQ(w.layers()[0].attn.o.type, dtype::f8_e4m3);
    EXPECT_EQ(w.layers()[1].moe.router.type, dtype::bf16);
    EXPECT_GT(w.quantized_bytes(), 0);
    runner_options o = options("fp8");
    o.load_format = "dummy";
    model_runner runner(fixture_dir("qwen3_moe_fp8_source"), o);
    step_driver driver(kBlockSize, 0);
    driver.add(0, {5, 6, 7}, 2);
    run_all(runner, driver);
    EXPECT_EQ(driver.seqs()[0].generated.size(), 2u);
}

// runner_options::bf16_activations: the CPU forward with its activations rounded to BF16 where the CUDA executor
// stores them (the CUDA FP8 tests' reference). On a BF16 model that moves the last logits by BF16 rounding, as the
// CUDA BF16 path's own distance from fp32 (0.8-1.9% on H100, tests/workers_cuda/cuda_reference_test.cpp). On an FP8
// model the same rounding moves them many times further: FP8 quantizes those BF16 values, and where a BF16 rounding
// crosses an e4m3 rounding boundary (2^-4 of the e4m3 step on average: one element in 16-64) the element moves by a
// whole e4m3 step (6-12% of its value) instead of 2^-9, so the activations' error grows ~10x per quantization (the
// measured ratio is printed; docs/fp8.md, "Reference and accuracy"). That is why the CUDA FP8 path is compared with
// this arithmetic, not with the fp32 one.
TEST(Fp8Bf16Activations, RoundLikeTheCudaPathAndFp8AmplifiesIt) {
    // The relative move of each prompt's last logits from `prompts`' (the fp32 run's) with BF16 activations.
    auto moves = [](const std::string& dir, const std::string& quantization, const std::vector<ref_prompt>& prompts) {
        runner_options o = options(quantization);
        o.bf16_activations = true;
        model_runner runner(dir, o);
        std::vector<double> out;
        for (size_t i = 0; i < prompts.size(); ++i) {
            step_driver driver(kBlockSize, 0);
            driver.add(i, prompts[i].token_ids, 1);
            run_all(runner, driver);
            out.push_back(relative_error(driver.seqs()[0].logits.at(0), prompts[i].last_logits));
        }
        return out;
    };
    // Each model's own fp32 CPU logits as the reference (the BF16 fixture's transformers logits are the same to
    // ~1e-6: tests/workers/hf_reference_test.cpp).
    auto fp32_logits = [](const std::string& dir, const std::string& quantization, std::vector<ref_prompt> prompts) {
        model_runner runner(dir, options(quantization));
        for (size_t i = 0; i < prompts.size(); ++i) {
            step_driver driver(kBlockSize, 0);
            driver.add(i, prompts[i].token_ids, 1);
            run_all(runner, driver);
            prompts[i].last_logits = driver.seqs()[0].logits.at(0);
        }
        return prompts;
    };
    const std::vector<ref_prompt> bf16_prompts =
        fp32_logits(fixture_dir("qwen3_moe"), "", load_reference(fixture_dir("qwen3_moe")));
    const std::vector<ref_prompt> fp8_prompts =
        fp32_logits(fixture_dir("qwen3_moe"), "fp8", load_reference(fixture_dir("qwen3_moe")));
    const std::vector<double> bf16_moves = moves(fixture_dir("qwen3_moe"), "", bf16_prompts);
    const std::vector<double> fp8_moves = moves(fixture_dir("qwen3_moe"), "fp8", fp8_prompts);
    double bf16_mean = 0, fp8_mean = 0;
    for (size_t i = 0; i < bf16_moves.size(); ++i) {
        EXPECT_GT(bf16_moves[i], 0) << "prompt " << i << ": BF16 storage changed nothing";
        EXPECT_LT(bf16_moves[i], 0.02) << "prompt " << i << ": beyond BF16 rounding";
        bf16_mean += bf16_moves[i] / static_cast<double>(bf16_moves.size());
        fp8_mean += fp8_moves[i] / static_cast<double>(fp8_moves.size());
    }
    std::printf(
        "[bf16 activations] qwen3_moe: last logits moved by %.4f (BF16 model), %.4f (FP8 model) on average: %.1fx\n",
        bf16_mean, fp8_mean, fp8_mean / bf16_mean);
    EXPECT_GT(fp8_mean, 3 * bf16_mean);
}

}  // namespace
}  // namespace zmoe
