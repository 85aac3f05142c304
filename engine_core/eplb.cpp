#include "engine_core/eplb.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>

#include "base/check.hpp"
#include "base/error.hpp"

namespace zmoe {
namespace {

[[noreturn]] void bad(const std::string& what) { throw error(errc::invalid_argument, "eplb: " + what); }

/// Packs items onto `num_bins` bins of exactly `items_per_bin` items, heaviest first onto the least-loaded bin that
/// has room. Returns each bin's items in the order they were placed.
std::vector<std::vector<int32_t>> balanced_packing(std::span<const double> weights, int32_t num_bins,
                                                   int32_t items_per_bin) {
    ZMOE_CHECK(static_cast<int64_t>(weights.size()) == static_cast<int64_t>(num_bins) * items_per_bin,
               "balanced_packing: " << weights.size() << " items for " << num_bins << " x " << items_per_bin);
    std::vector<int32_t> order(weights.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return weights[static_cast<size_t>(a)] > weights[static_cast<size_t>(b)];
    });
    std::vector<std::vector<int32_t>> bins(static_cast<size_t>(num_bins));
    std::vector<double> bin_load(static_cast<size_t>(num_bins), 0.0);
    for (const int32_t item : order) {
        int32_t best = -1;
        for (int32_t b = 0; b < num_bins; ++b) {
            if (static_cast<int32_t>(bins[static_cast<size_t>(b)].size()) == items_per_bin) continue;
            if (best < 0 || bin_load[static_cast<size_t>(b)] < bin_load[static_cast<size_t>(best)]) best = b;
        }
        bins[static_cast<size_t>(best)].push_back(item);
        bin_load[static_cast<size_t>(best)] += weights[static_cast<size_t>(item)];
    }
    return bins;
}

/// Replica counts for `load` over `num_replicas` slots: one each, then each extra slot to the highest load per
/// replica (ties: fewer replicas, then lower index).
std::vector<int32_t> replicate(std::span<const double> load, int32_t num_replicas) {
    std::vector<int32_t> counts(load.size(), 1);
    for (int32_t k = static_cast<int32_t>(load.size()); k < num_replicas; ++k) {
        size_t best = 0;
        for (size_t e = 1; e < load.size(); ++e) {
            const double a = load[e] / counts[e];
            const double b = load[best] / counts[best];
            if (a > b || (a == b && counts[e] < counts[best])) best = e;
        }
        ++counts[best];
    }
    return counts;
}

size_t multiset_overlap(std::vector<int32_t> a, std::vector<int32_t> b) {
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    size_t n = 0;
    for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
        if (a[i] == b[j]) {
            ++n, ++i, ++j;
        } else if (a[i] < b[j]) {
            ++i;
        } else {
            ++j;
        }
    }
    return n;
}

/// Permutes the `num_bins` consecutive bins of `bin_size` slots starting at `offset` in `candidate` so that each
/// lands on the bin of `current` it overlaps most (greedy over all pairs, biggest overlap first).
void match_bins(std::vector<int32_t>& candidate, std::span<const int32_t> current, size_t offset, int32_t num_bins,
                size_t bin_size) {
    auto bin = [&](std::span<const int32_t> v, int32_t b) {
        auto first = v.begin() + static_cast<std::ptrdiff_t>(offset + static_cast<size_t>(b) * bin_size);
        return std::vector<int32_t>(first, first + static_cast<std::ptrdiff_t>(bin_size));
    };
    std::vector<std::tuple<size_t, int32_t, int32_t>> pairs;  // (overlap, candidate bin, current bin)
    for (int32_t c = 0; c < num_bins; ++c) {
        for (int32_t k = 0; k < num_bins; ++k)
            pairs.emplace_back(multiset_overlap(bin(candidate, c), bin(current, k)), c, k);
    }
    std::stable_sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
        if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
        return (std::get<1>(a) == std::get<2>(a)) > (std::get<1>(b) == std::get<2>(b));  // keep bins in place on ties
    });
    std::vector<int32_t> target(static_cast<size_t>(num_bins), -1);
    std::vector<bool> taken(static_cast<size_t>(num_bins), false);
    for (const auto& [overlap, c, k] : pairs) {
        if (target[static_cast<size_t>(c)] >= 0 || taken[static_cast<size_t>(k)]) continue;
        target[static_cast<size_t>(c)] = k;
        taken[static_cast<size_t>(k)] = true;
    }
    const std::vector<int32_t> before = candidate;
    for (int32_t c = 0; c < num_bins; ++c) {
        const std::vector<int32_t> items = bin(before, c);
        std::copy(items.begin(), items.end(),
                  candidate.begin() + static_cast<std::ptrdiff_t>(offset + static_cast<size_t>(target[c]) * bin_size));
    }
}

void check_loads(std::span<const double> load) {
    for (size_t e = 0; e < load.size(); ++e) {
        if (!std::isfinite(load[e]) || load[e] < 0)
            bad("load of expert " + std::to_string(e) + " is negative or not finite");
    }
}

}  // namespace

