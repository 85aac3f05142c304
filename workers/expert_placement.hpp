#pragma once
// Which rank holds which experts. Per MoE layer, each rank has a list of physical expert slots, each slot
// holding one logical expert's weights; a logical expert may have several replicas (EPLB's redundant experts).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zmoe {

/// A physical copy of a logical expert.
struct expert_replica {
    int32_t rank = 0;
    int32_t slot = 0;  ///< index into that rank's slot list for the layer
};

class expert_placement {
  public:
    expert_placement() = default;
    /// slots[moe_layer][rank] = logical expert of each slot. Every logical expert in [0, num_experts) must have
    /// at least one replica in every layer; throws zmoe::error(invalid_argument) otherwise.
    expert_placement(int64_t num_experts, std::vector<std::vector<std::vector<int32_t>>> slots);

    /// Rank r owns experts [r*E/N, (r+1)*E/N) in every layer, one replica each.
    static expert_placement make_default(int64_t num_moe_layers, int64_t num_experts, int world_size);

    int64_t num_moe_layers() const { return static_cast<int64_t>(slots_.size()); }
    int64_t num_experts() const { return num_experts_; }
    int world_size() const { return slots_.empty() ? 0 : static_cast<int>(slots_[0].size()); }
    /// Logical experts of `rank`'s slots in `moe_layer`.
    const std::vector<int32_t>& slots(int64_t moe_layer, int rank) const { return slots_[moe_layer][rank]; }
    /// Replicas of `expert` in `moe_layer`, ordered by (rank, slot).
    const std::vector<expert_replica>& replicas(int64_t moe_layer, int64_t expert) const {
        return replicas_[moe_layer][expert];
    }
    /// The replica serving the `token_index`-th routed token of `expert`: a deterministic spread over replicas.
    const expert_replica& pick(int64_t moe_layer, int64_t expert, int64_t token_index) const {
        const auto& r = replicas_[moe_layer][expert];
        return r[static_cast<size_t>(token_index) % r.size()];
    }

  private:
    int64_t num_experts_ = 0;
    std::vector<std::vector<std::vector<int32_t>>> slots_;            // [layer][rank][slot] -> expert
    std::vector<std::vector<std::vector<expert_replica>>> replicas_;  // [layer][expert] -> replicas
};

}  // namespace zmoe
