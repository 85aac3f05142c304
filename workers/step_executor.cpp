#include "workers/step_executor.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

#include "base/error.hpp"
#include "workers/model_runner.hpp"

namespace zmoe {

#ifdef ZMOE_WITH_CUDA
// workers/cuda/: the CUDA executor and NCCL's unique id.
std::unique_ptr<step_executor> make_cuda_step_executor(const executor_options& options,
                                                       const expert_placement& placement);
std::string make_nccl_unique_id();
double measure_cuda_copy_bandwidth(int rank, size_t bytes);
void cuda_profiler_range(bool on);
#endif

std::unique_ptr<step_executor> make_step_executor(const executor_options& options, const expert_placement& placement) {
    const engine_config& c = options.config;
    if (c.device == "cpu") {
        runner_options ro;
        ro.load_format = c.load_format;
        ro.grammar_tokenizer = c.grammar_tokenizer;
        ro.dummy_router_skew = c.dummy_router_skew;
        ro.quantization = c.quantization;
        ro.block_size = c.block_size;
        ro.num_kv_blocks = c.num_kv_blocks > 0 ? c.num_kv_blocks
                                               : kv_blocks_for_budget(options.model, c.block_size, c.kv_cache_mb << 20);
        ro.rank = options.rank;
        ro.world_size = options.world_size();
        ro.comm = options.comm;
        ro.placement = &placement;
        ro.num_threads = engine_threads_per_worker(c, std::thread::hardware_concurrency());
        return std::make_unique<model_runner>(options.model, c.model, ro);
    }
#ifdef ZMOE_WITH_CUDA
    if (c.device == "cuda") return make_cuda_step_executor(options, placement);
#endif
    throw error(errc::unsupported, "device '" + c.device + "' is not supported by this build (cpu" +
#ifdef ZMOE_WITH_CUDA
                                       std::string(", cuda") +
#endif
                                       ")");
}

double measure_copy_bandwidth(const std::string& device, int rank, size_t bytes) {
#ifdef ZMOE_WITH_CUDA
    if (device == "cuda") return measure_cuda_copy_bandwidth(rank, bytes > 0 ? bytes : size_t{1} << 30);
#else
    (void)rank;
#endif
    if (device != "cpu") throw error(errc::unsupported, "device '" + device + "'");
    const size_t n = bytes > 0 ? bytes : size_t{256} << 20;
    std::vector<std::byte> a(n, std::byte{1}), b(n);
    double best = 0;
    for (int i = 0; i < 5; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        std::memcpy(b.data(), a.data(), n);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, 2.0 * static_cast<double>(n) / s);
    }
    return best;
}

void device_profiler_range(const std::string& device, bool on) {
#ifdef ZMOE_WITH_CUDA
    if (device == "cuda") cuda_profiler_range(on);
#else
    (void)device;
    (void)on;
#endif
}

std::string make_collective_id(const std::string& device) {
#ifdef ZMOE_WITH_CUDA
    if (device == "cuda") return make_nccl_unique_id();
#else
    (void)device;
#endif
    return {};
}

}  // namespace zmoe
