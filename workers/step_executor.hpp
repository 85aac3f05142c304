#pragma once
// What a worker runs its steps on: the CPU model runner, or (ZMOE_CUDA builds) the CUDA one. The worker actor
// owns one, created by make_step_executor from the welcome's device; everything device-specific stays behind it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "messages/step_types.hpp"
#include "messages/worker_protocol.hpp"
#include "workers/model_config.hpp"

namespace zmoe {

class expert_comm;
class expert_placement;

class step_executor {
  public:
    virtual ~step_executor() = default;
    /// Runs one step (see model_runner::execute for the contract every backend keeps).
    virtual step_result execute(const step_request& request, std::vector<std::vector<float>>* logits_out = nullptr) = 0;
    /// An EPLB rebalance, a collective over the executor's expert-parallel group; returns the bytes installed.
    virtual uint64_t apply_expert_moves(const std::vector<expert_slot_move>& moves) = 0;
    virtual int64_t num_kv_blocks() const = 0;
    virtual const model_config& config() const = 0;
};

/// How a worker is set up for its backend.
struct executor_options {
    std::string device = "cpu";  ///< "cpu" or "cuda"
    int rank = 0;
    int world_size = 1;
    int64_t num_kv_blocks = 0;  ///< 0: as many as the budget holds
    int64_t block_size = 16;
    int64_t kv_cache_bytes = 256ll << 20;   ///< CPU KV budget when num_kv_blocks is 0
    double gpu_memory_utilization = 0.9;    ///< CUDA: fraction of device memory for weights + KV
    int num_threads = 0;                    ///< CPU kernel threads; 0 = all cores
    expert_comm* comm = nullptr;            ///< CPU expert-parallel collective (not owned)
    std::string collective_id;              ///< CUDA: the NCCL unique id bytes rank 0 made (welcome)
    int32_t max_num_batched_tokens = 2048;  ///< tokens per step: sizes the CUDA workspace
    int32_t max_num_seqs = 64;              ///< sequences per step: sizes the CUDA workspace and decode graphs
    int32_t max_model_len = 0;              ///< longest sequence; 0: the model's max_position_embeddings
    bool enforce_eager = false;             ///< CUDA: no decode graphs, every step launched kernel by kernel
    std::string load_format = "auto";       ///< "auto": the checkpoint; "dummy": random weights from config.json
};

/// Creates the executor for options.device. Throws zmoe::error(unsupported) for a device this build lacks.
std::unique_ptr<step_executor> make_step_executor(const std::string& model_dir, const executor_options& options,
                                                  const expert_placement& placement);

/// Bytes per second one device-to-device copy moves on `device` (read + write counted: "cuda": cudaMemcpy within
/// GPU 0, 1 GiB; "cpu": memcpy, 256 MiB), the best of a few repeats: the bandwidth floors are computed against.
double measure_copy_bandwidth(const std::string& device);

/// CUDA builds: rank 0 makes the NCCL unique id (as raw bytes) that every rank joins with; "" for CPU.
std::string make_collective_id(const std::string& device);

}  // namespace zmoe
