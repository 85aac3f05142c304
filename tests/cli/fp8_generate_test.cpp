// `zmoe generate --device cpu` on block-scaled FP8 models end to end (real processes): the FP8 fixtures as stored,
// a BF16 source with --quantization fp8 (the flag travels through the engine configuration to every worker), and
// start-up refusals of quantizations zmoe does not implement, naming them.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;

namespace {

// Greedy tokens against the FP8 fixture's emulated reference (tests/workers/fp8_reference_test.cpp explains the
// rule): compared until a reference margin below 1e-3; a prompt may diverge only where the margin is below 0.5 (a
// discrete near-tie, an expert choice or an e4m3 rounding within fp32 noise), at most one prompt per fixture.
void expect_fp8_reference_tokens(const std::string& reference_fixture, const std::vector<nlohmann::json>& out) {
    const auto ref = read_json(kFixtures + "/models/" + reference_fixture + "/reference.json");
    ASSERT_EQ(out.size(), ref["prompts"].size());
    int diverged = 0;
    size_t compared = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        const auto& p = ref["prompts"][i];
        EXPECT_EQ(out[i]["finish_reason"], "length") << i;
        const auto got = out[i]["token_ids"].get<std::vector<int>>();
        const auto want = p["greedy"].get<std::vector<int>>();
        ASSERT_EQ(got.size(), want.size()) << i;
        for (size_t t = 0; t < comparable_prefix(p); ++t) {
            if (got[t] != want[t]) {
                EXPECT_LT(p["margins"][t].get<double>(), 0.5) << "prompt " << i << " differs at token " << t;
                ++diverged;
                break;
            }
            ++compared;
        }
    }
    EXPECT_LE(diverged, 1) << reference_fixture;
    EXPECT_GE(compared, out.size() * 5) << reference_fixture;
}

TEST(GenerateFp8, Fp8CheckpointsMatchTheirReference) {
    for (const std::string model : {"qwen3_moe_fp8", "deepseek_v3_fp8"}) {
        temp_dir dir;
        expect_fp8_reference_tokens(model, generate_reference(model, {"--device", "cpu"}, dir, "fp8"));
    }
}

// The BF16 source quantized at load: the FP8 fixture's tokens, with two workers (expert parallel) as well.
TEST(GenerateFp8, QuantizationFlagOnTheBf16SourceGivesTheFp8Tokens) {
    temp_dir dir;
    const auto stored = generate_reference("qwen3_moe_fp8", {}, dir, "stored");
    for (const std::string workers : {"1", "2"}) {
        // generate_reference reads the prompts from the fixture it runs: the source's are the same prompts.
        const auto out = generate_reference("qwen3_moe_fp8_source", {"--quantization", "fp8", "--workers", workers},
                                            dir, "q" + workers);
        ASSERT_EQ(out.size(), stored.size());
        for (size_t i = 0; i < out.size(); ++i)
            EXPECT_EQ(out[i]["token_ids"], stored[i]["token_ids"]) << "workers " << workers << " prompt " << i;
    }
}

// EPLB moves FP8 experts (codes with their block scales) between worker processes without changing a token, from
// an FP8 checkpoint (codes in the mapped file) and from a BF16 one quantized at load (owned codes).
TEST(GenerateFp8, EplbMovesFp8ExpertsWithoutChangingTokens) {
    for (const auto& [model, extra] : {std::pair<std::string, std::vector<std::string>>{"deepseek_v3_fp8", {}},
                                       {"qwen3_moe_fp8_source", {"--quantization", "fp8"}}}) {
        temp_dir dir;
        std::vector<std::string> base_flags = extra;
        base_flags.insert(base_flags.end(), {"--workers", "2"});
        const auto base = generate_reference(model, base_flags, dir, "plain");
        std::vector<std::string> eplb = base_flags;
        const std::string metrics_path = dir / "metrics.json";
        eplb.insert(eplb.end(), {"--enable-eplb", "--eplb-interval", "4", "--num-redundant-experts", "4",
                                 "--metrics-json", metrics_path});
        const auto out = generate_reference(model, eplb, dir, "eplb");
        ASSERT_EQ(out.size(), base.size()) << model;
        for (size_t i = 0; i < out.size(); ++i)
            EXPECT_EQ(out[i]["token_ids"], base[i]["token_ids"]) << model << " prompt " << i;
        const auto counters = read_json(metrics_path)["engine_core"]["counters"];
        ASSERT_TRUE(counters.contains("eplb_rebalances")) << model;
        EXPECT_GT(counters["eplb_rebalances"].get<double>(), 0) << model;
        EXPECT_GT(counters["eplb_bytes_moved"].get<double>(), 0) << model;
    }
}

// Runs zmoe with `args`, stderr into `err`; the exit status.
int run_capturing_stderr(const std::vector<std::string>& args, const std::string& err) {
    std::string cmd = "exec '" + kZmoe + "'";
    for (const std::string& a : args) cmd += " '" + a + "'";
    cmd += " 2> '" + err + "'";
    return run_bounded({"/bin/sh", "-c", cmd});
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

TEST(GenerateFp8, UnsupportedQuantizationFailsAtStartUpNamingIt) {
    temp_dir dir;
    const std::string model = dir / "awq";
    std::filesystem::create_directories(model);
    nlohmann::json cfg = read_json(kFixtures + "/models/qwen3_moe/config.json");
    cfg["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}};
    std::ofstream(model + "/config.json") << cfg.dump();
    std::filesystem::copy_file(kFixtures + "/models/qwen3_moe/model.safetensors", model + "/model.safetensors");
    write_reference_requests(read_json(kFixtures + "/models/qwen3_moe/reference.json"), dir / "in.jsonl");
    EXPECT_EQ(
        run_capturing_stderr({"generate", "--model", model, "--input", dir / "in.jsonl", "--output", dir / "out.jsonl"},
                             dir / "awq.err"),
        1);
    const std::string err = read_text(dir / "awq.err");
    EXPECT_NE(err.find("quant_method 'awq'"), std::string::npos) << err;

    EXPECT_EQ(run_capturing_stderr({"generate", "--model", kFixtures + "/models/qwen3_moe", "--quantization", "int4",
                                    "--input", dir / "in.jsonl", "--output", dir / "out2.jsonl"},
                                   dir / "int4.err"),
              1);
    const std::string err2 = read_text(dir / "int4.err");
    EXPECT_NE(err2.find("int4"), std::string::npos) << err2;
}

}  // namespace
