// The CPU forward pass against Hugging Face transformers on random-initialised tiny checkpoints
// (tests/fixtures/models/<name>/, written by scripts/make_model_fixtures.py): logits, greedy tokens, batching
// and expert parallelism.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "reference_fixture.hpp"
#include "step_driver.hpp"
#include "synthetic_model.hpp"
#include "workers/inproc_expert_comm.hpp"
#include "workers/model_runner.hpp"
#include "workers/safetensors.hpp"
#include "workers/safetensors_writer.hpp"

namespace zmoe {
namespace {

namespace fs = std::filesystem;
using testing::driven_seq;
using testing::step_driver;

constexpr int64_t kBlockSize = 16;
constexpr int64_t kNumBlocks = 256;
constexpr double kLogitTolerance = 1e-4;  // max abs error / max |reference|
constexpr double kMinMargin = 1e-3;       // greedy steps whose top-2 margin is below this are a coin toss

using testing::fixture_dir;
using testing::load_reference;
using testing::ref_prompt;

double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        max_err = std::max(max_err, std::abs(static_cast<double>(got[i]) - ref[i]));
        max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[i])));
    }
    return max_err / std::max(max_ref, 1e-30);
}

runner_options options(int num_threads = 2) {
    runner_options o;
    o.num_kv_blocks = kNumBlocks;
    o.block_size = kBlockSize;
    o.num_threads = num_threads;
    return o;
}

// Runs every sequence of `driver` to completion on `runner`.
void run_all(model_runner& runner, step_driver& driver) {
    while (!driver.all_done()) {
        const step_request r = driver.next();
        std::vector<std::vector<float>> logits;
        const step_result res = runner.execute(r, &logits);
        driver.record(r, res, logits);
    }
}

class HfReference : public zmoe::testing::reference_fixture_test {};

TEST_P(HfReference, LastLogitsMatchOneShotAndChunkedPrefill) {
    double worst = 0;
    for (int64_t chunk : {int64_t{0}, int64_t{7}}) {
        model_runner runner(dir_, options());
        for (size_t i = 0; i < prompts_.size(); ++i) {
            // One prompt per driver: BatchedMatchesAlone covers mixing them.
            step_driver driver(kBlockSize, chunk);
            driver.add(i, prompts_[i].token_ids, 1);
            run_all(runner, driver);
            const std::vector<float>& got = driver.seqs()[0].logits.at(0);
            ASSERT_EQ(got.size(), prompts_[i].last_logits.size());
            const double err = relative_error(got, prompts_[i].last_logits);
            worst = std::max(worst, err);
            EXPECT_LE(err, kLogitTolerance)
                << GetParam() << " prompt " << i << " (" << prompts_[i].token_ids.size() << " tokens), chunk " << chunk;
        }
    }
    std::printf("%s: worst relative logit error %.3g\n", GetParam().c_str(), worst);
}

TEST_P(HfReference, ChunkedPrefillIsBitwiseOneShot) {
    std::vector<std::vector<float>> by_chunk[2];
    int k = 0;
    for (int64_t chunk : {int64_t{0}, int64_t{7}}) {
        model_runner runner(dir_, options());
        step_driver driver(kBlockSize, chunk);
        const ref_prompt& p = prompts_.back();
        driver.add(1, p.token_ids, 3);
        run_all(runner, driver);
        by_chunk[k++] = driver.seqs()[0].logits;
    }
    EXPECT_EQ(by_chunk[0], by_chunk[1]);
}

