#include "workers/step_executor.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>

#include "base/error.hpp"
#include "workers/model_runner.hpp"

namespace zmoe {

#ifdef ZMOE_WITH_CUDA
// workers/cuda/: the CUDA executor and NCCL's unique id.
std::unique_ptr<step_executor> make_cuda_step_executor(const std::string& model_dir, const executor_options& options,
                                                       const expert_placement& placement);
std::string make_nccl_unique_id();
double measure_cuda_copy_bandwidth();
#endif

std::unique_ptr<step_executor> make_step_executor(const std::string& model_dir, const executor_options& options,
                                                  const expert_placement& placement) {
    if (options.device == "cpu") {
        if (options.load_format != "auto")
            throw error(errc::unsupported, "--load-format " + options.load_format + " on the CPU backend");
        const model_config cfg = model_config::load(model_dir);
        runner_options ro;
        ro.block_size = options.block_size;
        ro.num_kv_blocks = options.num_kv_blocks > 0
                               ? options.num_kv_blocks
                               : kv_blocks_for_budget(cfg, options.block_size, options.kv_cache_bytes);
        ro.rank = options.rank;
        ro.world_size = options.world_size;
        ro.comm = options.comm;
        ro.placement = &placement;
        ro.num_threads = options.num_threads;
        return std::make_unique<model_runner>(model_dir, ro);
    }
#ifdef ZMOE_WITH_CUDA
    if (options.device == "cuda") return make_cuda_step_executor(model_dir, options, placement);
#endif
    throw error(errc::unsupported, "device '" + options.device + "' is not supported by this build (cpu" +
#ifdef ZMOE_WITH_CUDA
                                       std::string(", cuda") +
#endif
                                       ")");
}

double measure_copy_bandwidth(const std::string& device) {
#ifdef ZMOE_WITH_CUDA
    if (device == "cuda") return measure_cuda_copy_bandwidth();
#endif
    if (device != "cpu") throw error(errc::unsupported, "device '" + device + "'");
    const size_t n = 256u << 20;
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

std::string make_collective_id(const std::string& device) {
#ifdef ZMOE_WITH_CUDA
    if (device == "cuda") return make_nccl_unique_id();
#else
    (void)device;
#endif
    return {};
}

}  // namespace zmoe
