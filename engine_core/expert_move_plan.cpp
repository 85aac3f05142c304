#include "engine_core/expert_move_plan.hpp"

#include <string>
#include <tuple>

#include "base/error.hpp"

namespace zmoe {

std::vector<expert_move> plan_expert_moves(const expert_placement& from, const expert_placement& to,
                                           int32_t num_nodes) {
    from.validate();
    to.validate();
    if (from.num_experts != to.num_experts || from.num_ranks != to.num_ranks ||
        from.slots_per_rank != to.slots_per_rank || from.num_moe_layers() != to.num_moe_layers()) {
        throw error(errc::invalid_argument, "plan_expert_moves: placements differ in shape");
    }
    if (num_nodes < 1 || from.num_ranks % num_nodes != 0) {
        throw error(errc::invalid_argument, "plan_expert_moves: num_ranks (" + std::to_string(from.num_ranks) +
                                                ") is not a multiple of num_nodes (" + std::to_string(num_nodes) + ")");
    }
    const int32_t ranks_per_node = from.num_ranks / num_nodes;
    std::vector<expert_move> moves;
    for (int32_t l = 0; l < from.num_moe_layers(); ++l) {
        const auto& old_slots = from.physical_to_logical[static_cast<size_t>(l)];
        const auto& new_slots = to.physical_to_logical[static_cast<size_t>(l)];
        const auto holders = from.logical_to_physical(l);
        std::vector<int32_t> num_sends(static_cast<size_t>(from.num_ranks), 0);
        for (int32_t p = 0; p < to.num_physical(); ++p) {
            const int32_t e = new_slots[static_cast<size_t>(p)];
            if (e == old_slots[static_cast<size_t>(p)]) continue;
            const int32_t dst_rank = to.rank_of_slot(p);
            int32_t best = -1;
            auto key = [&](int32_t slot) {
                const int32_t r = from.rank_of_slot(slot);
                return std::tuple(r != dst_rank, r / ranks_per_node != dst_rank / ranks_per_node,
                                  r == dst_rank ? 0 : num_sends[static_cast<size_t>(r)], r);
            };
            for (const int32_t slot : holders[static_cast<size_t>(e)]) {
                if (best < 0 || key(slot) < key(best)) best = slot;
            }
            const int32_t src_rank = from.rank_of_slot(best);
            if (src_rank != dst_rank) ++num_sends[static_cast<size_t>(src_rank)];
            moves.push_back({.layer = l,
                             .logical_expert = e,
                             .dst_rank = dst_rank,
                             .dst_slot = p,
                             .src_rank = src_rank,
                             .src_slot = best});
        }
    }
    return moves;
}

std::vector<expert_move> moves_to_rank(const std::vector<expert_move>& moves, int32_t rank) {
    std::vector<expert_move> out;
    for (const expert_move& m : moves) {
        if (m.dst_rank == rank) out.push_back(m);
    }
    return out;
}

}  // namespace zmoe
