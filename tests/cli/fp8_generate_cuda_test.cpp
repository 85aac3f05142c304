// `zmoe generate --device cuda` on block-scaled FP8 models end to end (real processes, one GPU): the FP8 fixtures
// start up and serve (the CUDA backend refused them before), their greedy tokens equal their reference's while its
// top-2 margin is at least 0.5 (tests/workers_cuda/cuda_fp8_test.cpp: the measured FP8 flips), and a BF16 source with
// --quantization fp8 gives the stored FP8 model's tokens exactly (the same weight bits through the same kernels). Label
// gpu.

#include <gtest/gtest.h>

#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;

namespace {

constexpr double kMinMargin = 0.5;  // tests/workers_cuda/cuda_fp8_test.cpp: measured FP8 flips

TEST(GenerateFp8Cuda, Fp8CheckpointsServeAndMatchTheirReference) {
    for (const std::string model : {"deepseek_v3_fp8"}) {  // qwen3_moe_fp8: head_dim 40, not a CUDA attention dim
        temp_dir dir;
        const auto out = generate_reference(model, {"--device", "cuda"}, dir, "fp8");
        const auto ref = read_json(kFixtures + "/models/" + model + "/reference.json");
        ASSERT_EQ(out.size(), ref["prompts"].size()) << model;
        size_t compared = 0;
        for (size_t i = 0; i < out.size(); ++i) {
            const auto& p = ref["prompts"][i];
            EXPECT_EQ(out[i]["finish_reason"], "length") << model << " prompt " << i;
            const auto got = out[i]["token_ids"].get<std::vector<int>>();
            const auto want = p["greedy"].get<std::vector<int>>();
            ASSERT_EQ(got.size(), want.size()) << model << " prompt " << i;
            for (size_t t = 0; t < want.size() && p["margins"][t].get<double>() >= kMinMargin; ++t, ++compared)
                ASSERT_EQ(got[t], want[t]) << model << " prompt " << i << " token " << t;
        }
        EXPECT_GT(compared, 0u) << model << ": no token above the margin to compare";
    }
}

TEST(GenerateFp8Cuda, QuantizationFlagOnTheBf16SourceGivesTheStoredFp8Tokens) {
    temp_dir dir;
    const auto stored = generate_reference("deepseek_v3_fp8", {"--device", "cuda"}, dir, "stored");
    const auto out =
        generate_reference("deepseek_v3_fp8_source", {"--device", "cuda", "--quantization", "fp8"}, dir, "quantized");
    ASSERT_EQ(out.size(), stored.size());
    for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i]["token_ids"], stored[i]["token_ids"]) << "prompt " << i;
}

}  // namespace
