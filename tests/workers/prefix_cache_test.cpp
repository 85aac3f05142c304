// Prefix caching on the CPU model runner, every fixture family (MLA included): prefix_cache_check.hpp (the CUDA
// executor runs the same check in tests/workers_cuda/cuda_prefix_cache_test.cpp).

#include <gtest/gtest.h>

#include <filesystem>

#include "prefix_cache_check.hpp"
#include "workers/model_runner.hpp"

namespace zmoe::testing {
namespace {

class CpuPrefixCache : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuPrefixCache, GreedyTokensMatchTheRunWithoutTheCache) {
    const std::string dir = fixture_dir(GetParam());
    ASSERT_TRUE(std::filesystem::exists(dir + "/config.json")) << "fixture " << dir << " is missing";
    runner_options options;
    options.num_kv_blocks = 64;
    options.block_size = 16;
    options.num_threads = 2;
    model_runner runner(dir, options);
    check_prefix_cache(runner, load_reference(dir), "cpu " + GetParam(), 16, 64);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CpuPrefixCache,
                         ::testing::Values("qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "qwen3_moe_alt", "mixtral_alt",
                                           "deepseek_v3", "deepseek_v3_flat", "deepseek_v2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace zmoe::testing
