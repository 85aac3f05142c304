#pragma once
// What a worker runs its steps on: the CPU model runner, or (ZMOE_CUDA builds) the CUDA one. The worker actor
// owns one, created by make_step_executor from the welcome's device; everything device-specific stays behind it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "messages/engine_config.hpp"
#include "messages/step_types.hpp"
#include "messages/worker_protocol.hpp"
#include "model/model_config.hpp"

namespace zmoe {

class expert_comm;
struct expert_placement;

/// What a rank reports of one EPLB rebalance when it switches to it.
struct expert_move_stats {
    uint64_t bytes = 0;         ///< expert weight bytes this rank received
    double transfer_ms = 0;     ///< the transfer's own time (CUDA: device time of the staged copies; CPU: host)
    bool transfer_done = true;  ///< it had finished when the switch came (CUDA: else the next step waits for it)
    double switch_ms = 0;       ///< host time of the switch call
    double install_ms = 0;      ///< CUDA: device time of the copies from staging into the slots (on the step stream)
};

class step_executor {
  public:
    virtual ~step_executor() = default;
    /// Runs one step (see model_runner::execute for the contract every backend keeps).
    virtual step_result execute(const step_request& request, std::vector<std::vector<float>>* logits_out = nullptr) = 0;
    /// Starts an EPLB rebalance: the weights `moves` name begin to travel into staging buffers (CUDA: on a
    /// stream of their own, beside the steps), a collective over the executor's expert-parallel group, so every
    /// rank stages at the same point of its step sequence. Steps keep running on the current placement until
    /// switch_expert_moves. Throws zmoe::error(invalid_argument) for a bad move or when a rebalance is already
    /// staged.
    virtual void stage_expert_moves(const std::vector<expert_slot_move>& moves) = 0;
    /// Installs the staged weights in their slots and switches to the new placement; the next step uses it. Every
    /// rank switches before the same step. Nothing staged: does nothing and returns zeros.
    virtual expert_move_stats switch_expert_moves() = 0;
    /// stage_expert_moves then switch_expert_moves; returns the bytes installed.
    uint64_t apply_expert_moves(const std::vector<expert_slot_move>& moves) {
        stage_expert_moves(moves);
        return switch_expert_moves().bytes;
    }
    virtual int64_t num_kv_blocks() const = 0;
    virtual const model_config& config() const = 0;
};

/// What one worker's executor is built from: the run's configuration as the welcome carried it, the model's
/// config.json (parsed once by the worker), and this rank's place in the run. Backends read the engine flags from
/// `config` directly (config.workers is the world size; config.model the checkpoint directory).
struct executor_options {
    engine_config config;
    model_config model;
    int rank = 0;
    expert_comm* comm = nullptr;  ///< CPU expert-parallel collective (not owned)
    std::string collective_id;    ///< CUDA: the NCCL unique id bytes rank 0 made (welcome)
    /// CUDA expert parallelism: the fixed exchange window per rank is this × the even share of a step's rows
    /// (ep_window_capacity); a step that overflows it is redone on the exact path. 0: the default rule (the share
    /// with room for a random routing's spread, workers/ep_capacity.hpp).
    double ep_capacity_factor = 0;
    /// CUDA expert parallelism: the fixed exchange writes peer to peer into the other GPUs' memory when the run is
    /// one node and every rank can map every other's (else, and when false, NCCL send/recv).
    bool ep_peer_to_peer = true;
    /// CUDA expert parallelism with dual-batch overlap: SMs the persistent expert GEMMs leave to the exchange's
    /// kernels while a micro-batch's exchange is in flight. 0 (the default): none, the GEMMs take every SM.
    int32_t ep_comm_sms = 0;
    int world_size() const { return config.workers; }
};

/// Creates the executor for options.config.device. Throws zmoe::error(unsupported) for a device this build lacks.
std::unique_ptr<step_executor> make_step_executor(const executor_options& options, const expert_placement& placement);

/// Bytes per second one device-to-device copy moves on `device` (read + write counted: "cuda": cudaMemcpy within
/// the GPU a worker of rank `rank` uses (rank modulo the visible GPUs), 1 GiB; "cpu": memcpy, 256 MiB), the best of a
/// few repeats: the bandwidth floors are computed against. `bytes` > 0 copies that many bytes instead.
double measure_copy_bandwidth(const std::string& device, int rank = 0, size_t bytes = 0);

/// Turns the device profiler's collection on or off ("cuda": cudaProfilerStart / cudaProfilerStop, so that a
/// profiler started with collection off, such as `ncu --profile-from-start off`, records only the region between;
/// "cpu": nothing).
void device_profiler_range(const std::string& device, bool on);

/// CUDA builds: rank 0 makes the NCCL unique id (as raw bytes) that every rank joins with; "" for CPU.
std::string make_collective_id(const std::string& device);

}  // namespace zmoe
