// The CUDA executor samples with every parameter a request carries (top-k, top-p, min-p, the penalties, logit bias,
// min_tokens' banned stop ids, logprobs), exactly as the CPU sampler draws from the same logits: see
// tests/workers/sampling_params_check.hpp; and stop_token_ids through the scheduler (stop_token_ids_check.hpp).

#include <gtest/gtest.h>

#include <filesystem>
#include <tuple>

#include "cuda_test_util.hpp"
#include "messages/expert_placement.hpp"
#include "sampling_params_check.hpp"
#include "stop_token_ids_check.hpp"
#include "workers/cuda/cuda_step_executor.hpp"

namespace zmoe::cuda {
namespace {

using namespace zmoe::cuda::testing;
using zmoe::testing::params_case;

constexpr double kLogitTolerance = 0.04;  // BF16 activations: cuda_reference_test.cpp
constexpr double kMinGreedyMargin = 0.1;  // greedy tokens vs transformers: the near-tie rule of cuda_reference_test.cpp

class CudaSamplingParams : public ::testing::TestWithParam<std::tuple<std::string, params_case>> {};

TEST_P(CudaSamplingParams, ExecutorDrawsWhatTheCpuSamplerDraws) {
    const auto& [fixture, pc] = GetParam();
    const std::string dir = fixture_dir(fixture);
    ASSERT_TRUE(std::filesystem::exists(dir + "/config.json")) << "fixture " << dir << " is missing";
    const executor_options o = cuda_options(dir);
    const model_config& c = o.model;
    cuda_step_executor gpu(o, expert_placement::initial(c.num_moe_layers(), c.num_experts, 0, o.world_size()));
    zmoe::testing::check_sampling_params(gpu, load_reference(dir), pc, "cuda " + fixture, kBlockSize, kLogitTolerance);
}

// stop_token_ids: the engine core's scheduler ends a request at a stop id the GPU sampled, and min_tokens' ban of
// the stop ids holds on the GPU (stop_token_ids_check.hpp; the CPU runs the same check).
TEST(CudaStopTokenIds, EndTheRequestAtTheStopIdAndWaitForMinTokens) {
    for (const std::string fixture : {"qwen3_moe", "mixtral"}) {
        const std::string dir = fixture_dir(fixture);
        ASSERT_TRUE(std::filesystem::exists(dir + "/config.json")) << "fixture " << dir << " is missing";
        const executor_options o = cuda_options(dir);
        cuda_step_executor gpu(o, initial_placement(o));
        zmoe::testing::check_stop_token_ids(gpu, load_reference(dir), "cuda " + fixture, kBlockSize, kNumBlocks,
                                            kMinGreedyMargin);
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaSamplingParams,
                         ::testing::Combine(::testing::Values("qwen3_moe", "mixtral"),
                                            ::testing::ValuesIn(zmoe::testing::kSamplingCases)),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

}  // namespace
}  // namespace zmoe::cuda
