// Sampling parameters end to end through `zmoe generate` (JSONL in, frontend, engine core, CPU worker, JSONL out)
// on a transformers fixture: logprobs against a log-softmax of transformers' logits, and stop_token_ids,
// min_tokens and logit_bias taking effect. The rules themselves are unit-tested against direct formulas in
// tests/workers/sampler_test.cpp; here the point is that every field reaches the worker and comes back.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;

namespace {

const std::string kModel = "qwen3_moe";

std::vector<nlohmann::json> run_lines(const std::vector<nlohmann::json>& lines, const temp_dir& dir,
                                      const std::string& tag) {
    {
        std::ofstream in(dir / (tag + ".in.jsonl"));
        for (const auto& l : lines) in << l.dump() << "\n";
    }
    EXPECT_EQ(run_zmoe({"generate", "--model", kFixtures + "/models/" + kModel, "--input", dir / (tag + ".in.jsonl"),
                        "--output", dir / (tag + ".out.jsonl"), "--threads", "1"}),
              0);
    return read_jsonl(dir / (tag + ".out.jsonl"));
}

TEST(SamplingE2E, LogprobsEqualLogSoftmaxOfTheReferenceLogits) {
    temp_dir dir;
    const auto ref = read_json(kFixtures + "/models/" + kModel + "/reference.json");
    std::vector<nlohmann::json> lines;
    for (const auto& p : ref["prompts"])
        lines.push_back({{"prompt_token_ids", p["token_ids"]},
                         {"max_tokens", 2},
                         {"temperature", 0},
                         {"logprobs", 5},
                         {"ignore_eos", true}});
    const auto out = run_lines(lines, dir, "lp");
    ASSERT_EQ(out.size(), ref["prompts"].size());
    for (size_t i = 0; i < out.size(); ++i) {
        const auto logits = ref["prompts"][i]["last_logits"].get<std::vector<double>>();
        double m = *std::max_element(logits.begin(), logits.end()), z = 0;
        for (double l : logits) z += std::exp(l - m);
        const double lse = m + std::log(z);
        std::vector<int> order(logits.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
        ASSERT_EQ(out[i]["logprobs"].size(), 2u) << "one record per generated token";
        const auto& first = out[i]["logprobs"][0];
        const int tok = out[i]["token_ids"][0].get<int>();
        EXPECT_NEAR(first["logprob"].get<double>(), logits[tok] - lse, 1e-3) << "prompt " << i;
        ASSERT_EQ(first["top_ids"].size(), 5u);
        for (size_t j = 0; j < 5; ++j) {
            EXPECT_NEAR(first["top_logprobs"][j].get<double>(), logits[order[j]] - lse, 1e-3) << i << " rank " << j;
            const bool clear = (j == 0 || logits[order[j - 1]] - logits[order[j]] > 1e-3) &&
                               logits[order[j]] - logits[order[j + 1]] > 1e-3;
            if (clear) {
                EXPECT_EQ(first["top_ids"][j].get<int>(), order[j]) << "prompt " << i << " rank " << j;
            }
        }
    }
}

TEST(SamplingE2E, StopTokenIdsMinTokensAndLogitBiasTakeEffect) {
    temp_dir dir;
    const auto ref = read_json(kFixtures + "/models/" + kModel + "/reference.json");
    // A prompt whose greedy continuation has a token that first appears at position k >= 1, all steps up to k+1
    // clear of near-ties.
    size_t pi = 0, k = 0;
    for (; pi < ref["prompts"].size(); ++pi) {
        const auto g = ref["prompts"][pi]["greedy"].get<std::vector<int>>();
        const size_t n = comparable_prefix(ref["prompts"][pi]);
        for (k = 1; k + 1 < n; ++k)
            if (std::find(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(k), g[k]) == g.begin() + k) break;
        if (k + 1 < n) break;
    }
    ASSERT_LT(pi, ref["prompts"].size()) << "no usable prompt in the fixture";
    const auto& p = ref["prompts"][pi];
    const auto greedy = p["greedy"].get<std::vector<int>>();
    const int stop = greedy[k];
    const int avoided = greedy[0];
    const int forced = (greedy[0] + 7) % 100;
    const auto out = run_lines(
        {
            {{"prompt_token_ids", p["token_ids"]},
             {"max_tokens", 12},
             {"temperature", 0},
             {"ignore_eos", true},
             {"stop_token_ids", {stop}}},
            {{"prompt_token_ids", p["token_ids"]},
             {"max_tokens", 12},
             {"temperature", 0},
             {"ignore_eos", true},
             {"stop_token_ids", {stop}},
             {"min_tokens", 12}},
            {{"prompt_token_ids", p["token_ids"]},
             {"max_tokens", 4},
             {"temperature", 0.9},
             {"seed", 3},
             {"ignore_eos", true},
             {"logit_bias", {{std::to_string(forced), 100}}}},
            {{"prompt_token_ids", p["token_ids"]},
             {"max_tokens", 1},
             {"temperature", 0},
             {"ignore_eos", true},
             {"logit_bias", {{std::to_string(avoided), -100}}}},
        },
        dir, "params");
    ASSERT_EQ(out.size(), 4u);
    const std::vector<int> want(greedy.begin(), greedy.begin() + static_cast<std::ptrdiff_t>(k) + 1);
    EXPECT_EQ(out[0]["token_ids"].get<std::vector<int>>(), want) << "stops at the stop id, which is kept";
    EXPECT_EQ(out[0]["finish_reason"], "stop");
    const auto long_run = out[1]["token_ids"].get<std::vector<int>>();
    EXPECT_EQ(long_run.size(), 12u) << "min_tokens: the stop id is banned until 12 tokens";
    EXPECT_EQ(std::count(long_run.begin(), long_run.end(), stop), 0);
    EXPECT_EQ(out[1]["finish_reason"], "length");
    EXPECT_EQ(out[2]["token_ids"].get<std::vector<int>>(), std::vector<int>(4, forced));
    EXPECT_NE(out[3]["token_ids"][0].get<int>(), avoided);
}

}  // namespace