std::vector<int32_t> compute_layer_placement(std::span<const double> load, int32_t num_ranks, int32_t num_nodes,
                                             int32_t num_redundant_experts, int32_t num_groups) {
    const auto num_experts = static_cast<int32_t>(load.size());
    const int32_t num_physical = num_experts + num_redundant_experts;
    if (num_experts < 1) bad("no experts");
    if (num_ranks < 1 || num_nodes < 1) bad("num_ranks and num_nodes must be >= 1");
    if (num_redundant_experts < 0) bad("num_redundant_experts must be >= 0");
    if (num_physical % num_ranks != 0 || num_physical < num_ranks) {
        bad("num_experts + num_redundant_experts (" + std::to_string(num_experts) + " + " +
            std::to_string(num_redundant_experts) + ") must be a positive multiple of num_ranks (" +
            std::to_string(num_ranks) + ") so that every rank gets the same number of slots");
    }
    if (num_ranks % num_nodes != 0) {
        bad("num_ranks (" + std::to_string(num_ranks) + ") must be a multiple of num_nodes (" +
            std::to_string(num_nodes) + ")");
    }
    if (num_groups == 0) num_groups = num_experts;
    if (num_groups < 1 || num_experts % num_groups != 0) {
        bad("num_experts (" + std::to_string(num_experts) + ") must be a multiple of num_groups (" +
            std::to_string(num_groups) + ")");
    }
    check_loads(load);
    // Without a whole number of groups per node the node level cannot be honoured: balance over all ranks at once.
    if (num_groups % num_nodes != 0) num_nodes = 1;

    const int32_t slots_per_rank = num_physical / num_ranks;
    const int32_t ranks_per_node = num_ranks / num_nodes;
    const int32_t group_size = num_experts / num_groups;
    const int32_t physical_per_node = num_physical / num_nodes;

    // 1. Groups onto nodes.
    std::vector<double> group_load(static_cast<size_t>(num_groups), 0.0);
    for (int32_t e = 0; e < num_experts; ++e)
        group_load[static_cast<size_t>(e / group_size)] += load[static_cast<size_t>(e)];
    const auto node_groups = balanced_packing(group_load, num_nodes, num_groups / num_nodes);

    std::vector<int32_t> placement(static_cast<size_t>(num_physical), -1);
    for (int32_t n = 0; n < num_nodes; ++n) {
        std::vector<int32_t> groups = node_groups[static_cast<size_t>(n)];
        std::sort(groups.begin(), groups.end());
        std::vector<int32_t> experts;
        for (const int32_t g : groups) {
            for (int32_t e = g * group_size; e < (g + 1) * group_size; ++e) experts.push_back(e);
        }
        std::vector<double> node_load;
        for (const int32_t e : experts) node_load.push_back(load[static_cast<size_t>(e)]);

        // 2. Redundant replicas within the node.
        const std::vector<int32_t> counts = replicate(node_load, physical_per_node);

        // 3. Replicas onto the node's ranks.
        std::vector<int32_t> replica_expert;
        std::vector<double> replica_load;
        for (size_t i = 0; i < experts.size(); ++i) {
            for (int32_t k = 0; k < counts[i]; ++k) {
                replica_expert.push_back(experts[i]);
                replica_load.push_back(node_load[i] / counts[i]);
            }
        }
        const auto rank_items = balanced_packing(replica_load, ranks_per_node, slots_per_rank);
        for (int32_t b = 0; b < ranks_per_node; ++b) {
            const int32_t rank = n * ranks_per_node + b;
            for (int32_t s = 0; s < slots_per_rank; ++s) {
                const int32_t item = rank_items[static_cast<size_t>(b)][static_cast<size_t>(s)];
                placement[static_cast<size_t>(rank * slots_per_rank + s)] = replica_expert[static_cast<size_t>(item)];
            }
        }
    }
    return placement;
}

expert_placement compute_placement(const std::vector<std::vector<double>>& load, int32_t num_ranks, int32_t num_nodes,
                                   int32_t num_redundant_experts, int32_t num_groups) {
    if (load.empty()) bad("no MoE layers");
    expert_placement p;
    p.num_experts = static_cast<int32_t>(load[0].size());
    p.num_ranks = num_ranks;
    for (size_t l = 0; l < load.size(); ++l) {
        if (load[l].size() != load[0].size()) bad("layer " + std::to_string(l) + " has a different expert count");
        p.physical_to_logical.push_back(
            compute_layer_placement(load[l], num_ranks, num_nodes, num_redundant_experts, num_groups));
    }
    p.slots_per_rank = static_cast<int32_t>(p.physical_to_logical[0].size()) / num_ranks;
    return p;
}

