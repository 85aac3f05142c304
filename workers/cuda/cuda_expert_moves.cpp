// EPLB expert moves on a CUDA worker: the weights of re-placed expert slots travel between GPUs with NCCL
// send/recv into fresh device buffers copied over the slots in place, then every rank switches to the new placement at
// the same step boundary. Same semantics as the CPU runner's (workers/expert_moves.cpp).

#include <map>

#include "base/check.hpp"
#include "base/error.hpp"
#include "kernels/cuda_check.hpp"
#include "workers/cuda/cuda_step_executor.hpp"

namespace zmoe::cuda {

uint64_t cuda_step_executor::apply_expert_moves(const std::vector<expert_slot_move>& moves) {
    check(cudaSetDevice(device_));
    const int world = options_.world_size();
    const int rank = options_.rank;
    std::vector<int64_t> layer_of_moe;  // moe index -> decoder layer
    for (size_t l = 0; l < weights_.layers.size(); ++l)
        if (weights_.layers[l].moe_index >= 0) layer_of_moe.push_back(static_cast<int64_t>(l));
    const auto num_moe = static_cast<int64_t>(layer_of_moe.size());
    const int64_t per_rank = num_moe > 0 ? static_cast<int64_t>(placement_.slots(0, rank).size()) : 0;
    for (const auto& m : moves) {
        if (static_cast<int64_t>(m.layer) >= num_moe || m.src_rank < 0 || m.src_rank >= world ||
            static_cast<int64_t>(m.slot) >= per_rank * world || static_cast<int64_t>(m.src_slot) >= per_rank * world ||
            m.logical_expert < 0 || m.logical_expert >= placement_.num_experts())
            throw error(errc::invalid_argument, "expert move out of range: layer " + std::to_string(m.layer) +
                                                    " slot " + std::to_string(m.slot) + " from rank " +
                                                    std::to_string(m.src_rank));
    }
    const size_t gate_up_bytes = static_cast<size_t>(2 * config_.moe_intermediate_size * config_.hidden_size) * 2;
    const size_t down_bytes = gate_up_bytes / 2;

    // 1. Fresh buffers for every layer this rank receives into, starting as copies of the current slots; the
    // sources are read from the current buffers, which nothing overwrites.
    struct fresh_layer {
        device_buffer gate_up, down;
    };
    std::map<uint32_t, fresh_layer> fresh;
    for (const auto& m : moves) {
        if (m.slot / per_rank != rank || fresh.count(m.layer)) continue;
        const cuda_layer& l = weights_.layers[layer_of_moe[m.layer]];
        fresh_layer f{device_buffer(l.experts_gate_up.bytes()), device_buffer(l.experts_down.bytes())};
        check(cudaMemcpyAsync(f.gate_up.as<void>(), l.experts_gate_up.as<void>(), l.experts_gate_up.bytes(),
                              cudaMemcpyDeviceToDevice, stream_));
        check(cudaMemcpyAsync(f.down.as<void>(), l.experts_down.as<void>(), l.experts_down.bytes(),
                              cudaMemcpyDeviceToDevice, stream_));
        fresh.emplace(m.layer, std::move(f));
    }

    // 2. One NCCL group of every transfer, listed in move order on both ends so each pair's sends and receives
    // match; moves within this rank are device copies.
    std::vector<nccl_comm::transfer> transfers;
    uint64_t installed = 0;
    for (const auto& m : moves) {
        const int dst_rank = static_cast<int>(m.slot / per_rank);
        if (m.src_rank != rank && dst_rank != rank) continue;
        std::byte *dst_gu = nullptr, *dst_dn = nullptr;
        if (dst_rank == rank) {
            const int64_t local = static_cast<int64_t>(m.slot) - rank * per_rank;
            fresh_layer& f = fresh.at(m.layer);
            dst_gu = f.gate_up.as<std::byte>() + local * gate_up_bytes;
            dst_dn = f.down.as<std::byte>() + local * down_bytes;
            installed += gate_up_bytes + down_bytes;
        }
        if (m.src_rank == rank) {
            const cuda_layer& l = weights_.layers[layer_of_moe[m.layer]];
            const int64_t local = static_cast<int64_t>(m.src_slot) - rank * per_rank;
            ZMOE_CHECK(local >= 0 && local < per_rank, "move source slot " << m.src_slot << " is not on rank " << rank);
            std::byte* src_gu = l.experts_gate_up.as<std::byte>() + local * gate_up_bytes;
            std::byte* src_dn = l.experts_down.as<std::byte>() + local * down_bytes;
            if (dst_rank == rank) {
                check(cudaMemcpyAsync(dst_gu, src_gu, gate_up_bytes, cudaMemcpyDeviceToDevice, stream_));
                check(cudaMemcpyAsync(dst_dn, src_dn, down_bytes, cudaMemcpyDeviceToDevice, stream_));
            } else {
                transfers.push_back({dst_rank, src_gu, gate_up_bytes, true});
                transfers.push_back({dst_rank, src_dn, down_bytes, true});
            }
        } else {
            transfers.push_back({m.src_rank, dst_gu, gate_up_bytes, false});
            transfers.push_back({m.src_rank, dst_dn, down_bytes, false});
        }
    }
    if (comm_) {
        comm_->exchange(transfers, stream_);
    } else if (!transfers.empty()) {
        throw error(errc::invalid_argument, "expert move between ranks in a world of one");
    }
    check(cudaStreamSynchronize(stream_));

    // 3. Copy in place (the slots keep their addresses, so captured graphs stay valid), and move to the new
    // placement (every rank applies every move to its copy of the map).
    for (auto& [layer, f] : fresh) {
        cuda_layer& l = weights_.layers[layer_of_moe[layer]];
        check(cudaMemcpyAsync(l.experts_gate_up.as<void>(), f.gate_up.as<void>(), f.gate_up.bytes(),
                              cudaMemcpyDeviceToDevice, stream_));
        check(cudaMemcpyAsync(l.experts_down.as<void>(), f.down.as<void>(), f.down.bytes(), cudaMemcpyDeviceToDevice,
                              stream_));
    }
    check(cudaStreamSynchronize(stream_));  // before the fresh buffers are freed
    std::vector<std::vector<std::vector<int32_t>>> slots(num_moe, std::vector<std::vector<int32_t>>(world));
    for (int64_t l = 0; l < num_moe; ++l)
        for (int r = 0; r < world; ++r) slots[l][r] = placement_.slots(l, r);
    for (const auto& m : moves) slots[m.layer][m.slot / per_rank][m.slot % per_rank] = m.logical_expert;
    placement_ = expert_placement(placement_.num_experts(), std::move(slots));
    upload_replica_tables();
    return installed;
}

}  // namespace zmoe::cuda
