// The CUDA worker backend on one GPU against Hugging Face transformers (fp32 reference logits and greedy tokens of
// the random-initialised fixtures in tests/fixtures/models): logits, greedy tokens, batching, chunked prefill,
// expert moves within the GPU, malformed steps, and OLMoE's clip_qkv path.
//
// Tolerances. Our forward keeps activations in BF16 (8 significant bits, relative rounding 2^-9 ~ 0.2%) through
// every layer while the reference is fp32, so last-position logits are compared by max |error| / max |reference|
// <= kLogitTolerance (4%, about ten BF16 roundings compounding over the fixtures' two layers; measured on H100:
// 0.8% (olmoe) to 1.9% (mixtral), printed per fixture). Greedy tokens must equal the reference's up to the first
// step whose reference top-2 margin is below kMinMargin = 0.1: the fixtures' logits reach |2.9|, so the worst
// measured relative error is ~0.05 absolute per logit, and a flip needs the top two to move ~margin/2 apart in
// opposite directions; decode steps also compound the BF16 KV cache. (At 0.05, qwen3_moe flipped one step whose
// reference margin is 0.084.) After the first such near-tie the continuations legitimately diverge.
// Runs of our own backend against each other (batched vs alone, chunked vs one-shot) differ only by GEMM
// algorithm choices for different row counts: logits within 1%, tokens equal until a self margin below 0.02.
// DeepSeek's routers pick 3-4 of 8-16 experts through group limits, with weights scaled by up to 2.5, so a
// routing choice that is a near-tie at BF16 precision moves the last logits far more than rounding does. The
// prompts in kBf16RoutingFlips are those where our BF16 forward strays beyond kLogitTolerance and transformers' own
// BF16 forward does too, by a routing decision it takes differently from its fp32 forward (measured with
// scripts/bf16_routing_check.py on an H200, transformers 5.17: deepseek_v3 prompt 5: 1 of 128 decisions, error
// 0.346 (ours 0.345); deepseek_v3_flat prompt 4: 7 of 82, 0.219 (ours 0.215); deepseek_v2 prompt 1: 1 of 4, 0.080
// (ours 0.075)); there the logits are held to kRoutingFlipTolerance only, and the greedy tokens are checked as
// everywhere. (transformers' BF16 also strays on deepseek_v3 prompts 1 and 2, 0.11 and 0.40, where ours stays
// within 1.1%: those stay under kLogitTolerance.)
// A chunked prefill routes like the one-shot prefill except at such near-ties too: deepseek_v2 prompt 5 (64 tokens)
// in 7-token chunks strays to 0.078 of the logit scale, and transformers' own BF16 forward flips 4 of its 128
// decisions against fp32. There the chunked run is compared with the one-shot run of the same executor's router
// traces (routing_divergence.hpp): it may stray up to kRoutingFlipTolerance only where its first routing difference
// from the one-shot run is a BF16 near-tie (CudaDeepSeekRouting below prints each layer's picture) and the one-shot
// run itself stays within kLogitTolerance.

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "base/error.hpp"
#include "cuda_test_util.hpp"
#include "messages/expert_placement.hpp"
#include "routing_divergence.hpp"
#include "workers/cuda/cuda_step_executor.hpp"
#include "workers/model_runner.hpp"

