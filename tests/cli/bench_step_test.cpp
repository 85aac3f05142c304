// `zmoe bench step` on the CPU backend with a fixture model: its JSON has one row per batch size in order, the
// step times it measured, the experts the steps touched and a floor computed from bytes and the measured copy
// bandwidth; dummy weights run on the CPU from config.json alone; bad options are refused. (No timing is asserted.)

#include <gtest/gtest.h>

#include "tests/cli/e2e_util.hpp"

namespace zmoe::test {
namespace {

TEST(BenchStep, CpuFixtureTableAndJson) {
    temp_dir dir;
    const std::string model = kFixtures + "/models/qwen3_moe";
    ASSERT_EQ(run_zmoe({"bench", "step", "--device", "cpu", "--model", model, "--batch-sizes", "1,3", "--context", "5",
                        "--steps", "2", "--warmup", "1", "--json", dir / "out.json"}),
              0);
    const nlohmann::json j = read_json(dir / "out.json");
    const nlohmann::json cfg = read_json(model + "/config.json");
    const int64_t top_k = cfg.at("num_experts_per_tok").get<int64_t>();
    const int64_t experts = cfg.value("num_experts", cfg.value("num_local_experts", int64_t{0}));
    ASSERT_GT(experts, 0);
    EXPECT_EQ(j.at("device"), "cpu");
    EXPECT_EQ(j.at("load_format"), "auto");
    const double bandwidth = j.at("copy_bandwidth_bytes_per_s").get<double>();
    EXPECT_GT(bandwidth, 0);
    const double dense = j.at("dense_weight_bytes_per_step").get<double>();
    const double expert = j.at("expert_bytes").get<double>();
    EXPECT_GT(dense, 0);
    EXPECT_EQ(expert, 3.0 * cfg.at("moe_intermediate_size").get<double>() * cfg.at("hidden_size").get<double>() * 2);
    const auto& rows = j.at("results");
    ASSERT_EQ(rows.size(), 2u);
    int expected_batch[] = {1, 3};
    for (size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        EXPECT_EQ(r.at("batch").get<int>(), expected_batch[i]);
        ASSERT_EQ(r.at("step_ms").size(), 2u);
        for (const auto& ms : r.at("step_ms")) EXPECT_GT(ms.get<double>(), 0);
        const double touched = r.at("experts_touched_per_layer").get<double>();
        // One token touches exactly top_k distinct experts per layer; three touch between top_k and all of them.
        if (expected_batch[i] == 1) {
            EXPECT_EQ(touched, static_cast<double>(top_k));
        }
        EXPECT_GE(touched, static_cast<double>(top_k));
        EXPECT_LE(touched, static_cast<double>(experts));
        const double floor_bytes = r.at("floor_bytes").get<double>();
        EXPECT_GE(floor_bytes, dense + touched * expert);
        EXPECT_NEAR(r.at("floor_ms").get<double>(), floor_bytes / bandwidth * 1e3, 1e-9 * floor_bytes);
        EXPECT_NEAR(r.at("output_tok_per_s").get<double>(),
                    expected_batch[i] / r.at("median_step_ms").get<double>() * 1e3,
                    1e-6 * r.at("output_tok_per_s").get<double>());
    }
}

TEST(BenchStep, CpuDummyWeightsFromConfigAlone) {
    temp_dir dir;
    std::filesystem::copy_file(kFixtures + "/models/qwen3_moe/config.json", dir / "config.json");  // no weights
    ASSERT_EQ(
        run_zmoe({"bench", "step", "--device", "cpu", "--model", dir.path.string(), "--load-format", "dummy",
                  "--batch-sizes", "2", "--context", "4", "--steps", "1", "--warmup", "0", "--json", dir / "out.json"}),
        0);
    const nlohmann::json j = read_json(dir / "out.json");
    EXPECT_EQ(j.at("load_format"), "dummy");
    ASSERT_EQ(j.at("results").size(), 1u);
    EXPECT_EQ(j.at("results")[0].at("batch"), 2);
}

TEST(BenchStep, BadOptionsAreRefused) {
    const std::string model = kFixtures + "/models/qwen3_moe";
    EXPECT_NE(run_zmoe({"bench", "step", "--device", "cpu", "--model", model, "--batch-sizes", "0"}), 0);
    EXPECT_NE(run_zmoe({"bench", "step", "--device", "cpu", "--model", model, "--steps", "0"}), 0);
    EXPECT_NE(run_zmoe({"bench", "step", "--device", "cpu", "--model", model, "--load-format", "pt", "--batch-sizes",
                        "1", "--steps", "1"}),
              0);
}

}  // namespace
}  // namespace zmoe::test
