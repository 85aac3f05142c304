// The CUDA executor samples with every parameter a request carries (top-k, top-p, min-p, the penalties, logit bias,
// min_tokens' banned stop ids, logprobs), exactly as the CPU sampler draws from the same logits: see
// tests/workers/sampling_params_check.hpp.

#include <gtest/gtest.h>

#include <filesystem>
#include <tuple>

#include "cuda_test_util.hpp"
#include "messages/expert_placement.hpp"
#include "sampling_params_check.hpp"
#include "workers/cuda/cuda_step_executor.hpp"

namespace zmoe::cuda {
namespace {

using namespace zmoe::cuda::testing;
using zmoe::testing::params_case;

constexpr double kLogitTolerance = 0.04;  // BF16 activations: cuda_reference_test.cpp

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

INSTANTIATE_TEST_SUITE_P(Cases, CudaSamplingParams,
                         ::testing::Combine(::testing::Values("qwen3_moe", "mixtral"),
                                            ::testing::ValuesIn(zmoe::testing::kSamplingCases)),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

}  // namespace
}  // namespace zmoe::cuda
