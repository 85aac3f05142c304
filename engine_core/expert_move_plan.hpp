#pragma once
// The weight transfers that turn one expert placement into another: what each rank must load into which of its
// physical slots, and from where.

#include <cstdint>
#include <vector>

#include "messages/expert_placement.hpp"

namespace zmoe {

/// Copy the weights of `logical_expert` of `layer` from physical slot `src_slot` (on `src_rank`, as placed in the
/// old placement) into physical slot `dst_slot` (on `dst_rank`). Slots are global physical slot ids.
struct expert_move {
    int32_t layer = 0;
    int32_t logical_expert = 0;
    int32_t dst_rank = 0;
    int32_t dst_slot = 0;
    int32_t src_rank = 0;
    int32_t src_slot = 0;

    bool operator==(const expert_move&) const = default;
};

/// One move per physical slot whose logical expert differs between `from` and `to`, ordered by (layer, dst_slot);
/// nothing for slots that keep their expert. The source is, in order of preference: a slot of the destination rank
/// itself (a local copy), a rank on the same node (ranks split evenly into `num_nodes` consecutive nodes), the rank
/// with the fewest sends so far in this layer, the lower rank. Sources name `from`'s slots: a worker must read every
/// source of a layer before it overwrites any slot of it (stage the incoming weights, then swap). Throws
/// zmoe::error(invalid_argument) when the two placements differ in shape or either is invalid.
std::vector<expert_move> plan_expert_moves(const expert_placement& from, const expert_placement& to,
                                           int32_t num_nodes = 1);

/// The moves whose destination is `rank`.
std::vector<expert_move> moves_to_rank(const std::vector<expert_move>& moves, int32_t rank);

}  // namespace zmoe