TEST_P(HfReference, GreedyTokensMatch) {
    model_runner runner(dir_, options());
    step_driver driver(kBlockSize, 0);
    for (size_t i = 0; i < prompts_.size(); ++i)
        driver.add(i, prompts_[i].token_ids, static_cast<int64_t>(prompts_[i].greedy.size()));
    run_all(runner, driver);
    for (size_t i = 0; i < prompts_.size(); ++i) {
        const ref_prompt& p = prompts_[i];
        const driven_seq& s = driver.seqs()[i];
        size_t compared = 0;
        for (size_t t = 0; t < p.greedy.size(); ++t) {
            if (p.margins[t] < kMinMargin) {
                // A near-tie: the reference itself could go either way. At the first step the reference logits
                // are known, so the token must still be one of the tied ones.
                if (t == 0) {
                    const float best = *std::max_element(p.last_logits.begin(), p.last_logits.end());
                    EXPECT_GE(p.last_logits.at(static_cast<size_t>(s.generated[0])), best - kMinMargin)
                        << GetParam() << " prompt " << i << ": first token is not one of the near-tied best";
                    ++compared;
                }
                break;
            }
            ASSERT_EQ(s.generated[t], p.greedy[t]) << GetParam() << " prompt " << i << " step " << t;
            ++compared;
        }
        EXPECT_GT(compared, 0u) << GetParam() << " prompt " << i << ": every greedy step was a near-tie";
    }
}

TEST_P(HfReference, BatchedMatchesAlone) {
    const int64_t n = 6;
    step_driver batched(kBlockSize, 7);
    for (size_t i = 0; i < prompts_.size(); ++i) batched.add(i, prompts_[i].token_ids, n);
    model_runner runner(dir_, options(2));
    run_all(runner, batched);
    for (size_t i = 0; i < prompts_.size(); ++i) {
        step_driver alone(kBlockSize, 7);
        alone.add(i, prompts_[i].token_ids, n);
        model_runner solo(dir_, options(1));  // a different thread count too
        run_all(solo, alone);
        EXPECT_EQ(alone.seqs()[0].generated, batched.seqs()[i].generated) << "prompt " << i;
        EXPECT_EQ(alone.seqs()[0].logits, batched.seqs()[i].logits) << "prompt " << i << ": logits not bitwise equal";
    }
}

// Runs prompts spread over `world` in-process ranks (prompt i on rank i % active; ranks >= active run empty
// steps) and returns each rank's driver.
std::vector<step_driver> run_expert_parallel(const std::string& dir, const std::vector<ref_prompt>& prompts, int world,
                                             int active, int64_t max_new_tokens, const expert_placement* placement) {
    std::vector<step_driver> drivers;
    for (int r = 0; r < world; ++r) drivers.emplace_back(kBlockSize, 7);
    for (size_t i = 0; i < prompts.size(); ++i) drivers[i % active].add(i, prompts[i].token_ids, max_new_tokens);
    // Every rank runs the same number of steps (the longest schedule), empty ones included.
    int steps = 0;
    for (int r = 0; r < world; ++r) {
        step_driver probe = drivers[r];
        int s = 0;
        while (!probe.all_done()) {
            const step_request q = probe.next();
            step_result fake;
            for (const scheduled_seq& x : q.seqs)
                if (x.do_sample) fake.tokens.push_back({x.request_id, 0});
            probe.record(q, fake, std::vector<std::vector<float>>(fake.tokens.size()));
            ++s;
        }
        steps = std::max(steps, s);
    }
    inproc_expert_hub hub(world);
    std::vector<std::string> errors(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
            try {
                inproc_expert_comm comm(hub, r);
                runner_options o = options(1);
                o.rank = r;
                o.world_size = world;
                o.comm = &comm;
                o.placement = placement;
                model_runner runner(dir, o);
                for (int s = 0; s < steps; ++s) {
                    const step_request q = drivers[r].next();
                    std::vector<std::vector<float>> logits;
                    const step_result res = runner.execute(q, &logits);
                    drivers[r].record(q, res, logits);
                }
            } catch (const std::exception& e) {
                errors[r] = e.what();
                hub.abort();  // release the other ranks
            }
        });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
    return drivers;
}

