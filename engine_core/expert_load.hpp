#pragma once
// What EPLB balances on: how many tokens each logical expert of each MoE layer received over the last few steps.

#include <cstdint>
#include <span>
#include <vector>

#include "messages/step_types.hpp"

namespace zmoe {

/// Sliding window over the last `window_steps` steps of per-layer, per-logical-expert token counts, summed over
/// ranks. Layout of one step's counts: [num_moe_layers * num_experts], row-major (layer-major), as in
/// step_result::expert_counts. Memory: window_steps * num_moe_layers * num_experts * 4 bytes.
class expert_load_window {
  public:
    /// All three >= 1, else zmoe::error(invalid_argument).
    expert_load_window(int32_t num_moe_layers, int32_t num_experts, int32_t window_steps);

    /// Adds one step from every rank's result. A result with empty expert_counts adds nothing (a rank that reports
    /// no routing); any other size than num_moe_layers * num_experts throws zmoe::error(protocol), adding nothing.
    void add_step(const std::vector<step_result>& results);
    /// Adds one step of counts already summed over ranks; size must be num_moe_layers * num_experts.
    void add_step_counts(std::span<const uint32_t> counts);

    /// Tokens per logical expert of `layer` over the window, [num_experts].
    std::vector<double> layer_load(int32_t layer) const;
    /// Tokens per layer and logical expert over the window, [num_moe_layers][num_experts].
    std::vector<std::vector<double>> load() const;

    /// Steps currently in the window (min(steps added since clear, window_steps)).
    int32_t num_steps() const { return num_filled_; }
    int32_t window_steps() const { return window_steps_; }
    int32_t num_moe_layers() const { return num_layers_; }
    int32_t num_experts() const { return num_experts_; }
    void clear();

  private:
    size_t step_size() const { return static_cast<size_t>(num_layers_) * static_cast<size_t>(num_experts_); }
    void push(const std::vector<uint32_t>& counts);

    int32_t num_layers_;
    int32_t num_experts_;
    int32_t window_steps_;
    int32_t num_filled_ = 0;
    int32_t next_ = 0;              // ring slot the next step overwrites
    std::vector<uint32_t> ring_;    // [window_steps][num_layers * num_experts]
    std::vector<uint64_t> totals_;  // [num_layers * num_experts], sum of the ring
};

}  // namespace zmoe
