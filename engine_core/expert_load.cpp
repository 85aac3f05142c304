#include "engine_core/expert_load.hpp"

#include <algorithm>
#include <string>

#include "base/check.hpp"
#include "base/error.hpp"

namespace zmoe {

expert_load_window::expert_load_window(int32_t num_moe_layers, int32_t num_experts, int32_t window_steps)
    : num_layers_(num_moe_layers), num_experts_(num_experts), window_steps_(window_steps) {
    if (num_moe_layers < 1 || num_experts < 1 || window_steps < 1) {
        throw error(errc::invalid_argument, "expert_load_window: num_moe_layers (" + std::to_string(num_moe_layers) +
                                                "), num_experts (" + std::to_string(num_experts) +
                                                ") and window_steps (" + std::to_string(window_steps) +
                                                ") must all be >= 1");
    }
    ring_.assign(static_cast<size_t>(window_steps) * step_size(), 0);
    totals_.assign(step_size(), 0);
}

void expert_load_window::add_step(const std::vector<step_result>& results) {
    std::vector<uint32_t> sum(step_size(), 0);
    for (const step_result& res : results) {
        if (res.expert_counts.empty()) continue;
        if (res.expert_counts.size() != step_size()) {
            throw error(errc::protocol,
                        "step " + std::to_string(res.step_id) + " rank " + std::to_string(res.rank) +
                            ": expert_counts has " + std::to_string(res.expert_counts.size()) +
                            " entries, expected num_moe_layers * num_experts = " + std::to_string(step_size()));
        }
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += res.expert_counts[i];
    }
    push(sum);
}

void expert_load_window::add_step_counts(std::span<const uint32_t> counts) {
    if (counts.size() != step_size()) {
        throw error(errc::invalid_argument, "expert_load_window::add_step_counts: " + std::to_string(counts.size()) +
                                                " counts, expected " + std::to_string(step_size()));
    }
    push(std::vector<uint32_t>(counts.begin(), counts.end()));
}

void expert_load_window::push(const std::vector<uint32_t>& counts) {
    uint32_t* slot = ring_.data() + static_cast<size_t>(next_) * step_size();
    for (size_t i = 0; i < counts.size(); ++i) {
        totals_[i] -= slot[i];  // zero while the window is filling
        totals_[i] += counts[i];
        slot[i] = counts[i];
    }
    next_ = (next_ + 1) % window_steps_;
    if (num_filled_ < window_steps_) ++num_filled_;
}

std::vector<double> expert_load_window::layer_load(int32_t layer) const {
    ZMOE_CHECK(layer >= 0 && layer < num_layers_, "expert_load_window: no layer " << layer);
    std::vector<double> out(static_cast<size_t>(num_experts_));
    const size_t base = static_cast<size_t>(layer) * static_cast<size_t>(num_experts_);
    for (size_t e = 0; e < out.size(); ++e) out[e] = static_cast<double>(totals_[base + e]);
    return out;
}

std::vector<std::vector<double>> expert_load_window::load() const {
    std::vector<std::vector<double>> out;
    out.reserve(static_cast<size_t>(num_layers_));
    for (int32_t l = 0; l < num_layers_; ++l) out.push_back(layer_load(l));
    return out;
}

void expert_load_window::clear() {
    std::fill(ring_.begin(), ring_.end(), 0u);
    std::fill(totals_.begin(), totals_.end(), 0u);
    num_filled_ = 0;
    next_ = 0;
}

}  // namespace zmoe
