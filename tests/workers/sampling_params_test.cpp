// The CPU model runner samples with every parameter a request carries, as the sampler's reference draws from the
// same logits, its penalty history rebuilt independently: see sampling_params_check.hpp (the CUDA executor runs
// the same check in tests/workers_cuda/cuda_sampling_params_test.cpp). stop_token_ids too, through the scheduler.

#include <gtest/gtest.h>

#include <filesystem>
#include <tuple>

#include "sampling_params_check.hpp"
#include "stop_token_ids_check.hpp"
#include "workers/model_runner.hpp"

namespace zmoe::testing {
namespace {

constexpr double kLogitTolerance = 1e-4;  // fp32: hf_reference_test.cpp

class CpuSamplingParams : public ::testing::TestWithParam<std::tuple<std::string, params_case>> {};

TEST_P(CpuSamplingParams, RunnerDrawsWhatTheSamplerReferenceDraws) {
    const auto& [fixture, pc] = GetParam();
    const std::string dir = fixture_dir(fixture);
    ASSERT_TRUE(std::filesystem::exists(dir + "/config.json")) << "fixture " << dir << " is missing";
    runner_options ro;
    ro.num_kv_blocks = 256;
    ro.block_size = 16;
    ro.num_threads = 2;
    model_runner cpu(dir, ro);
    check_sampling_params(cpu, load_reference(dir), pc, "cpu " + fixture, ro.block_size, kLogitTolerance);
}

// stop_token_ids: applied by the engine core's scheduler to what the runner samples (stop_token_ids_check.hpp).
TEST(CpuStopTokenIds, EndTheRequestAtTheStopIdAndWaitForMinTokens) {
    for (const std::string fixture : {"qwen3_moe", "mixtral"}) {
        const std::string dir = fixture_dir(fixture);
        ASSERT_TRUE(std::filesystem::exists(dir + "/config.json")) << "fixture " << dir << " is missing";
        runner_options ro;
        ro.num_kv_blocks = 256;
        ro.block_size = 16;
        ro.num_threads = 2;
        model_runner cpu(dir, ro);
        check_stop_token_ids(cpu, load_reference(dir), "cpu " + fixture, 16, 256, /*min_margin=*/1e-3);
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuSamplingParams,
                         ::testing::Combine(::testing::Values("qwen3_moe", "mixtral"),
                                            ::testing::ValuesIn(kSamplingCases)),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

}  // namespace
}  // namespace zmoe::testing
