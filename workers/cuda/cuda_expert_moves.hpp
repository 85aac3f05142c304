#pragma once
// EPLB expert moves of one CUDA worker rank, kept off the steps' stream: staging copies every incoming expert
// (from a slot of this GPU, or over NCCL from another rank) into a staging buffer on a stream of its own, beside
// the steps; the switch then waits for that copy on the step stream (on the device, the host does not wait) and
// copies staging into the slots, which keep their addresses (the captured decode graphs stay valid). The weight
// transfers use a communicator of their own, so they never queue behind the steps' collectives or hold them up.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "messages/expert_placement.hpp"
#include "messages/worker_protocol.hpp"
#include "workers/cuda/device_buffer.hpp"
#include "workers/cuda/nccl_comm.hpp"
#include "workers/step_executor.hpp"

namespace zmoe::cuda {

struct expert_part;

class cuda_expert_mover {
  public:
    /// Rank `rank` of the executor's expert-parallel group `comm` (null for a world of one), on the current device;
    /// `step_stream` is the stream the steps run on. With a comm, joins a communicator of its own for the weights:
    /// a collective over `comm` (every rank constructs its mover at the same point), blocking until all joined.
    cuda_expert_mover(int rank, nccl_comm* comm, cudaStream_t step_stream);
    ~cuda_expert_mover();
    cuda_expert_mover(const cuda_expert_mover&) = delete;
    cuda_expert_mover& operator=(const cuda_expert_mover&) = delete;

    bool staged() const { return staged_moves_ != nullptr; }

    /// Starts the transfer of `moves` (already checked against `placement`, the current one): on the mover's
    /// stream, after everything queued on the step stream so far, every incoming expert lands in staging: from
    /// this rank's current slots by device copy, from other ranks by NCCL send/recv listed in move order on both
    /// ends. `layer_parts[i]` lists MoE layer i's expert parts (expert_parts: BF16 gate_up and down; FP8 codes and
    /// block scales of each), the same part sizes in every layer; one expert is the sum of its parts' slot bytes. A
    /// collective (every rank stages the same moves at the same point). Throws zmoe::error(out_of_memory) when
    /// staging does not fit, (invalid_argument) when something is already staged or a move crosses ranks in a world
    /// of one.
    void stage(const std::vector<expert_slot_move>& moves, const expert_placement& placement,
               const std::vector<std::vector<expert_part>>& layer_parts);

    /// Queues on the step stream: a wait for the staged transfer, then staging -> slots; waits for those copies
    /// on the host (the step boundary) and returns the staged moves (the caller switches its placement) with the
    /// figures. Nothing staged: returns an empty list.
    std::vector<expert_slot_move> install(expert_move_stats& stats);

  private:
    struct incoming {
        std::vector<std::byte*> parts;  // the slot's rows of each expert part
        size_t staging_offset;
    };
    static void check(cudaError_t e);

    int rank_ = 0;
    cudaStream_t step_stream_ = nullptr;
    cudaStream_t stream_ = nullptr;  // the transfers
    std::unique_ptr<nccl_comm> comm_;
    device_buffer staging_;
    std::vector<incoming> pending_;
    std::unique_ptr<std::vector<expert_slot_move>> staged_moves_;
    std::vector<size_t> part_bytes_;  // one slot's bytes in each part
    uint64_t staged_bytes_ = 0;
    cudaEvent_t step_mark_ = nullptr;  // the step stream's work before the stage
    cudaEvent_t transfer_start_ = nullptr, transfer_end_ = nullptr;
    cudaEvent_t install_start_ = nullptr, install_end_ = nullptr;
};

}  // namespace zmoe::cuda
