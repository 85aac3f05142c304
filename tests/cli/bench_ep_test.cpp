// `zmoe bench ep` on CPU ranks (threads exchanging in process) with a fixture model: the decode steps of 2 ranks, each
// beside its memory floor (FP8 weights give a smaller one), no exchange timing off CUDA; bad options are refused.
// (No timing is asserted.)

#include <gtest/gtest.h>

#include "tests/cli/e2e_util.hpp"

namespace zmoe::test {
namespace {

/// `zmoe bench ep --device cpu` on the DeepSeek-V3 fixture's config with dummy weights; its JSON.
nlohmann::json bench_ep_cpu(const temp_dir& dir, const std::string& tag, std::vector<std::string> extra) {
    std::vector<std::string> args = {"bench",
                                     "ep",
                                     "--device",
                                     "cpu",
                                     "--model",
                                     kFixtures + "/models/deepseek_v3",
                                     "--load-format",
                                     "dummy",
                                     "--workers",
                                     "2",
                                     "--batch",
                                     "3",
                                     "--context",
                                     "6",
                                     "--steps",
                                     "2",
                                     "--warmup",
                                     "1",
                                     "--skip-dbo",
                                     "--json",
                                     dir / (tag + ".json")};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run_zmoe(args), 0) << tag;
    return read_json(dir / (tag + ".json"));
}

TEST(BenchEp, CpuRanksDecodeBesideTheirFloor) {
    temp_dir dir;
    const nlohmann::json bf16 = bench_ep_cpu(dir, "bf16", {});
    const nlohmann::json fp8 = bench_ep_cpu(dir, "fp8", {"--quantization", "fp8", "--skip-single"});
    EXPECT_EQ(bf16.at("device"), "cpu");
    EXPECT_EQ(fp8.at("quantization"), "fp8");
    EXPECT_TRUE(bf16.at("exchanges").empty());  // the exchange timing is CUDA's
    EXPECT_FALSE(bf16.contains("exchange"));
    // 1 rank then 2 (DBO skipped); --skip-single leaves the 2-rank row alone.
    const auto& rows = bf16.at("steps");
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].at("gpus"), 1);
    EXPECT_EQ(rows[1].at("gpus"), 2);
    ASSERT_EQ(fp8.at("steps").size(), 1u);
    EXPECT_EQ(fp8.at("steps")[0].at("gpus"), 2);
    auto floor_bytes = [](const nlohmann::json& j, size_t row) {
        return j.at("steps")[row].at("floor_ms").get<double>() * 1e-3 *
               j.at("copy_bandwidth_bytes_per_s").get<double>();
    };
    for (const auto& r : rows) {
        EXPECT_EQ(r.at("tokens_per_gpu"), 3);
        EXPECT_EQ(r.at("dbo"), false);
        ASSERT_EQ(r.at("step_ms").size(), 2u);
        EXPECT_GT(r.at("floor_ms").get<double>(), 0);
        EXPECT_NEAR(r.at("floor_fraction").get<double>(),
                    r.at("floor_ms").get<double>() / r.at("median_step_ms").get<double>(), 1e-9);
    }
    // Two ranks each read the dense weights and half the touched experts: less than one rank reading all of them,
    // more than half of it.
    const double one = floor_bytes(bf16, 0), two = floor_bytes(bf16, 1);
    EXPECT_LT(two, one);
    EXPECT_GT(two, one / 2);
    // FP8 weights: about half the bytes of BF16 (the embedding-free floor keeps the BF16 LM head and norms).
    EXPECT_LT(floor_bytes(fp8, 0), 0.75 * two);
}

TEST(BenchEp, BadOptionsAreRefused) {
    const std::string model = kFixtures + "/models/deepseek_v3";
    auto ep = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = {"bench", "ep", "--model", model, "--load-format", "dummy", "--device", "cpu"};
        args.insert(args.end(), extra.begin(), extra.end());
        return run_zmoe(args);
    };
    EXPECT_NE(ep({"--workers", "1"}), 0);
    EXPECT_NE(ep({"--device", "gpu"}), 0);
    EXPECT_NE(ep({"--exchange-tokens", "128,0"}), 0);
    EXPECT_NE(ep({"--exchange-only", "--skip-exchange"}), 0);
}

}  // namespace
}  // namespace zmoe::test
