#include "messages/expert_placement.hpp"

#include <string>

#include "base/check.hpp"
#include "base/error.hpp"
#include "messages/worker_protocol.hpp"

namespace zmoe {

expert_placement expert_placement::identity(int32_t num_moe_layers, int32_t num_experts, int32_t num_ranks) {
    if (num_moe_layers < 0 || num_experts < 1 || num_ranks < 1 || num_experts % num_ranks != 0) {
        throw error(errc::invalid_argument, "expert_placement::identity: num_experts (" + std::to_string(num_experts) +
                                                ") must be a positive multiple of num_ranks (" +
                                                std::to_string(num_ranks) + ") without redundant experts");
    }
    expert_placement p;
    p.num_experts = num_experts;
    p.num_ranks = num_ranks;
    p.slots_per_rank = num_experts / num_ranks;
    std::vector<int32_t> layer(static_cast<size_t>(num_experts));
    for (int32_t e = 0; e < num_experts; ++e) layer[static_cast<size_t>(e)] = e;
    p.physical_to_logical.assign(static_cast<size_t>(num_moe_layers), layer);
    return p;
}

expert_placement expert_placement::initial(int32_t num_moe_layers, int32_t num_experts, int32_t num_redundant,
                                           int32_t num_ranks) {
    if (num_moe_layers < 0 || num_experts < 1 || num_redundant < 0 || num_ranks < 1) {
        throw error(errc::invalid_argument, "expert_placement::initial: " + std::to_string(num_experts) + " experts, " +
                                                std::to_string(num_redundant) + " redundant, " +
                                                std::to_string(num_ranks) + " ranks");
    }
    const int32_t wanted = num_experts + num_redundant;
    const int32_t num_slots = (wanted + num_ranks - 1) / num_ranks * num_ranks;
    expert_placement p;
    p.num_experts = num_experts;
    p.num_ranks = num_ranks;
    p.slots_per_rank = num_slots / num_ranks;
    std::vector<int32_t> row(static_cast<size_t>(num_slots));
    for (int32_t s = 0; s < num_slots; ++s) row[static_cast<size_t>(s)] = s % num_experts;
    p.physical_to_logical.assign(static_cast<size_t>(num_moe_layers), row);
    return p;
}

void expert_placement::validate() const {
    if (num_experts < 1 || num_ranks < 1 || slots_per_rank < 1 || num_physical() < num_experts) {
        throw error(errc::invalid_argument, "expert_placement: num_experts " + std::to_string(num_experts) +
                                                ", num_ranks " + std::to_string(num_ranks) + ", slots_per_rank " +
                                                std::to_string(slots_per_rank) + " cannot hold every expert");
    }
    for (int32_t l = 0; l < num_moe_layers(); ++l) {
        const auto& layer = physical_to_logical[static_cast<size_t>(l)];
        const std::string where = "expert_placement layer " + std::to_string(l);
        if (static_cast<int32_t>(layer.size()) != num_physical()) {
            throw error(errc::invalid_argument, where + ": " + std::to_string(layer.size()) + " slots, expected " +
                                                    std::to_string(num_physical()));
        }
        std::vector<int32_t> seen(static_cast<size_t>(num_experts), 0);
        for (size_t p = 0; p < layer.size(); ++p) {
            if (layer[p] < 0 || layer[p] >= num_experts) {
                throw error(errc::invalid_argument, where + " slot " + std::to_string(p) + ": expert " +
                                                        std::to_string(layer[p]) + " out of range");
            }
            ++seen[static_cast<size_t>(layer[p])];
        }
        for (int32_t e = 0; e < num_experts; ++e) {
            if (seen[static_cast<size_t>(e)] == 0) {
                throw error(errc::invalid_argument,
                            where + ": logical expert " + std::to_string(e) + " has no replica");
            }
        }
    }
}

std::vector<int32_t> expert_placement::replica_counts(int32_t layer) const {
    ZMOE_CHECK(layer >= 0 && layer < num_moe_layers(), "expert_placement: no layer " << layer);
    std::vector<int32_t> counts(static_cast<size_t>(num_experts), 0);
    for (const int32_t e : physical_to_logical[static_cast<size_t>(layer)]) ++counts[static_cast<size_t>(e)];
    return counts;
}

std::vector<std::vector<int32_t>> expert_placement::logical_to_physical(int32_t layer) const {
    ZMOE_CHECK(layer >= 0 && layer < num_moe_layers(), "expert_placement: no layer " << layer);
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(num_experts));
    const auto& slots = physical_to_logical[static_cast<size_t>(layer)];
    for (size_t p = 0; p < slots.size(); ++p) out[static_cast<size_t>(slots[p])].push_back(static_cast<int32_t>(p));
    return out;
}

std::span<const int32_t> expert_placement::slots(int32_t layer, int32_t rank) const {
    ZMOE_CHECK(layer >= 0 && layer < num_moe_layers() && rank >= 0 && rank < num_ranks,
               "expert_placement: no layer " << layer << " rank " << rank);
    const auto& row = physical_to_logical[static_cast<size_t>(layer)];
    return std::span<const int32_t>(row).subspan(static_cast<size_t>(rank) * static_cast<size_t>(slots_per_rank),
                                                 static_cast<size_t>(slots_per_rank));
}

std::vector<expert_replica> expert_placement::replicas(int32_t layer, int32_t expert) const {
    std::vector<expert_replica> out;
    const auto& row = physical_to_logical[static_cast<size_t>(layer)];
    for (size_t p = 0; p < row.size(); ++p) {
        if (row[p] == expert) {
            const auto q = static_cast<int32_t>(p);
            out.push_back({.rank = q / slots_per_rank, .slot = q % slots_per_rank});
        }
    }
    return out;
}

expert_replica expert_placement::pick(int32_t layer, int32_t expert, int64_t token_index) const {
    // A scan of one layer's slots (a few hundred at most) instead of a cached table keeps this plain data.
    const auto& row = physical_to_logical[static_cast<size_t>(layer)];
    int64_t count = 0;
    for (const int32_t e : row) count += e == expert ? 1 : 0;
    ZMOE_CHECK(count > 0, "expert_placement: layer " << layer << " has no replica of expert " << expert);
    int64_t nth = token_index % count;
    for (size_t p = 0; p < row.size(); ++p) {
        if (row[p] == expert && nth-- == 0) {
            const auto q = static_cast<int32_t>(p);
            return {.rank = q / slots_per_rank, .slot = q % slots_per_rank};
        }
    }
    return {};  // unreachable: count > 0
}

void expert_placement::check_moves(const std::vector<expert_slot_move>& moves) const {
    const auto physical = static_cast<int64_t>(num_physical());
    for (const auto& m : moves) {
        if (static_cast<int64_t>(m.layer) >= num_moe_layers() || m.src_rank < 0 || m.src_rank >= num_ranks ||
            static_cast<int64_t>(m.slot) >= physical || static_cast<int64_t>(m.src_slot) >= physical ||
            m.logical_expert < 0 || m.logical_expert >= num_experts)
            throw error(errc::invalid_argument, "expert move out of range: layer " + std::to_string(m.layer) +
                                                    " slot " + std::to_string(m.slot) + " from rank " +
                                                    std::to_string(m.src_rank));
    }
}

void expert_placement::apply_moves(const std::vector<expert_slot_move>& moves) {
    check_moves(moves);
    for (const auto& m : moves) physical_to_logical[m.layer][m.slot] = m.logical_expert;
}

}  // namespace zmoe
