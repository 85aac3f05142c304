// `zmoe generate` end to end: real processes (engine core, workers, frontend) on private ipc endpoints, against
// the transformers reference fixtures.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;

namespace {

void expect_reference_tokens(const std::string& model, const std::vector<nlohmann::json>& out) {
    const auto ref = read_json(kFixtures + "/models/" + model + "/reference.json");
    ASSERT_EQ(out.size(), ref["prompts"].size()) << model;
    for (size_t i = 0; i < out.size(); ++i) {
        const auto& p = ref["prompts"][i];
        EXPECT_EQ(out[i]["index"].get<size_t>(), i);
        EXPECT_EQ(out[i]["finish_reason"], "length") << model << " prompt " << i;
        const auto got = out[i]["token_ids"].get<std::vector<int>>();
        const auto want = p["greedy"].get<std::vector<int>>();
        ASSERT_EQ(got.size(), want.size()) << model << " prompt " << i;
        const size_t n = comparable_prefix(p);
        EXPECT_GE(n, 1u) << model << " prompt " << i << ": reference has a near-tie at its first step";
        for (size_t t = 0; t < n; ++t)
            ASSERT_EQ(got[t], want[t]) << model << " prompt " << i << " (length " << p["token_ids"].size()
                                       << ") differs at generated token " << t;
    }
}

class GenerateMatchesTransformers : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateMatchesTransformers, GreedyTokens) {
    temp_dir dir;
    expect_reference_tokens(GetParam(), generate_reference(GetParam(), {}, dir, "one"));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GenerateMatchesTransformers,
                         ::testing::Values("qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "qwen3_moe_alt", "mixtral_alt",
                                           "deepseek_v3", "deepseek_v3_flat", "deepseek_v2"),
                         [](const auto& info) { return info.param; });

TEST(Generate, ExpertParallelAndSyncSchedulingGiveTheSameTokens) {
    temp_dir dir;
    const auto one = generate_reference("qwen3_moe", {}, dir, "w1");
    expect_reference_tokens("qwen3_moe", one);
    for (const auto& [tag, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"w2", {"--workers", "2"}}, {"w4", {"--workers", "4"}}, {"w2sync", {"--workers", "2", "--no-async"}}}) {
        const auto out = generate_reference("qwen3_moe", extra, dir, tag);
        ASSERT_EQ(out.size(), one.size()) << tag;
        for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i]["token_ids"], one[i]["token_ids"]) << tag << " " << i;
    }
}

// Sampled (not greedy) requests with their own seeds, penalties (whose token history crosses the async
// placeholder) and chunked prefill: async scheduling, synchronous scheduling and one request at a time give the same
// tokens. Requests without a seed are another matter: the frontend draws one per request, so their tokens differ
// from run to run by design (docs/sampling.md).
TEST(Generate, SeededSamplingGivesTheSameTokensAsyncSyncAndAlone) {
    temp_dir dir;
    const auto ref = read_json(kFixtures + "/models/qwen3_moe/reference.json");
    {
        std::ofstream out(dir / "seeded.in.jsonl");
        uint64_t seed = 7;
        for (const auto& p : ref["prompts"]) {
            nlohmann::json j = {
                {"prompt_token_ids", p["token_ids"]}, {"max_tokens", 12}, {"temperature", 0.9}, {"top_p", 0.95},
                {"repetition_penalty", 1.2},          {"seed", seed++},   {"ignore_eos", true}};
            out << j.dump() << "\n";
        }
    }
    auto run = [&](const std::string& tag, const std::vector<std::string>& extra) {
        std::vector<std::string> args = {"generate",
                                         "--model",
                                         kFixtures + "/models/qwen3_moe",
                                         "--input",
                                         dir / "seeded.in.jsonl",
                                         "--output",
                                         dir / (tag + ".out.jsonl"),
                                         "--threads",
                                         "1",
                                         "--max-num-batched-tokens",
                                         "16"};
        args.insert(args.end(), extra.begin(), extra.end());
        EXPECT_EQ(run_zmoe(args), 0) << tag;
        return read_jsonl(dir / (tag + ".out.jsonl"));
    };
    const auto async = run("async", {});
    const auto sync = run("sync", {"--no-async"});
    const auto alone = run("alone", {"--max-num-seqs", "1"});
    ASSERT_EQ(async.size(), ref["prompts"].size());
    ASSERT_EQ(sync.size(), async.size());
    ASSERT_EQ(alone.size(), async.size());
    for (size_t i = 0; i < async.size(); ++i) {
        EXPECT_EQ(async[i]["token_ids"].size(), 12u) << i;
        EXPECT_EQ(sync[i]["token_ids"], async[i]["token_ids"]) << "prompt " << i;
        EXPECT_EQ(alone[i]["token_ids"], async[i]["token_ids"]) << "prompt " << i;
    }
}

