// `zmoe bench prefill` and `zmoe bench mixed` on the CPU backend with a fixture model: a prompt runs in
// ceil(length / chunk) steps (a chunk past the prompt is one step, reported once), their times add up to the prefill
// time, and the floor follows --peak-tflops; with decodes running, the engine core's scheduler gives the long prompt
// what the decodes leave of each step's budget, every decode gets a token in every one of those steps, and the time to
// first token covers them. (No timing is asserted beyond that.)

#include <gtest/gtest.h>

#include <numeric>

#include "tests/cli/e2e_util.hpp"

namespace zmoe::test {
namespace {

int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

TEST(BenchPrefill, StepsPerChunkSize) {
    temp_dir dir;
    const std::string model = kFixtures + "/models/qwen3_moe";
    ASSERT_EQ(run_zmoe({"bench", "prefill", "--device", "cpu", "--model", model, "--lens", "40,100", "--chunks",
                        "16,64,128", "--reps", "1", "--peak-tflops", "0.001", "--json", dir / "out.json"}),
              0);
    const nlohmann::json j = read_json(dir / "out.json");
    const auto& rows = j.at("results");
    // 40: chunks 16 and 40 (64 and 128 are both one step); 100: 16, 64 and 100.
    const std::vector<std::pair<int32_t, int32_t>> want = {{40, 16}, {40, 40}, {100, 16}, {100, 64}, {100, 100}};
    ASSERT_EQ(rows.size(), want.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        const auto [len, chunk] = want[i];
        EXPECT_EQ(r.at("prompt_tokens").get<int32_t>(), len);
        EXPECT_EQ(r.at("chunk").get<int32_t>(), chunk);
        const auto steps = r.at("step_ms").get<std::vector<double>>();
        EXPECT_EQ(static_cast<int32_t>(steps.size()), ceil_div(len, chunk)) << len << " tokens in chunks of " << chunk;
        for (double ms : steps) EXPECT_GT(ms, 0);
        EXPECT_NEAR(r.at("median_prefill_ms").get<double>(), std::accumulate(steps.begin(), steps.end(), 0.0), 1e-9);
        EXPECT_GT(r.at("floor_ms").get<double>(), 0);
    }
    // The floor grows with the prompt and is the same for every chunk size.
    EXPECT_GT(rows[2].at("floor_ms").get<double>(), rows[0].at("floor_ms").get<double>());
    EXPECT_EQ(rows[0].at("floor_ms").get<double>(), rows[1].at("floor_ms").get<double>());
}

TEST(BenchMixed, LongPromptBesideDecodes) {
    temp_dir dir;
    const std::string model = kFixtures + "/models/qwen3_moe";
    const int32_t decodes = 3, len = 50;
    ASSERT_EQ(run_zmoe({"bench", "mixed", "--device", "cpu", "--model", model, "--decodes", std::to_string(decodes),
                        "--decode-context", "8", "--lens", std::to_string(len), "--chunks", "16,64", "--steady-steps",
                        "2", "--json", dir / "out.json"}),
              0);
    const nlohmann::json j = read_json(dir / "out.json");
    const auto& rows = j.at("results");
    ASSERT_EQ(rows.size(), 2u);
    const int32_t chunks[] = {16, 64};
    for (size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        EXPECT_EQ(r.at("max_num_batched_tokens").get<int32_t>(), chunks[i]);
        const int32_t steps = r.at("prefill_steps").get<int32_t>();
        // Decodes go first: the prompt gets chunk - decodes tokens a step.
        EXPECT_EQ(steps, ceil_div(len, chunks[i] - decodes));
        const auto itl = r.at("itl_ms").get<std::vector<double>>();
        EXPECT_EQ(static_cast<int32_t>(itl.size()), steps) << "a decode token in every step of the prefill";
        const double sum = std::accumulate(itl.begin(), itl.end(), 0.0);
        EXPECT_GE(r.at("ttft_ms").get<double>(), 0.99 * sum);
        EXPECT_LE(r.at("itl_p50_ms").get<double>(), r.at("itl_max_ms").get<double>());
        EXPECT_GT(r.at("steady_decode_step_ms").get<double>(), 0);
    }
}

TEST(BenchMixed, RefusesChunksNotAboveTheDecodes) {
    EXPECT_NE(run_zmoe({"bench", "mixed", "--device", "cpu", "--model", kFixtures + "/models/qwen3_moe", "--decodes",
                        "8", "--chunks", "8"}),
              0);
}

}  // namespace
}  // namespace zmoe::test
