#pragma once
// The engine core's half of expert-parallel load balancing while serving: it keeps the expert load of the last
// steps, decides when a rebalance is due, plans it (eplb.hpp, expert_move_plan.hpp) and follows every rank's
// acknowledgement. One rebalance is in flight at a time, in three steps of the step sequence:
//
//   stage  (step S):   the move message goes out before step S; every rank starts copying the experts it gains
//                      while steps S, S+1, ... keep serving on the old placement;
//   switch (step W):   W = S + eplb_stage_steps; every rank serves step W and later on the new placement;
//   acknowledge:       each rank's expert_move_done (switched_at_step should be W); the rebalance is complete when
//                      every rank has answered, and only then may the next one be planned.
//
// Plain class: no sockets. The engine core sends what it returns; metrics go to the registry it is given.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "base/metrics.hpp"
#include "engine_core/expert_load.hpp"
#include "messages/engine_config.hpp"
#include "messages/expert_placement.hpp"
#include "messages/step_types.hpp"
#include "messages/worker_protocol.hpp"

namespace zmoe {

struct eplb_options {
    bool enabled = false;               ///< --enable-eplb: without it the placement never changes
    int32_t interval = 32;              ///< finished steps between two rebalance evaluations (<= 0: never)
    int32_t window = 64;                ///< steps of expert load the plan looks at (<= 0: 32)
    int32_t stage_steps = 4;            ///< steps between stage and switch (negative: 0)
    double min_gain = 0.02;             ///< a layer's balancedness must improve by this much to move (negative: 0)
    int32_t num_nodes = 1;              ///< hierarchical packing
    int32_t num_ranks = 1;              ///< expert-parallel ranks
    int32_t num_redundant_experts = 0;  ///< extra physical slots per MoE layer (rounded up to split evenly)

    static eplb_options of(const engine_config& c);
};

class eplb_coordinator {
  public:
    using clock_type = std::chrono::steady_clock;

    /// A model with no MoE layer (`num_moe_layers` 0) has no placement and never rebalances. Metrics (eplb_*) are
    /// written to `metrics`, which must outlive this object.
    eplb_coordinator(eplb_options options, int32_t num_moe_layers, int32_t num_experts, metrics_registry& metrics);

    /// The current placement (the one the next plan starts from), or nullopt without MoE layers.
    const std::optional<expert_placement>& placement() const { return placement_; }
    /// Starts keeping the expert load: from now on every finished step counts (called when serving starts).
    void start();
    /// One finished step's per-rank results: adds their expert counts to the load window and to the routed-token
    /// totals (nothing before start()). Throws zmoe::error(protocol), counting nothing, when a rank's non-empty
    /// counts do not have the model's (layers x experts) size.
    void step_done(const std::vector<step_result>& results);
    /// Called after every finished step: when a rebalance is due (enabled, `interval` steps since the last
    /// evaluation, none in flight) plans one on the load window. Returns the message every rank must take before
    /// step `next_step_id` (the stage step; it switches at next_step_id + stage_steps), or nullopt when nothing
    /// is to move. Adopts the new placement at once: the next plan starts from it.
    std::optional<worker_expert_move> maybe_rebalance(uint64_t next_step_id, clock_type::time_point now);
    /// A rank's acknowledgement of the move in flight; an unexpected one (no move pending for that rank) is
    /// ignored. Returns true when it completed the rebalance (every rank has acknowledged).
    bool move_done(const worker_expert_move_done& m, clock_type::time_point now);

    /// Whether a rebalance is in flight (staged, some rank still to acknowledge).
    bool move_pending() const { return !acks_pending_.empty(); }
    /// The in-flight (or latest) rebalance's stage and switch steps, and its id.
    uint64_t stage_step() const { return stage_step_; }
    uint64_t switch_step() const { return switch_step_; }
    uint64_t last_move_id() const { return next_move_id_ - 1; }
    /// Steps in the load window: grows to the window's size, then stays (0 before start()).
    int32_t load_window_steps() const { return load_window_ ? load_window_->num_steps() : 0; }
    /// Tokens routed to each (MoE layer, expert) since start, summed over ranks; layer-major, empty before any.
    const std::vector<double>& expert_tokens() const { return expert_tokens_; }

  private:
    eplb_options options_;
    metrics_registry& metrics_;
    std::optional<expert_placement> placement_;
    std::unique_ptr<expert_load_window> load_window_;
    std::vector<double> expert_tokens_;
    uint64_t steps_since_evaluation_ = 0;
    uint64_t next_move_id_ = 1;
    std::set<int32_t> acks_pending_;
    uint64_t stage_step_ = 0;
    uint64_t switch_step_ = 0;
    clock_type::time_point move_started_at_;
};

}  // namespace zmoe