double layer_balancedness(std::span<const double> load, std::span<const int32_t> physical_to_logical,
                          int32_t num_ranks) {
    ZMOE_CHECK(num_ranks >= 1 && physical_to_logical.size() % static_cast<size_t>(num_ranks) == 0,
               "layer_balancedness: " << physical_to_logical.size() << " slots over " << num_ranks << " ranks");
    const size_t slots_per_rank = physical_to_logical.size() / static_cast<size_t>(num_ranks);
    std::vector<int32_t> replicas(load.size(), 0);
    for (const int32_t e : physical_to_logical) {
        ZMOE_CHECK(e >= 0 && static_cast<size_t>(e) < load.size(), "layer_balancedness: expert " << e);
        ++replicas[static_cast<size_t>(e)];
    }
    double total = 0.0;
    double max_rank = 0.0;
    for (size_t r = 0; r < static_cast<size_t>(num_ranks); ++r) {
        double rank_load = 0.0;
        for (size_t s = 0; s < slots_per_rank; ++s) {
            const auto e = static_cast<size_t>(physical_to_logical[r * slots_per_rank + s]);
            rank_load += load[e] / replicas[e];
        }
        total += rank_load;
        max_rank = std::max(max_rank, rank_load);
    }
    return max_rank > 0.0 ? total / num_ranks / max_rank : 1.0;
}

double balancedness(const std::vector<std::vector<double>>& load, const expert_placement& placement) {
    ZMOE_CHECK(static_cast<int32_t>(load.size()) == placement.num_moe_layers(),
               "balancedness: load of " << load.size() << " layers for " << placement.num_moe_layers());
    if (load.empty()) return 1.0;
    double sum = 0.0;
    for (size_t l = 0; l < load.size(); ++l) {
        sum += layer_balancedness(load[l], placement.physical_to_logical[l], placement.num_ranks);
    }
    return sum / static_cast<double>(load.size());
}

std::vector<int32_t> align_layer_placement(std::vector<int32_t> candidate, std::span<const int32_t> current,
                                           int32_t num_ranks, int32_t num_nodes) {
    ZMOE_CHECK(candidate.size() == current.size() && num_ranks >= 1 && num_nodes >= 1 && num_ranks % num_nodes == 0 &&
                   candidate.size() % static_cast<size_t>(num_ranks) == 0,
               "align_layer_placement: shapes do not match");
    const size_t slots_per_rank = candidate.size() / static_cast<size_t>(num_ranks);
    const int32_t ranks_per_node = num_ranks / num_nodes;
    if (num_nodes > 1) match_bins(candidate, current, 0, num_nodes, slots_per_rank * ranks_per_node);
    for (int32_t n = 0; n < num_nodes; ++n) {
        match_bins(candidate, current, static_cast<size_t>(n) * ranks_per_node * slots_per_rank, ranks_per_node,
                   slots_per_rank);
    }
    // Within a rank: an expert already in some slot stays in that slot; the rest fill the freed slots in order.
    for (size_t r = 0; r < static_cast<size_t>(num_ranks); ++r) {
        const size_t base = r * slots_per_rank;
        std::vector<int32_t> pool(candidate.begin() + static_cast<std::ptrdiff_t>(base),
                                  candidate.begin() + static_cast<std::ptrdiff_t>(base + slots_per_rank));
        std::vector<int32_t> out(slots_per_rank, -1);
        for (size_t s = 0; s < slots_per_rank; ++s) {
            auto it = std::find(pool.begin(), pool.end(), current[base + s]);
            if (it == pool.end()) continue;
            out[s] = *it;
            pool.erase(it);
        }
        auto next = pool.begin();
        for (size_t s = 0; s < slots_per_rank; ++s) {
            if (out[s] < 0) out[s] = *next++;
        }
        std::copy(out.begin(), out.end(), candidate.begin() + static_cast<std::ptrdiff_t>(base));
    }
    return candidate;
}

rebalance_plan plan_rebalance(const std::vector<std::vector<double>>& load, const expert_placement& current,
                              int32_t num_nodes, int32_t num_groups, double min_gain) {
    current.validate();
    if (static_cast<int32_t>(load.size()) != current.num_moe_layers()) {
        bad("load has " + std::to_string(load.size()) + " layers, placement " +
            std::to_string(current.num_moe_layers()));
    }
    rebalance_plan plan;
    plan.placement = current;
    double before = 0.0;
    double after = 0.0;
    for (size_t l = 0; l < load.size(); ++l) {
        if (static_cast<int32_t>(load[l].size()) != current.num_experts) {
            bad("layer " + std::to_string(l) + " load has " + std::to_string(load[l].size()) + " experts, placement " +
                std::to_string(current.num_experts));
        }
        const auto& cur = current.physical_to_logical[l];
        const double b_cur = layer_balancedness(load[l], cur, current.num_ranks);
        std::vector<int32_t> candidate = align_layer_placement(
            compute_layer_placement(load[l], current.num_ranks, num_nodes, current.num_redundant(), num_groups), cur,
            current.num_ranks, num_nodes);
        const double b_new = layer_balancedness(load[l], candidate, current.num_ranks);
        before += b_cur;
        if (b_new > b_cur + min_gain && candidate != cur) {
            plan.placement.physical_to_logical[l] = std::move(candidate);
            plan.changed_layers.push_back(static_cast<int32_t>(l));
            after += b_new;
        } else {
            after += b_cur;
        }
    }
    if (!load.empty()) {
        plan.balancedness_before = before / static_cast<double>(load.size());
        plan.balancedness_after = after / static_cast<double>(load.size());
    }
    return plan;
}

}  // namespace zmoe
