// EPLB expert moves on a CPU worker: the weights of re-placed expert slots travel between ranks through the
// expert-parallel collective into staging buffers when the rebalance is staged; every rank switches to the new
// placement later, at the same step boundary.

#include <chrono>
#include <cstring>

#include "base/check.hpp"
#include "base/error.hpp"
#include "workers/fp8.hpp"
#include "workers/model_runner.hpp"

namespace zmoe {

namespace {

size_t element_bytes(const matrix_view& m) { return static_cast<size_t>(m.rows * m.cols) * dtype_size(m.type); }

// FP8 matrices travel with the rows of their scale grid that cover them.
int64_t scale_floats(const matrix_view& m) {
    if (m.type != dtype::f8_e4m3) return 0;
    return fp8_blocks(m.scale_row0 % kFp8Block + m.rows) * fp8_blocks(m.cols);
}

size_t aligned(size_t n) { return (n + alignof(float) - 1) / alignof(float) * alignof(float); }

// Elements, padded to a float boundary, then the scales (FP8 only).
size_t matrix_bytes(const matrix_view& m) {
    return aligned(element_bytes(m)) + static_cast<size_t>(scale_floats(m)) * sizeof(float);
}

size_t expert_bytes(const mlp_weights& e) { return matrix_bytes(e.gate) + matrix_bytes(e.up) + matrix_bytes(e.down); }

/// Byte layout of one expert on the wire and in its owned buffer: gate | up | down, each in its checkpoint dtype
/// (padded to 4 bytes), an FP8 matrix followed by its block scales. Buffers are float-aligned.
void copy_expert(const mlp_weights& e, std::byte* dst) {
    for (const matrix_view* m : {&e.gate, &e.up, &e.down}) {
        std::memcpy(dst, m->data, element_bytes(*m));
        if (const int64_t n = scale_floats(*m))
            std::memcpy(dst + aligned(element_bytes(*m)), m->row_scales(0), static_cast<size_t>(n) * sizeof(float));
        dst += matrix_bytes(*m);
    }
}

mlp_weights view_expert(const mlp_weights& shape, const std::byte* src) {
    mlp_weights out = shape;
    for (matrix_view* m : {&out.gate, &out.up, &out.down}) {
        const size_t n = matrix_bytes(*m);
        m->data = src;
        if (m->type == dtype::f8_e4m3) {
            m->scale = reinterpret_cast<const float*>(src + aligned(element_bytes(*m)));
            m->scale_row0 %= kFp8Block;
        }
        src += n;
    }
    return out;
}

}  // namespace

void model_runner::stage_expert_moves(const std::vector<expert_slot_move>& moves) {
    if (staged_moves_) throw error(errc::invalid_argument, "expert move: a rebalance is already staged");
    const auto t0 = std::chrono::steady_clock::now();
    expert_comm& comm = *comm_;
    const int world = comm.world_size();
    const int rank = options_.rank;
    auto& layers = weights_.mutable_layers();
    std::vector<int64_t> layer_of_moe;  // moe index -> decoder layer
    for (size_t l = 0; l < layers.size(); ++l)
        if (layers[l].moe_index >= 0) layer_of_moe.push_back(static_cast<int64_t>(l));
    const int64_t per_rank = placement_.slots_per_rank;
    placement_.check_moves(moves);
    auto local_expert = [&](uint32_t layer, uint32_t global_slot) -> const mlp_weights& {
        return layers[layer_of_moe[layer]].moe.experts[global_slot - rank * per_rank];
    };

    // 1. Every source slot this rank holds is read now; nothing is overwritten before the switch.
    std::vector<std::vector<std::byte>> send_bytes(world);
    for (const auto& m : moves) {
        if (m.src_rank != rank) continue;
        const int dst_rank = static_cast<int>(m.slot / per_rank);
        const auto& e = local_expert(m.layer, m.src_slot);
        auto& buf = send_bytes[dst_rank];
        const size_t at = buf.size();
        buf.resize(at + expert_bytes(e));
        copy_expert(e, buf.data() + at);
    }
    std::vector<std::vector<float>> send(world);
    for (int r = 0; r < world; ++r) {
        send[r].resize((send_bytes[r].size() + sizeof(float) - 1) / sizeof(float));
        if (!send_bytes[r].empty()) std::memcpy(send[r].data(), send_bytes[r].data(), send_bytes[r].size());
    }
    const auto recv = comm.all_to_all(std::move(send));

    // 2. Stage the received experts in owned buffers, in move order (the order the sources packed them).
    std::vector<size_t> offset(world, 0);
    expert_move_stats stats;
    std::vector<staged_expert> incoming;
    for (const auto& m : moves) {
        if (static_cast<int>(m.slot / per_rank) != rank) continue;
        const int64_t local = static_cast<int64_t>(m.slot) - rank * per_rank;
        const mlp_weights& shape = layers[layer_of_moe[m.layer]].moe.experts[local];
        const size_t n = expert_bytes(shape);
        const auto* src = reinterpret_cast<const std::byte*>(recv[m.src_rank].data());
        const size_t have = recv[m.src_rank].size() * sizeof(float);
        if (offset[m.src_rank] + n > have)
            throw error(errc::protocol, "expert move: rank " + std::to_string(m.src_rank) + " sent " +
                                            std::to_string(have) + " bytes, short of layer " + std::to_string(m.layer) +
                                            " slot " + std::to_string(m.slot));
        staged_expert s{m.layer, local, std::make_unique<std::byte[]>(n), {}};
        std::memcpy(s.bytes.get(), src + offset[m.src_rank], n);
        offset[m.src_rank] += n;
        s.view = view_expert(shape, s.bytes.get());
        stats.bytes += n;
        incoming.push_back(std::move(s));
    }
    stats.transfer_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    staged_moves_ = moves;
    staged_experts_ = std::move(incoming);
    staged_stats_ = stats;
}

expert_move_stats model_runner::switch_expert_moves() {
    if (!staged_moves_) return {};
    const auto t0 = std::chrono::steady_clock::now();
    const int rank = options_.rank;
    auto& layers = weights_.mutable_layers();
    std::vector<int64_t> layer_of_moe;  // moe index -> decoder layer
    for (size_t l = 0; l < layers.size(); ++l)
        if (layers[l].moe_index >= 0) layer_of_moe.push_back(static_cast<int64_t>(l));
    // Swap in, and move to the new placement (every rank applies every move to its copy of the map).
    placement_.apply_moves(*staged_moves_);
    for (auto& s : staged_experts_) {
        auto& moe = layers[layer_of_moe[s.layer]].moe;
        moe.experts[s.local_slot] = s.view;
        moe.slot_expert[s.local_slot] = placement_.slots(static_cast<int32_t>(s.layer), rank)[s.local_slot];
        moved_experts_[{s.layer, s.local_slot}] = std::move(s.bytes);  // frees what the slot held before, if ours
    }
    staged_moves_.reset();
    staged_experts_.clear();
    expert_move_stats stats = staged_stats_;
    stats.switch_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return stats;
}

}  // namespace zmoe
