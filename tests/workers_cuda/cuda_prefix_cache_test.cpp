// Prefix caching on the CUDA executor, every fixture family (MLA included): sequences that start at start_pos > 0 on
// block tables whose first blocks other sequences share give the tokens of the run without the cache, also under a
// pool small enough to evict and preempt (tests/workers/prefix_cache_check.hpp; the CPU runner runs the same check).

#include <gtest/gtest.h>

#include <filesystem>

#include "cuda_test_util.hpp"
#include "prefix_cache_check.hpp"
#include "workers/cuda/cuda_step_executor.hpp"

namespace zmoe::cuda {
namespace {

using namespace zmoe::cuda::testing;

class CudaPrefixCache : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaPrefixCache, GreedyTokensMatchTheRunWithoutTheCache) {
    const std::string dir = fixture_dir(GetParam());
    ASSERT_TRUE(std::filesystem::exists(dir + "/config.json")) << "fixture " << dir << " is missing";
    const executor_options o = cuda_options(dir);
    cuda_step_executor gpu(o, initial_placement(o));
    zmoe::testing::check_prefix_cache(gpu, load_reference(dir), "cuda " + GetParam(), static_cast<int32_t>(kBlockSize),
                                      static_cast<int32_t>(kNumBlocks));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaPrefixCache,
                         ::testing::Values("qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "qwen3_moe_alt", "mixtral_alt",
                                           "deepseek_v3", "deepseek_v3_flat", "deepseek_v2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace zmoe::cuda