// World sizes 2 and 4, each rank with its own (data-parallel) sequences, must give world 1's logits bitwise.
// In the 4-rank world rank 3 has no sequences and runs empty steps.
TEST_P(HfReference, ExpertParallelMatchesSingleRank) {
    const int64_t n = 4;
    step_driver single(kBlockSize, 7);
    for (size_t i = 0; i < prompts_.size(); ++i) single.add(i, prompts_[i].token_ids, n);
    {
        model_runner runner(dir_, options(1));
        run_all(runner, single);
    }
    for (int world : {2, 4}) {
        const int active = world == 4 ? 3 : world;
        std::vector<step_driver> drivers = run_expert_parallel(dir_, prompts_, world, active, n, nullptr);
        for (size_t i = 0; i < prompts_.size(); ++i) {
            const driven_seq& got = drivers[i % active].find(i);
            EXPECT_EQ(got.generated, single.seqs()[i].generated) << "world " << world << " prompt " << i;
            EXPECT_EQ(got.logits, single.seqs()[i].logits) << "world " << world << " prompt " << i;
        }
    }
}

// Redundant replicas and a shuffled slot order (as EPLB produces) change nothing either.
TEST_P(HfReference, ExpertParallelWithReplicasMatchesSingleRank) {
    const int64_t n = 3;
    step_driver single(kBlockSize, 7);
    for (size_t i = 0; i < prompts_.size(); ++i) single.add(i, prompts_[i].token_ids, n);
    model_runner one(dir_, options(1));
    run_all(one, single);
    const model_config& c = one.config();
    const expert_placement placement =
        testing::replicated_two_rank_placement(static_cast<int32_t>(c.num_experts), c.num_moe_layers());
    std::vector<step_driver> drivers = run_expert_parallel(dir_, prompts_, 2, 2, n, &placement);
    for (size_t i = 0; i < prompts_.size(); ++i) {
        const driven_seq& got = drivers[i % 2].find(i);
        EXPECT_EQ(got.logits, single.seqs()[i].logits) << "prompt " << i;
    }
}

// DeepSeek-V3 checkpoints carry the multi-token-prediction layer(s) (num_nextn_predict_layers) as
// model.layers.<num_hidden_layers>.*; they are not part of the next-token forward pass and must be skipped
// without changing a logit.
TEST(HfReferenceDeepseek, MtpLayerWeightsAreSkipped) {
    const std::string src = fixture_dir("deepseek_v3");
    testing::temp_dir dir;
    fs::copy_file(src + "/config.json", dir.str() + "/config.json");
    std::vector<tensor_to_write> tensors;
    {
        const safetensors_checkpoint ck(src);
        for (const std::string& name : ck.names()) {
            const tensor_view t = ck.get(name);
            tensors.push_back({.name = name, .type = t.type, .shape = t.shape, .values = t.to_f32()});
        }
    }
    const int64_t H = 64, V = 512;
    const std::string mtp = "model.layers.3.";  // num_hidden_layers = 3, num_nextn_predict_layers = 1
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        tensors.push_back({.name = mtp + name, .shape = shape, .values = std::vector<float>(n, 0.5f)});
    };
    add("embed_tokens.weight", {V, H});
    add("enorm.weight", {H});
    add("hnorm.weight", {H});
    add("eh_proj.weight", {H, 2 * H});
    add("shared_head.norm.weight", {H});
    add("shared_head.head.weight", {V, H});
    add("self_attn.kv_a_proj_with_mqa.weight", {40, H});
    add("mlp.gate.weight", {16, H});
    add("mlp.gate.e_score_correction_bias", {16});
    write_safetensors(dir.str() + "/model.safetensors", tensors);

    const std::vector<ref_prompt> prompts = load_reference(src);
    std::vector<std::vector<float>> logits[2];
    int k = 0;
    for (const std::string& d : {src, dir.str()}) {
        model_runner runner(d, options());
        step_driver driver(kBlockSize, 0);
        driver.add(0, prompts.at(3).token_ids, 3);
        run_all(runner, driver);
        logits[k++] = driver.seqs()[0].logits;
    }
    ASSERT_FALSE(logits[0].empty());
    EXPECT_EQ(logits[0], logits[1]);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfReference,
                         ::testing::Values("qwen3_moe", "qwen3_moe_alt", "qwen2_moe", "qwen2_moe_alt", "mixtral",
                                           "mixtral_alt", "olmoe", "olmoe_alt", "deepseek_v3", "deepseek_v3_alt",
                                           "deepseek_v3_flat", "deepseek_v2", "deepseek_v2_alt", "deepseek_v2_greedy"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace zmoe