namespace zmoe::cuda {
namespace {

namespace fs = std::filesystem;
using namespace zmoe::cuda::testing;
using zmoe::testing::step_driver;

constexpr double kLogitTolerance = 0.04;
constexpr double kMinMargin = 0.1;
constexpr double kRoutingFlipTolerance = 0.5;
const std::map<std::string, std::set<size_t>> kBf16RoutingFlips{{"deepseek_v3", {5}},
                                                                {"deepseek_v3_alt", {5}},
                                                                {"deepseek_v3_flat", {4}},
                                                                {"deepseek_v2", {1}},
                                                                {"deepseek_v2_alt", {1}}};

std::unique_ptr<cuda_step_executor> make_executor(const std::string& dir) {
    const executor_options o = cuda_options(dir);
    return std::make_unique<cuda_step_executor>(o, initial_placement(o));
}

class CudaReference : public zmoe::testing::reference_fixture_test {};

TEST_P(CudaReference, LastLogitsMatchTransformers) {
    double worst = 0, worst_near_tie = 0;
    auto ex = make_executor(dir_);
    const bool traced = ex->config().router == router_kind::softmax_group_limited;
    std::vector<router_trace> one_shot(prompts_.size());
    std::vector<double> one_shot_err(prompts_.size(), 0);
    for (int64_t chunk : {int64_t{0}, int64_t{7}}) {
        for (size_t i = 0; i < prompts_.size(); ++i) {
            step_driver driver(kBlockSize, chunk);
            driver.add(i + 100 * chunk, prompts_[i].token_ids, 1);
            router_trace trace;
            if (traced) ex->set_router_trace(&trace);
            run_all(*ex, driver);
            ex->set_router_trace(nullptr);
            const double err = relative_error(driver.seqs()[0].logits.at(0), prompts_[i].last_logits);
            if (chunk == 0) {
                one_shot[i] = std::move(trace);
                one_shot_err[i] = err;
            }
            const auto flips = kBf16RoutingFlips.find(GetParam());
            bool near_tie = flips != kBf16RoutingFlips.end() && flips->second.count(i) > 0;
            if (!near_tie && traced && chunk != 0 && err > kLogitTolerance && one_shot_err[i] <= kLogitTolerance) {
                // The chunked run strays where the one-shot run does not: tolerated only past a BF16 near-tie.
                const routing_divergence d = find_routing_divergence(
                    ex->config(), one_shot[i], trace, static_cast<int32_t>(prompts_[i].token_ids.size()));
                near_tie = d.near_tie();
                std::printf(
                    "[cuda] %s prompt %zu chunk %ld: error %.4g; first routing difference from the one-shot run: %s",
                    GetParam().c_str(), i, static_cast<long>(chunk), err, d.found ? "" : "none\n");
                if (d.found)
                    std::printf(
                        "MoE layer %ld token %d, margin %.3g (one-shot) / %.3g, logit difference %.3g, near tie %d\n",
                        static_cast<long>(d.moe_layer), d.token, d.margin_a, d.margin_b, d.noise, int(near_tie));
            }
            (near_tie ? worst_near_tie : worst) = std::max(near_tie ? worst_near_tie : worst, err);
            EXPECT_LE(err, near_tie ? kRoutingFlipTolerance : kLogitTolerance)
                << GetParam() << " prompt " << i << " (" << prompts_[i].token_ids.size() << " tokens), chunk " << chunk;
        }
    }
    std::printf("[cuda] %s: max relative logit error vs transformers %.4g", GetParam().c_str(), worst);
    if (worst_near_tie > 0) std::printf(" (%.4g on the BF16 routing near-tie prompts)", worst_near_tie);
    std::printf("\n");
}

TEST_P(CudaReference, GreedyTokensMatchTransformers) {
    auto ex = make_executor(dir_);
    step_driver driver(kBlockSize, 0);
    for (size_t i = 0; i < prompts_.size(); ++i)
        driver.add(i, prompts_[i].token_ids, static_cast<int64_t>(prompts_[i].greedy.size()));
    run_all(*ex, driver);
    size_t total = 0;
    for (size_t i = 0; i < prompts_.size(); ++i) {
        const ref_prompt& p = prompts_[i];
        size_t compared = 0;
        for (size_t t = 0; t < p.greedy.size(); ++t) {
            if (p.margins[t] < kMinMargin) break;
            ASSERT_EQ(driver.seqs()[i].generated[t], p.greedy[t]) << GetParam() << " prompt " << i << " step " << t;
            ++compared;
        }
        total += compared;
    }
    EXPECT_GT(total, prompts_.size()) << "too few greedy steps above the margin to mean anything";
    std::printf("[cuda] %s: %zu greedy tokens equal to transformers\n", GetParam().c_str(), total);
}

TEST_P(CudaReference, BatchedMatchesAlone) {
    const int64_t n = 6;
    auto ex = make_executor(dir_);
    step_driver batched(kBlockSize, 7);
    for (size_t i = 0; i < prompts_.size(); ++i) batched.add(i, prompts_[i].token_ids, n);
    run_all(*ex, batched);
    for (size_t i = 0; i < prompts_.size(); ++i) {
        auto solo = make_executor(dir_);
        step_driver alone(kBlockSize, 7);
        alone.add(i, prompts_[i].token_ids, n);
        run_all(*solo, alone);
        expect_same_run(batched.seqs()[i], alone.seqs()[0], kSelfMargin, kSelfTolerance,
                        GetParam() + " prompt " + std::to_string(i));
    }
}

TEST_P(CudaReference, ChunkedPrefillMatchesOneShot) {
    std::vector<step_driver> runs;
    std::vector<router_trace> traces;
    bool traced = false;
    const std::vector<int32_t>& prompt = prompts_.back().token_ids;
    for (int64_t chunk : {int64_t{0}, int64_t{7}, int64_t{16}}) {
        auto ex = make_executor(dir_);
        traced = ex->config().router == router_kind::softmax_group_limited;
        step_driver& d = runs.emplace_back(kBlockSize, chunk);
        router_trace& trace = traces.emplace_back();
        if (traced) ex->set_router_trace(&trace);
        d.add(1, prompt, 4);
        run_all(*ex, d);
    }
    const model_config c = model_config::load(dir_);
    for (size_t r : {size_t{1}, size_t{2}}) {
        const std::string what = GetParam() + " chunk " + std::to_string(r == 1 ? 7 : 16);
        if (traced) {
            // A routing difference from the one-shot prefill must be a BF16 near-tie; past it the runs may differ
            // by a whole expert's output (first logits within kRoutingFlipTolerance, tokens not compared).
            const routing_divergence d =
                find_routing_divergence(c, traces[0], traces[r], static_cast<int32_t>(prompt.size()));
            ASSERT_TRUE(d.complete) << what << ": the router traces do not cover the prompt";
            if (d.found) {
                std::printf(
                    "[cuda] %s: routed differently from MoE layer %ld token %d (margin %.3g, logit "
                    "difference %.3g, inputs within %.3g)\n%s",
                    what.c_str(), static_cast<long>(d.moe_layer), d.token, d.margin_a, d.noise, d.input_error,
                    d.report.c_str());
                EXPECT_TRUE(d.near_tie()) << what << ": a routing difference that is not a BF16 near-tie";
                EXPECT_LE(relative_error(runs[r].seqs()[0].logits.at(0), runs[0].seqs()[0].logits.at(0)),
                          kRoutingFlipTolerance)
                    << what;
                continue;
            }
        }
        expect_same_run(runs[r].seqs()[0], runs[0].seqs()[0], kSelfMargin, kSelfTolerance, what);
    }
}

// The diagnostic behind the chunked-prefill tolerance: for every prompt of the DeepSeek-V2 fixtures (group-limited
// softmax routers), where the chunked prefill (7 and 16 tokens) first routes a token differently from the one-shot
// prefill, printed per MoE layer (router input and logit differences, tokens routed differently), beside the CPU
// backend's per-layer expert counts of the same prompt; every such first difference must be a BF16 near-tie.
TEST(CudaDeepSeekRouting, ChunkedPrefillDivergesOnlyAtBf16NearTies) {
    for (const std::string name : {"deepseek_v2", "deepseek_v2_alt"}) {
        const std::string dir = fixture_dir(name);
        const std::vector<ref_prompt> prompts = load_reference(dir);
        ASSERT_FALSE(prompts.empty()) << dir;
        const model_config c = model_config::load(dir);
        ASSERT_EQ(c.router, router_kind::softmax_group_limited) << name;
        runner_options ro;
        ro.num_kv_blocks = kNumBlocks;
        ro.block_size = kBlockSize;
        ro.num_threads = 2;
        model_runner cpu(dir, ro);
        auto ex = make_executor(dir);
        int diverged = 0;
        for (size_t i = 0; i < prompts.size(); ++i) {
            const auto n = static_cast<int32_t>(prompts[i].token_ids.size());
            auto counts = [&](auto& runner, int64_t chunk, router_trace* trace, uint64_t id) {
                step_driver driver(kBlockSize, chunk);
                driver.add(id, prompts[i].token_ids, 1);
                if (trace != nullptr) ex->set_router_trace(trace);
                std::vector<uint32_t> total(c.num_moe_layers() * c.num_experts, 0);
                while (!driver.all_done()) {
                    const step_request r = driver.next();
                    std::vector<std::vector<float>> logits;
                    const step_result res = runner.execute(r, &logits);
                    driver.record(r, res, logits);
                    for (size_t j = 0; j < total.size() && j < res.expert_counts.size(); ++j)
                        total[j] += res.expert_counts[j];
                }
                ex->set_router_trace(nullptr);
                return total;
            };
            router_trace whole;
            const std::vector<uint32_t> cuda_whole = counts(*ex, 0, &whole, 1000 + i);
            const std::vector<uint32_t> cpu_whole = counts(cpu, 0, nullptr, 2000 + i);
            for (int64_t chunk : {int64_t{7}, int64_t{16}}) {
                router_trace chunked;
                const std::vector<uint32_t> cuda_chunked = counts(*ex, chunk, &chunked, 3000 + 10 * i + chunk);
                const routing_divergence d = find_routing_divergence(c, whole, chunked, n);
                ASSERT_TRUE(d.complete) << name << " prompt " << i;
                if (!d.found) continue;
                ++diverged;
                std::printf(
                    "%s prompt %zu (%d tokens), chunk %ld: first routing difference at MoE layer %ld token %d "
                    "(%d tokens of that layer differ); decisive margin %.4g (one-shot) / %.4g (chunked) = %.3g BF16 "
                    "ulps at the logit scale %.3g, logit difference between the runs %.4g, router inputs within "
                    "%.4g; near tie: %s\n%s",
                    name.c_str(), i, n, static_cast<long>(chunk), static_cast<long>(d.moe_layer), d.token,
                    d.decisions_differing, d.margin_a, d.margin_b, d.margin_a / (d.logit_scale / 256), d.logit_scale,
                    d.noise, d.input_error, d.near_tie() ? "yes" : "NO", d.report.c_str());
                for (int64_t l = 0; l < c.num_moe_layers(); ++l) {
                    std::string line = "  MoE layer " + std::to_string(l) + " expert counts (CPU / CUDA one-shot / " +
                                       "CUDA chunked):";
                    for (int64_t e = 0; e < c.num_experts; ++e) {
                        const auto j = static_cast<size_t>(l * c.num_experts + e);
                        line += " " + std::to_string(cpu_whole[j]) + "/" + std::to_string(cuda_whole[j]) + "/" +
                                std::to_string(cuda_chunked[j]);
                    }
                    std::printf("%s\n", line.c_str());
                }
                EXPECT_TRUE(d.near_tie()) << name << " prompt " << i << " chunk " << chunk;
            }
        }
        std::printf("%s: %d of %zu prompt x chunk runs route differently from the one-shot prefill\n", name.c_str(),
                    diverged, 2 * prompts.size());
    }
}

// Reversing every layer's slots through apply_expert_moves (device copies on one GPU) changes which slot serves
// an expert, not what the model computes.
TEST_P(CudaReference, ExpertMovesWithinTheGpuKeepOutputs) {
    auto base = make_executor(dir_);
    auto moved = make_executor(dir_);
    const model_config& c = moved->config();
    std::vector<expert_slot_move> moves;
    for (uint32_t l = 0; l < c.num_moe_layers(); ++l)
        for (uint32_t s = 0; s < c.num_experts; ++s)
            moves.push_back(
                {l, s, static_cast<int32_t>(c.num_experts - 1 - s), 0, static_cast<uint32_t>(c.num_experts - 1 - s)});
    const uint64_t bytes = moved->apply_expert_moves(moves);
    EXPECT_EQ(bytes, static_cast<uint64_t>(moves.size()) * expert_bytes(c));
    EXPECT_EQ(moved->placement().slots(0, 0).front(), c.num_experts - 1);
    step_driver a(kBlockSize, 7), b(kBlockSize, 7);
    for (size_t i = 0; i < prompts_.size(); ++i) {
        a.add(i, prompts_[i].token_ids, 4);
        b.add(i, prompts_[i].token_ids, 4);
    }
    run_all(*base, a);
    run_all(*moved, b);
    for (size_t i = 0; i < prompts_.size(); ++i)
        expect_same_run(b.seqs()[i], a.seqs()[i], kSelfMargin, kSelfTolerance,
                        GetParam() + " prompt " + std::to_string(i));
}

TEST_P(CudaReference, MalformedStepsThrowAndTheExecutorCarriesOn) {
    auto ex = make_executor(dir_);
    auto step = [](std::vector<int32_t> tokens, std::vector<int32_t> blocks) {
        step_request r;
        scheduled_seq s;
        s.request_id = 7;
        s.token_ids = std::move(tokens);
        s.block_table = std::move(blocks);
        s.do_sample = true;
        r.seqs.push_back(s);
        return r;
    };
    const auto V = static_cast<int32_t>(ex->config().vocab_size);
    auto expect_invalid = [&](const step_request& r, const std::string& what) {
        try {
            ex->execute(r);
            ADD_FAILURE() << what << ": no error";
        } catch (const error& e) {
            EXPECT_EQ(e.code(), errc::invalid_argument) << what << ": " << e.what();
        }
    };
    expect_invalid(step({V}, {0}), "token outside the vocabulary");
    expect_invalid(step({kPlaceholderToken}, {0}), "placeholder with nothing sampled before");
    expect_invalid(step({1, 2}, {static_cast<int32_t>(kNumBlocks)}), "KV block out of range");
    expect_invalid(step(std::vector<int32_t>(kBlockSize + 1, 3), {0}), "block table too short");
    const step_result ok = ex->execute(step({1, 2, 3}, {0}));
    ASSERT_EQ(ok.tokens.size(), 1u);
    EXPECT_GE(ok.tokens[0].token_id, 0);
    EXPECT_LT(ok.tokens[0].token_id, V);
    uint32_t routed = 0;
    for (uint32_t n : ok.expert_counts) routed += n;
    EXPECT_EQ(routed, 3u * ex->config().num_experts_per_tok * ex->config().num_moe_layers());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaReference,
                         ::testing::Values("qwen3_moe", "qwen3_moe_alt", "qwen2_moe", "qwen2_moe_alt", "mixtral",
                                           "mixtral_alt", "olmoe", "olmoe_alt", "deepseek_v3", "deepseek_v3_alt",
                                           "deepseek_v3_flat", "deepseek_v2", "deepseek_v2_alt", "deepseek_v2_greedy"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// OLMoE's clip_qkv takes the unfused q/k norm + clamp path; a clip far above every activation must leave the
// transformers logits as they are.
TEST(CudaReferenceClipQkv, UnfusedNormPathMatchesTransformers) {
    const std::string src = fixture_dir("olmoe");
    const fs::path dir = fs::temp_directory_path() / ("zmoe_clip_qkv_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    for (const char* f : {"model.safetensors", "generation_config.json"})
        if (fs::exists(src + "/" + f)) fs::copy_file(src + "/" + f, dir / f, fs::copy_options::overwrite_existing);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(src + "/config.json"));
    cfg["clip_qkv"] = 1000.0;
    std::ofstream(dir / "config.json") << cfg.dump();
    const std::vector<ref_prompt> prompts = load_reference(src);
    auto ex = make_executor(dir.string());
    ASSERT_GT(ex->config().clip_qkv, 0.f);
    for (size_t i = 0; i < prompts.size(); ++i) {
        step_driver driver(kBlockSize, 7);
        driver.add(i, prompts[i].token_ids, 1);
        run_all(*ex, driver);
        EXPECT_LE(relative_error(driver.seqs()[0].logits.at(0), prompts[i].last_logits), kLogitTolerance)
            << "prompt " << i;
    }
    fs::remove_all(dir);
}

// DeepSeek variants the GPU path lacks are refused at load with the config.json field named: shapes the MLA kernels
// do not cover, by the executor. (FP8 checkpoints load: cuda_fp8_test.cpp.)
TEST(CudaDeepSeek, UnsupportedVariantsAreRefusedNamingTheField) {
    const std::string src = fixture_dir("deepseek_v3");
    const fs::path dir = fs::temp_directory_path() / ("zmoe_deepseek_refused_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const nlohmann::json base = nlohmann::json::parse(std::ifstream(src + "/config.json"));
    auto expect_refused = [&](const nlohmann::json& cfg, const std::string& field) {
        std::ofstream(dir / "config.json") << cfg.dump();
        try {
            auto ex = make_executor(dir.string());
            ADD_FAILURE() << field << ": no error";
        } catch (const error& e) {
            EXPECT_EQ(e.code(), errc::unsupported) << e.what();
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
        }
    };
    nlohmann::json rope = base;
    rope["qk_rope_head_dim"] = 12;
    expect_refused(rope, "qk_rope_head_dim");
    nlohmann::json rank = base;
    rank["kv_lora_rank"] = 36;
    expect_refused(rank, "kv_lora_rank");
    fs::remove_all(dir);
}

}  // namespace
}  // namespace zmoe::cuda
