// EPLB expert moves on a CUDA worker (cuda_expert_moves.hpp): the weights of re-placed expert slots travel into
// staging on a stream and an NCCL communicator of their own while the steps go on, and every rank switches to the
// new placement at the same step boundary. Same semantics as the CPU runner's (workers/expert_moves.cpp).

#include "workers/cuda/cuda_expert_moves.hpp"

#include <nccl.h>

#include <chrono>

#include "base/check.hpp"
#include "base/error.hpp"
#include "kernels/cuda_check.hpp"
#include "workers/cuda/cuda_step_executor.hpp"

namespace zmoe::cuda {

void cuda_expert_mover::check(cudaError_t e) { ZMOE_CUDA_CHECK(e); }

cuda_expert_mover::cuda_expert_mover(int rank, nccl_comm* comm, cudaStream_t step_stream)
    : rank_(rank), step_stream_(step_stream) {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    check(cudaEventCreateWithFlags(&step_mark_, cudaEventDisableTiming));
    for (cudaEvent_t* e : {&transfer_start_, &transfer_end_, &install_start_, &install_end_}) check(cudaEventCreate(e));
    if (comm && comm->world_size() > 1) {
        // Rank 0's unique id reaches every rank through the executor's communicator.
        const std::string mine = comm->rank() == 0 ? nccl_unique_id_bytes() : std::string(NCCL_UNIQUE_ID_BYTES, '\0');
        const std::vector<std::string> all = comm->all_gather(mine, step_stream);
        comm_ = std::make_unique<nccl_comm>(all.at(0), comm->rank(), comm->world_size());
        // One byte each way with every peer now: NCCL sets up a pair's connections at its first transfer, which
        // would otherwise stall the first rebalance's stage on the host.
        device_buffer warm(2 * static_cast<size_t>(comm_->world_size()));
        std::vector<nccl_comm::transfer> hello;
        for (int p = 0; p < comm_->world_size(); ++p) {
            if (p == rank_) continue;
            hello.push_back({p, warm.as<std::byte>() + 2 * p, 1, true});
            hello.push_back({p, warm.as<std::byte>() + 2 * p + 1, 1, false});
        }
        comm_->exchange(hello, stream_);
        check(cudaStreamSynchronize(stream_));
    }
}

cuda_expert_mover::~cuda_expert_mover() {
    if (stream_) cudaStreamSynchronize(stream_);
    comm_.reset();
    for (cudaEvent_t e : {step_mark_, transfer_start_, transfer_end_, install_start_, install_end_})
        if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
}

void cuda_expert_mover::stage(const std::vector<expert_slot_move>& moves, const expert_placement& placement,
                              const std::vector<std::vector<expert_part>>& layer_parts) {
    if (staged()) throw error(errc::invalid_argument, "expert move: a rebalance is already staged");
    const int64_t per_rank = placement.slots_per_rank;
    part_bytes_.clear();
    if (!layer_parts.empty())
        for (const expert_part& p : layer_parts.front()) part_bytes_.push_back(p.slot_bytes);
    size_t expert = 0;
    for (size_t b : part_bytes_) expert += b;
    for (const std::vector<expert_part>& parts : layer_parts) {
        bool same = parts.size() == part_bytes_.size();
        for (size_t p = 0; same && p < parts.size(); ++p) same = parts[p].slot_bytes == part_bytes_[p];
        if (!same)
            throw error(errc::unsupported,
                        "expert move: MoE layers whose experts differ in format (FP8 in some "
                        "layers, BF16 in others) cannot be rebalanced");
    }

    // 1. Where each incoming expert waits: staging, in move order.
    std::vector<size_t> staging_of(moves.size(), 0);
    size_t n_in = 0;
    for (size_t i = 0; i < moves.size(); ++i)
        if (static_cast<int>(moves[i].slot / per_rank) == rank_) staging_of[i] = n_in++ * expert;
    if (n_in * expert > staging_.bytes()) {
        try {
            staging_.ensure(n_in * expert);  // synchronises the device: only when staging grows
        } catch (const error& e) {
            throw error(errc::out_of_memory, "expert move: no room to stage " + std::to_string(n_in) + " experts (" +
                                                 std::to_string((n_in * expert) >> 20) + " MiB): " + e.what());
        }
    }

    // 2. On the mover's stream, after the step stream's queued work (an earlier switch's copies included): local
    // copies, then one NCCL group of every transfer, listed in move order on both ends so each pair's sends and
    // receives match. Sources are the current slots, which nothing overwrites before the switch.
    check(cudaEventRecord(step_mark_, step_stream_));
    check(cudaStreamWaitEvent(stream_, step_mark_, 0));
    check(cudaEventRecord(transfer_start_, stream_));
    std::vector<nccl_comm::transfer> transfers;
    pending_.clear();
    staged_bytes_ = 0;
    // Slot `local`'s rows of each part of layer `layer`.
    auto slot_parts = [&](uint32_t layer, int64_t local) {
        std::vector<std::byte*> out;
        for (const expert_part& p : layer_parts.at(layer))
            out.push_back(p.base + static_cast<size_t>(local) * p.slot_bytes);
        return out;
    };
    for (size_t i = 0; i < moves.size(); ++i) {
        const expert_slot_move& m = moves[i];
        const int dst_rank = static_cast<int>(m.slot / per_rank);
        if (m.src_rank != rank_ && dst_rank != rank_) continue;
        std::byte* slot_staging = staging_.as<std::byte>() + staging_of[i];
        if (dst_rank == rank_) {
            const int64_t local = static_cast<int64_t>(m.slot) - rank_ * per_rank;
            pending_.push_back({slot_parts(m.layer, local), staging_of[i]});
            staged_bytes_ += expert;
        }
        if (m.src_rank == rank_) {
            const int64_t local = static_cast<int64_t>(m.src_slot) - rank_ * per_rank;
            ZMOE_CHECK(local >= 0 && local < per_rank,
                       "move source slot " << m.src_slot << " is not on rank " << rank_);
            const std::vector<std::byte*> src = slot_parts(m.layer, local);
            size_t at = 0;
            for (size_t p = 0; p < src.size(); ++p) {
                if (dst_rank == rank_)
                    check(
                        cudaMemcpyAsync(slot_staging + at, src[p], part_bytes_[p], cudaMemcpyDeviceToDevice, stream_));
                else
                    transfers.push_back({dst_rank, src[p], part_bytes_[p], true});
                at += part_bytes_[p];
            }
        } else {
            size_t at = 0;
            for (size_t b : part_bytes_) {
                transfers.push_back({m.src_rank, slot_staging + at, b, false});
                at += b;
            }
        }
    }
    if (comm_) {
        comm_->exchange(transfers, stream_);
    } else if (!transfers.empty()) {
        throw error(errc::invalid_argument, "expert move between ranks in a world of one");
    }
    check(cudaEventRecord(transfer_end_, stream_));
    staged_moves_ = std::make_unique<std::vector<expert_slot_move>>(moves);
}

std::vector<expert_slot_move> cuda_expert_mover::install(expert_move_stats& stats) {
    stats = {};
    if (!staged_moves_) return {};
    const auto t0 = std::chrono::steady_clock::now();
    const cudaError_t q = cudaEventQuery(transfer_end_);
    if (q != cudaErrorNotReady) check(q);
    stats.transfer_done = q == cudaSuccess;
    // The step stream waits for the transfer on the device, then the slots take the staged weights in place.
    check(cudaStreamWaitEvent(step_stream_, transfer_end_, 0));
    check(cudaEventRecord(install_start_, step_stream_));
    for (const incoming& in : pending_) {
        const std::byte* src = staging_.as<std::byte>() + in.staging_offset;
        for (size_t p = 0; p < in.parts.size(); ++p) {
            check(cudaMemcpyAsync(in.parts[p], src, part_bytes_[p], cudaMemcpyDeviceToDevice, step_stream_));
            src += part_bytes_[p];
        }
    }
    check(cudaEventRecord(install_end_, step_stream_));
    check(cudaEventSynchronize(install_end_));
    float transfer_ms = 0, install_ms = 0;
    check(cudaEventElapsedTime(&transfer_ms, transfer_start_, transfer_end_));
    check(cudaEventElapsedTime(&install_ms, install_start_, install_end_));
    stats.bytes = staged_bytes_;
    stats.transfer_ms = transfer_ms;
    stats.install_ms = install_ms;
    stats.switch_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<expert_slot_move> moves = std::move(*staged_moves_);
    staged_moves_.reset();
    pending_.clear();
    return moves;
}

void cuda_step_executor::stage_expert_moves(const std::vector<expert_slot_move>& moves) {
    check(cudaSetDevice(device_));
    placement_.check_moves(moves);
    if (!mover_) mover_ = std::make_unique<cuda_expert_mover>(options_.rank, comm_.get(), stream_);
    std::vector<std::vector<expert_part>> layer_parts;
    for (const cuda_layer& l : weights_.layers)
        if (l.moe_index >= 0) layer_parts.push_back(expert_parts(l, config_));
    mover_->stage(moves, placement_, layer_parts);
}

expert_move_stats cuda_step_executor::switch_expert_moves() {
    expert_move_stats stats;
    if (!mover_ || !mover_->staged()) return stats;
    check(cudaSetDevice(device_));
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<expert_slot_move> moves = mover_->install(stats);
    // Every rank applies every move to its copy of the map.
    placement_.apply_moves(moves);
    upload_replica_tables();
    stats.switch_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return stats;
}

}  // namespace zmoe::cuda
