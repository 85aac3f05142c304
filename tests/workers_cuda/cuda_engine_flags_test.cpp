// The engine flags whose effect only a GPU shows: --gpu-memory-utilization sizes the CUDA KV cache from the
// fraction of the device it names, and --enforce-eager leaves every decode step eager (no graph captured or
// replayed) where the default replays graphs.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>

#include "cuda_test_util.hpp"
#include "workers/cuda/cuda_step_executor.hpp"

namespace zmoe::cuda {
namespace {

using namespace zmoe::cuda::testing;
using zmoe::testing::step_driver;

std::unique_ptr<cuda_step_executor> make_executor(double utilization, bool eager) {
    executor_options o = cuda_options(fixture_dir("qwen3_moe"));
    o.config.num_kv_blocks = 0;  // sized from --gpu-memory-utilization
    o.config.gpu_memory_utilization = utilization;
    o.config.enforce_eager = eager;
    o.config.max_num_seqs = 8;
    o.config.max_num_batched_tokens = 256;
    return std::make_unique<cuda_step_executor>(o, initial_placement(o));
}

TEST(CudaEngineFlags, GpuMemoryUtilizationSizesTheKvCache) {
    size_t free_bytes = 0, total_bytes = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
    int64_t small_blocks = 0, small_bytes = 0, large_blocks = 0, large_bytes = 0;
    {
        const auto ex = make_executor(0.3, true);
        small_blocks = ex->num_kv_blocks();
        small_bytes = ex->kv_cache_bytes();
    }
    {
        const auto ex = make_executor(0.6, true);
        large_blocks = ex->num_kv_blocks();
        large_bytes = ex->kv_cache_bytes();
    }
    ASSERT_GT(small_blocks, 0);
    EXPECT_GT(large_blocks, small_blocks);
    // The 0.3 of the device the second run adds goes to the KV cache (the weights and workspace are the same).
    const double added = static_cast<double>(large_bytes - small_bytes) / (0.3 * static_cast<double>(total_bytes));
    EXPECT_NEAR(added, 1.0, 0.05) << small_bytes << " vs " << large_bytes << " bytes of KV cache";
    EXPECT_LE(static_cast<double>(large_bytes), 0.6 * static_cast<double>(total_bytes));
}

TEST(CudaEngineFlags, EnforceEagerReplaysNoGraph) {
    for (const bool eager : {true, false}) {
        const auto ex = make_executor(0.3, eager);
        step_driver driver(kBlockSize, 7);
        driver.add(0, {1, 2, 3, 4, 5}, 6);
        driver.add(1, {6, 7, 8}, 6);
        run_all(*ex, driver);
        if (eager) {
            EXPECT_TRUE(ex->graph_batch_sizes().empty());
            EXPECT_EQ(ex->graph_replays(), 0);
        } else {
            EXPECT_FALSE(ex->graph_batch_sizes().empty());
            EXPECT_GT(ex->graph_replays(), 0);
        }
    }
}

}  // namespace
}  // namespace zmoe::cuda
