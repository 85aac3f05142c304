#include "engine_core/eplb_coordinator.hpp"

#include <algorithm>
#include <string>

#include "base/error.hpp"
#include "base/log.hpp"
#include "engine_core/eplb.hpp"
#include "engine_core/expert_move_plan.hpp"

namespace zmoe {

eplb_options eplb_options::of(const engine_config& c) {
    return eplb_options{.enabled = c.enable_eplb,
                        .interval = c.eplb_interval,
                        .window = c.eplb_window,
                        .stage_steps = c.eplb_stage_steps,
                        .min_gain = c.eplb_min_gain,
                        .num_nodes = c.num_nodes,
                        .num_ranks = c.workers,
                        .num_redundant_experts = c.num_redundant_experts};
}

eplb_coordinator::eplb_coordinator(eplb_options options, int32_t num_moe_layers, int32_t num_experts,
                                   metrics_registry& metrics)
    : options_(options), metrics_(metrics) {
    if (num_moe_layers <= 0) return;
    placement_ =
        expert_placement::initial(num_moe_layers, num_experts, options_.num_redundant_experts, options_.num_ranks);
    if (placement_->num_redundant() != options_.num_redundant_experts)
        ZMOE_LOG(info, "engine core: " << placement_->num_redundant() << " redundant expert slot(s) per layer so "
                                       << placement_->num_physical() << " slots split evenly over "
                                       << options_.num_ranks << " workers");
}

void eplb_coordinator::start() {
    if (!placement_ || load_window_) return;
    const int32_t window = options_.window > 0 ? options_.window : 32;
    load_window_ = std::make_unique<expert_load_window>(placement_->num_moe_layers(), placement_->num_experts, window);
}

void eplb_coordinator::step_done(const std::vector<step_result>& results) {
    if (!load_window_) return;
    ++steps_since_evaluation_;
    load_window_->add_step(results);  // checks every rank's counts have the window's size
    for (const auto& r : results) {
        if (r.expert_counts.empty()) continue;
        expert_tokens_.resize(r.expert_counts.size(), 0.0);
        for (size_t i = 0; i < r.expert_counts.size(); ++i) expert_tokens_[i] += r.expert_counts[i];
    }
}

std::optional<worker_expert_move> eplb_coordinator::maybe_rebalance(uint64_t next_step_id, clock_type::time_point now) {
    if (!options_.enabled || !placement_ || !load_window_ || move_pending()) return std::nullopt;
    if (options_.interval <= 0 || steps_since_evaluation_ < static_cast<uint64_t>(options_.interval))
        return std::nullopt;
    steps_since_evaluation_ = 0;
    const auto load = load_window_->load();
    rebalance_plan plan;
    try {
        plan = plan_rebalance(load, *placement_, options_.num_nodes, 0, std::max(0.0, options_.min_gain));
    } catch (const error& e) {
        ZMOE_LOG(warn, "engine core: EPLB skipped: " << e.what());
        return std::nullopt;
    }
    // The current placement on the latest window, every evaluation; before/after figures of adopted rebalances.
    metrics_.gauge_set("eplb_balancedness_current", plan.balancedness_before);
    if (plan.changed_layers.empty()) {
        metrics_.counter_add("eplb_plans_not_adopted");  // no layer improved: the placement stays
        return std::nullopt;
    }
    metrics_.gauge_set("eplb_balancedness_before", plan.balancedness_before);
    metrics_.gauge_set("eplb_balancedness_after", plan.balancedness_after);
    for (size_t l = 0; l < load.size(); ++l) {
        metrics_.gauge_set("eplb_layer_balancedness_before{layer=\"" + std::to_string(l) + "\"}",
                           layer_balancedness(load[l], placement_->physical_to_logical[l], options_.num_ranks));
        metrics_.gauge_set("eplb_layer_balancedness_after{layer=\"" + std::to_string(l) + "\"}",
                           layer_balancedness(load[l], plan.placement.physical_to_logical[l], options_.num_ranks));
    }
    const auto moves = plan_expert_moves(*placement_, plan.placement, options_.num_nodes);
    // Every rank stages the moves before step next_step_id (the message goes out before that step's), and the
    // steps go on meanwhile on the current placement; all switch before step apply_at_step.
    worker_expert_move msg;
    msg.move_id = next_move_id_++;
    msg.apply_at_step = next_step_id + static_cast<uint64_t>(std::max(0, options_.stage_steps));
    stage_step_ = next_step_id;
    switch_step_ = msg.apply_at_step;
    for (const auto& m : moves)
        msg.moves.push_back(expert_slot_move{static_cast<uint32_t>(m.layer), static_cast<uint32_t>(m.dst_slot),
                                             m.logical_expert, m.src_rank, static_cast<uint32_t>(m.src_slot)});
    for (int32_t r = 0; r < options_.num_ranks; ++r) acks_pending_.insert(r);
    move_started_at_ = now;
    placement_ = std::move(plan.placement);
    metrics_.counter_add("eplb_expert_moves", static_cast<double>(moves.size()));
    ZMOE_LOG(info, "engine core: EPLB rebalance " << msg.move_id << ": " << moves.size() << " slot move(s), "
                                                  << "balancedness " << plan.balancedness_before << " -> "
                                                  << plan.balancedness_after);
    return msg;
}

bool eplb_coordinator::move_done(const worker_expert_move_done& m, clock_type::time_point now) {
    if (!acks_pending_.erase(m.rank)) return false;
    if (m.switched_at_step != switch_step_)
        ZMOE_LOG(warn, "engine core: rank " << m.rank << " switched expert move " << m.move_id << " at step "
                                            << m.switched_at_step << ", not " << switch_step_);
    metrics_.counter_add("eplb_bytes_moved", static_cast<double>(m.bytes_moved));
    // Per rank and rebalance: the transfer's own time, and what the switch cost at its step boundary.
    metrics_.observe("eplb_transfer_ms", m.transfer_ms);
    metrics_.observe("eplb_switch_ms", m.switch_ms);
    metrics_.observe("eplb_install_ms", m.install_ms);
    if (!m.transfer_done) metrics_.counter_add("eplb_switches_waited");  // the switch step waited for the transfer
    if (!acks_pending_.empty()) return false;
    // The one metric whose name says "rebalance": completed rebalances (every rank installed the moves).
    metrics_.counter_add("eplb_rebalances");
    metrics_.observe("eplb_move_ms", std::chrono::duration<double, std::milli>(now - move_started_at_).count());
    return true;
}

}  // namespace zmoe
