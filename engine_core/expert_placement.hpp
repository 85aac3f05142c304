#pragma once
// Which logical expert's weights sit in which physical expert slot of which rank, per MoE layer. Plain data: the
// engine core computes it (eplb.hpp) and sends it to the workers, which route each token to one of the physical
// replicas of the logical experts it picked.

#include <cstdint>
#include <vector>

namespace zmoe {

/// Rank r owns physical slots [r * slots_per_rank, (r + 1) * slots_per_rank). Every logical expert has at least one
/// replica in every layer; num_ranks * slots_per_rank - num_experts slots are redundant replicas.
struct expert_placement {
    int32_t num_experts = 0;
    int32_t num_ranks = 0;
    int32_t slots_per_rank = 0;
    /// [num_moe_layers][num_ranks * slots_per_rank]: the logical expert held by each physical slot.
    std::vector<std::vector<int32_t>> physical_to_logical;

    int32_t num_moe_layers() const { return static_cast<int32_t>(physical_to_logical.size()); }
    int32_t num_physical() const { return num_ranks * slots_per_rank; }
    int32_t num_redundant() const { return num_physical() - num_experts; }
    int32_t rank_of_slot(int32_t physical_slot) const { return physical_slot / slots_per_rank; }

    /// Physical slot p holds logical expert p; no redundancy. num_experts must be a multiple of num_ranks, else
    /// zmoe::error(invalid_argument).
    static expert_placement identity(int32_t num_moe_layers, int32_t num_experts, int32_t num_ranks);

    /// The placement a run starts with: num_experts + num_redundant slots per layer, rounded up to a multiple of
    /// num_ranks so every rank holds as many; slot p holds logical expert p mod num_experts.
    static expert_placement initial(int32_t num_moe_layers, int32_t num_experts, int32_t num_redundant,
                                    int32_t num_ranks);

    /// Throws zmoe::error(invalid_argument) naming the layer/slot when the shape is inconsistent, a slot holds an
    /// expert id out of range, or a logical expert has no replica.
    void validate() const;

    /// Replicas of each logical expert in `layer`, [num_experts].
    std::vector<int32_t> replica_counts(int32_t layer) const;
    /// Physical slots of each logical expert in `layer`, ascending, [num_experts][replicas].
    std::vector<std::vector<int32_t>> logical_to_physical(int32_t layer) const;

    bool operator==(const expert_placement&) const = default;
};

}  // namespace zmoe