// EPLB with the switch at the next step (0) and with the transfer staged 3 steps ahead: the tokens stay the
// fixed placement's, and the step trace shows every rebalance staged before one step and switched 3 steps later.
TEST(Generate, EplbRebalancesWithoutChangingTokens) {
    temp_dir dir;
    const auto base = generate_reference("olmoe", {"--workers", "4"}, dir, "plain");
    for (const std::string stage_steps : {"0", "3"}) {
        const std::string metrics_path = dir / ("metrics" + stage_steps + ".json");
        const auto out = generate_reference(
            "olmoe",
            {"--workers", "4", "--enable-eplb", "--eplb-interval", "4", "--num-redundant-experts", "4",
             "--eplb-stage-steps", stage_steps, "--trace-steps", "--metrics-json", metrics_path},
            dir, "eplb" + stage_steps);
        ASSERT_EQ(out.size(), base.size());
        for (size_t i = 0; i < out.size(); ++i)
            EXPECT_EQ(out[i]["token_ids"], base[i]["token_ids"]) << "stage steps " << stage_steps << ", " << i;
        const auto metrics = read_json(metrics_path);
        const auto& counters = metrics["engine_core"]["counters"];
        ASSERT_TRUE(counters.contains("eplb_rebalances")) << metrics.dump();
        EXPECT_GT(counters["eplb_rebalances"].get<double>(), 0);
        EXPECT_GT(counters["eplb_bytes_moved"].get<double>(), 0);
        // The trace: one record per step, in order; each switched rebalance staged stage_steps steps earlier.
        const auto& steps = metrics["steps"];
        ASSERT_EQ(steps.size(), static_cast<size_t>(counters["steps"].get<double>()));
        std::map<int, uint64_t> staged_at, switched_at;
        for (size_t i = 0; i < steps.size(); ++i) {
            EXPECT_EQ(steps[i]["step"].get<uint64_t>(), i);
            EXPECT_GT(steps[i]["tokens"].get<int64_t>(), 0);
            std::istringstream events(steps[i].value("eplb", std::string()));
            std::string what;
            int id = 0;
            while (events >> what >> id) (what == "stage" ? staged_at : switched_at)[id] = i;
        }
        EXPECT_EQ(switched_at.size(), static_cast<size_t>(counters["eplb_rebalances"].get<double>()));
        for (const auto& [id, at] : switched_at) {
            ASSERT_TRUE(staged_at.count(id)) << id;
            EXPECT_EQ(at - staged_at[id], std::stoull(stage_steps)) << "rebalance " << id;
        }
    }
}

// DeepSeek-V3 (MLA, grouped sigmoid routing, a shared expert, a dense first layer) over 1, 2 and 4 worker
// processes, and with EPLB moving experts: always the 1-worker tokens.
TEST(Generate, DeepseekExpertParallelAndEplbGiveTheOneWorkerTokens) {
    temp_dir dir;
    const auto one = generate_reference("deepseek_v3", {}, dir, "w1");
    expect_reference_tokens("deepseek_v3", one);
    for (const auto& [tag, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"w2", {"--workers", "2"}},
             {"w4", {"--workers", "4"}},
             {"eplb",
              {"--workers", "4", "--enable-eplb", "--eplb-interval", "4", "--num-redundant-experts", "4",
               "--metrics-json", dir / "metrics.json"}}}) {
        const auto out = generate_reference("deepseek_v3", extra, dir, tag);
        ASSERT_EQ(out.size(), one.size()) << tag;
        for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i]["token_ids"], one[i]["token_ids"]) << tag << " " << i;
    }
    const auto counters = read_json(dir / "metrics.json")["engine_core"]["counters"];
    ASSERT_TRUE(counters.contains("eplb_rebalances"));
    EXPECT_GT(counters["eplb_rebalances"].get<double>(), 0);
}

TEST(Generate, TextPromptsAndBadInput) {
    temp_dir dir;
    // The demo checkpoint pairs a random model with the real Qwen3 tokenizer.
    ASSERT_EQ(run_zmoe({"make-demo", "--out", dir / "demo", "--tokenizer",
                        std::string(ZMOE_SOURCE_DIR) + "/third_party/tokenizers/qwen3"}),
              0);
    {
        std::ofstream in(dir / "in.jsonl");
        in << R"({"prompt": "Hello, world!", "max_tokens": 8, "ignore_eos": true})"
           << "\n";
        in << R"({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0.8, "seed": 7, "ignore_eos": true})"
           << "\n";
    }
    ASSERT_EQ(run_zmoe({"generate", "--model", dir / "demo", "--input", dir / "in.jsonl", "--output", dir / "out.jsonl",
                        "--threads", "1"}),
              0);
    const auto out = read_jsonl(dir / "out.jsonl");
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0]["token_ids"].size(), 8u);
    EXPECT_EQ(out[1]["token_ids"].size(), 4u);
    EXPECT_FALSE(out[0]["text"].get<std::string>().empty());
    // Same seed, same output.
    ASSERT_EQ(run_zmoe({"generate", "--model", dir / "demo", "--input", dir / "in.jsonl", "--output",
                        dir / "out2.jsonl", "--threads", "1"}),
              0);
    EXPECT_EQ(read_jsonl(dir / "out2.jsonl")[1]["token_ids"], out[1]["token_ids"]);

    // A malformed input line is reported with its number and nothing runs.
    {
        std::ofstream in(dir / "bad.jsonl");
        in << R"({"prompt_token_ids": [1, 2], "max_tokens": 2})"
           << "\n"
           << R"({"max_tokens": 2})"
           << "\n";
    }
    EXPECT_EQ(run_zmoe({"generate", "--model", dir / "demo", "--input", dir / "bad.jsonl", "--output",
                        dir / "bad.out.jsonl"}),
              1);
    // A missing checkpoint fails cleanly.
    EXPECT_EQ(
        run_zmoe({"generate", "--model", dir / "nowhere", "--input", dir / "in.jsonl", "--output", dir / "x.jsonl"}),
        1);
}

}  // namespace
