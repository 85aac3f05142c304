#pragma once
// Expert-parallel load balancing: choose, per MoE layer, how many replicas each logical expert gets and which rank
// holds each replica, so that every rank receives about the same number of tokens. Hierarchical balanced packing
// in the manner of DeepSeek's EPLB; the algorithm is described in docs/scheduler.md.

#include <cstdint>
#include <span>
#include <vector>

#include "messages/expert_placement.hpp"

namespace zmoe {

/// One layer's placement: physical_to_logical of num_ranks * slots_per_rank slots, where
/// slots_per_rank = (num_experts + num_redundant_experts) / num_ranks.
///  1. Experts are cut into `num_groups` groups of consecutive ids (0 = one group per expert); groups are packed
///     onto nodes, num_groups / num_nodes each, balancing the nodes' load.
///  2. Within each node, its redundant slots go one at a time to the expert with the highest load per replica.
///  3. Within each node, replicas (each carrying load / replicas of its expert) are packed onto the node's ranks,
///     heaviest first, each to the least-loaded rank that still has a free slot.
/// Ties go to the lower index, so the result is deterministic. Falls back to one node when num_groups is not a
/// multiple of num_nodes. Throws zmoe::error(invalid_argument) when num_experts + num_redundant_experts is not a
/// multiple of num_ranks, num_ranks not a multiple of num_nodes, num_experts not a multiple of num_groups, or a load
/// is negative or not finite.
std::vector<int32_t> compute_layer_placement(std::span<const double> load, int32_t num_ranks, int32_t num_nodes,
                                             int32_t num_redundant_experts, int32_t num_groups = 0);

/// compute_layer_placement for every layer of `load` ([num_moe_layers][num_experts]).
expert_placement compute_placement(const std::vector<std::vector<double>>& load, int32_t num_ranks, int32_t num_nodes,
                                   int32_t num_redundant_experts, int32_t num_groups = 0);

/// mean / max over ranks of the tokens a rank receives, each expert's load split evenly over its replicas.
/// 1 when no rank receives anything.
double layer_balancedness(std::span<const double> load, std::span<const int32_t> physical_to_logical,
                          int32_t num_ranks);
/// layer_balancedness averaged over layers.
double balancedness(const std::vector<std::vector<double>>& load, const expert_placement& placement);

/// Reorders `candidate` (a layer placement) without changing any rank's load, so that as many slots as possible
/// keep the expert they hold in `current`: whole nodes are matched to nodes, then ranks to ranks within a node,
/// then slots within a rank (greedy by overlap).
std::vector<int32_t> align_layer_placement(std::vector<int32_t> candidate, std::span<const int32_t> current,
                                           int32_t num_ranks, int32_t num_nodes);

struct rebalance_plan {
    expert_placement placement;           ///< the placement to adopt (== current where nothing improved)
    std::vector<int32_t> changed_layers;  ///< layers whose placement changed, ascending
    double balancedness_before = 1.0;     ///< of current, on the load, mean over layers
    double balancedness_after = 1.0;      ///< of placement, on the load, mean over layers
};

/// A new placement for `load` ([num_moe_layers][num_experts], typically expert_load_window::load()) with the slot
/// shape of `current`. Per layer, the recomputed (and aligned) placement replaces the current one only when its
/// balancedness on `load` is strictly greater than the current one's plus `min_gain`; so balancedness never drops.
rebalance_plan plan_rebalance(const std::vector<std::vector<double>>& load, const expert_placement& current,
                              int32_t num_nodes, int32_t num_groups = 0, double min_gain = 0.0);

}  // namespace zmoe
