// Dual-batch overlap end to end: `zmoe generate` over 4 CPU worker processes (ZeroMQ all-to-all between them), with
// every step forced into two micro-batches (thresholds 1), gives the tokens of the same run without DBO; chunked
// prefill (a token budget below the longest prompts) is in the mix, and some ranks run empty steps.

#include <gtest/gtest.h>

#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;

namespace {

/// generate_reference over 4 CPU workers with a 16-token budget (chunked prefill), metrics in TAG.metrics.json.
std::vector<nlohmann::json> generate(const std::string& model, std::vector<std::string> extra, const temp_dir& dir,
                                     const std::string& tag) {
    const std::vector<std::string> layout = {
        "--workers", "4", "--max-num-batched-tokens", "16", "--metrics-json", dir / (tag + ".metrics.json")};
    extra.insert(extra.begin(), layout.begin(), layout.end());
    return generate_reference(model, extra, dir, tag);
}

double counter(const temp_dir& dir, const std::string& tag, const std::string& name) {
    const auto counters = read_json(dir / (tag + ".metrics.json"))["engine_core"]["counters"];
    return counters.contains(name) ? counters[name].get<double>() : 0.0;
}

// (model, scheduling): async scheduling feeds placeholders into split steps; synchronous scheduling fixes the
// steps' composition.
class DualBatchOverlap : public ::testing::TestWithParam<std::pair<std::string, bool>> {};

TEST_P(DualBatchOverlap, ForcedOnGivesTheTokensOfOff) {
    const std::string model = GetParam().first;
    const std::vector<std::string> sched =
        GetParam().second ? std::vector<std::string>{} : std::vector<std::string>{"--no-async"};
    const auto ref = read_json(kFixtures + "/models/" + model + "/reference.json");
    size_t longest = 0;
    for (const auto& p : ref["prompts"]) longest = std::max(longest, p["token_ids"].size());
    ASSERT_GT(longest, 16u) << "the fixture's prompts no longer exercise chunked prefill";

    temp_dir dir;
    const auto off = generate(model, sched, dir, "off");
    std::vector<std::string> dbo = {"--enable-dbo", "--dbo-decode-token-threshold", "1",
                                    "--dbo-prefill-token-threshold", "1"};
    dbo.insert(dbo.end(), sched.begin(), sched.end());
    const auto on = generate(model, dbo, dir, "on");
    ASSERT_EQ(on.size(), off.size());
    ASSERT_EQ(off.size(), ref["prompts"].size());
    for (size_t i = 0; i < on.size(); ++i) {
        EXPECT_FALSE(off[i]["token_ids"].empty()) << i;
        EXPECT_EQ(on[i]["token_ids"], off[i]["token_ids"]) << model << " prompt " << i;
    }
    EXPECT_EQ(counter(dir, "off", "dbo_steps"), 0.0);
    // Thresholds of 1: every scheduled step runs as two micro-batches.
    EXPECT_GT(counter(dir, "on", "dbo_steps"), 0.0);
    EXPECT_EQ(counter(dir, "on", "dbo_steps"), counter(dir, "on", "steps"));
}

// qwen2_moe: a sigmoid-gated shared expert; deepseek_v3: MLA, grouped routing, a dense first layer.
INSTANTIATE_TEST_SUITE_P(Fixtures, DualBatchOverlap,
                         ::testing::Values(std::make_pair(std::string("qwen2_moe"), true),
                                           std::make_pair(std::string("deepseek_v3"), false)),
                         [](const auto& info) { return info.param.first + (info.param.second ? "_async" : "_sync"); });

}  // namespace
