#pragma once
// Which logical expert's weights sit in which physical expert slot of which rank, per MoE layer: the one placement
// type of the engine. Plain data: the engine core decides it (expert_placement::initial, then EPLB in
// engine_core/eplb.hpp) and sends physical_to_logical in the welcome and as expert moves; the workers apply it and
// route each token to one of the physical replicas of the logical experts it picked (pick).

#include <cstdint>
#include <span>
#include <vector>

namespace zmoe {

struct expert_slot_move;  // messages/worker_protocol.hpp

/// A physical copy of a logical expert.
struct expert_replica {
    int32_t rank = 0;
    int32_t slot = 0;  ///< index into that rank's slots (physical slot - rank * slots_per_rank)
};

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

    /// Logical experts of `rank`'s slots in `layer` (a view into physical_to_logical).
    std::span<const int32_t> slots(int32_t layer, int32_t rank) const;
    /// Replicas of `expert` in `layer`, ordered by physical slot, i.e. by (rank, slot).
    std::vector<expert_replica> replicas(int32_t layer, int32_t expert) const;
    /// The replica serving the `token_index`-th routed token of `expert`: replicas(layer, expert)[token_index mod
    /// their count], the deterministic spread every worker (CPU and CUDA, kernels/router_replica_choice.cu) uses.
    expert_replica pick(int32_t layer, int32_t expert, int64_t token_index) const;

    /// Throws zmoe::error(invalid_argument) unless every move names an existing layer, physical slots, source rank
    /// and logical expert of this placement. The one check of an EPLB move every worker backend runs first.
    void check_moves(const std::vector<expert_slot_move>& moves) const;
    /// The placement after `moves` (checked as check_moves does): each move's slot holds its logical expert.
    void apply_moves(const std::vector<expert_slot_move>& moves);

    bool operator==(const expert_placement&) const = default;
};

}  // namespace zmoe
