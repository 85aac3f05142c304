// The CPU model runner samples with every parameter a request carries, as the sampler's reference draws from the
// same logits, its penalty history rebuilt independently: see sampling_params_check.hpp (the CUDA executor runs
// the same check in tests/workers_cuda/cuda_sampling_params_test.cpp). stop_token_ids too, through the scheduler.

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <tuple>

#include "sampling_params_check.hpp"
#include "stop_token_ids_check.hpp"
#include "workers/model_runner.hpp"

namespace zmoe::testing {
namespace {

constexpr double kLogitTolerance = 1e-4;  // fp32: hf_reference_test.cpp

/// The CPU model runner on a fixture, as both checks run it.
struct fixture_runner {
    std::string dir;
    runner_options options;
    std::unique_ptr<model_runner> runner;
    explicit fixture_runner(const std::string& fixture) : dir(fixture_dir(fixture)) {
        EXPECT_TRUE(std::filesystem::exists(dir + "/config.json")) << "fixture " << dir << " is missing";
        options.num_kv_blocks = 256;
        options.block_size = 16;
        options.num_threads = 2;
        runner = std::make_unique<model_runner>(dir, options);
    }
};

class CpuSamplingParams : public ::testing::TestWithParam<std::tuple<std::string, params_case>> {};

TEST_P(CpuSamplingParams, RunnerDrawsWhatTheSamplerReferenceDraws) {
    const auto& [fixture, pc] = GetParam();
    fixture_runner cpu(fixture);
    check_sampling_params(*cpu.runner, load_reference(cpu.dir), pc, "cpu " + fixture, cpu.options.block_size,
                          kLogitTolerance);
}

// stop_token_ids: applied by the engine core's scheduler to what the runner samples (stop_token_ids_check.hpp).
TEST(CpuStopTokenIds, EndTheRequestAtTheStopIdAndWaitForMinTokens) {
    for (const std::string fixture : {"qwen3_moe", "mixtral"}) {
        fixture_runner cpu(fixture);
        check_stop_token_ids(*cpu.runner, load_reference(cpu.dir), "cpu " + fixture,
                             static_cast<int32_t>(cpu.options.block_size),
                             static_cast<int32_t>(cpu.options.num_kv_blocks), /*min_margin=*/1e-3);
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuSamplingParams,
                         ::testing::Combine(::testing::Values("qwen3_moe", "mixtral"),
                                            ::testing::ValuesIn(kSamplingCases)),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

}  // namespace
}  // namespace zmoe::testing
