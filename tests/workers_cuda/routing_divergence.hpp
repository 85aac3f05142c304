#pragma once
// Where two CUDA runs of one prompt (chunked and one-shot prefill) first route a token differently, from the
// executors' router traces (cuda_step_executor::set_router_trace), and whether that first difference is a near-tie
// that BF16 rounding decides: the decision's top-k margin in the router logits no larger than the logit difference
// between the runs, which itself and every router input before it are at BF16 precision. DeepSeek-V2's
// group-limited softmax router (router_kind::softmax_group_limited) only: the decision is recomputed on the host
// from the traced logits (groups by their best logit, topk_group groups kept, top-k experts within them).

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "workers/cuda/cuda_step_executor.hpp"

namespace zmoe::cuda::testing {

using router_trace = std::vector<cuda_step_executor::router_trace_entry>;

/// Router inputs that agree "to BF16 precision": max |a - b| / max |a| over a layer's rows within a few BF16
/// roundings (2^-8 relative each; the same bound as kSelfTolerance's 1%, doubled for the rows of a whole layer).
constexpr double kRouterInputAgreement = 0.02;

/// The group-limited greedy choice of `logits` (one token) and its decisive margin: the smaller of (the
/// topk_group-th best group's best logit - the next group's) and (the k-th best logit within the kept groups - the
/// next one there). +inf where a comparison does not exist.
struct routing_choice {
    std::set<int32_t> experts;
    double margin = INFINITY;
};

inline routing_choice group_limited_choice(const model_config& c, const float* logits) {
    const auto E = static_cast<int32_t>(c.num_experts), groups = static_cast<int32_t>(c.n_group);
    const int32_t per_group = E / groups, keep = static_cast<int32_t>(c.topk_group);
    const auto k = static_cast<size_t>(c.num_experts_per_tok);
    std::vector<std::pair<float, int32_t>> group_best;
    for (int32_t g = 0; g < groups; ++g) {
        float best = -INFINITY;
        for (int32_t e = g * per_group; e < (g + 1) * per_group; ++e) best = std::max(best, logits[e]);
        group_best.push_back({best, g});
    }
    std::sort(group_best.begin(), group_best.end(), [](auto a, auto b) { return a.first > b.first; });
    routing_choice out;
    if (keep < groups) out.margin = static_cast<double>(group_best[keep - 1].first) - group_best[keep].first;
    std::vector<std::pair<float, int32_t>> kept;
    for (int32_t i = 0; i < keep; ++i)
        for (int32_t e = group_best[i].second * per_group; e < (group_best[i].second + 1) * per_group; ++e)
            kept.push_back({logits[e], e});
    std::sort(kept.begin(), kept.end(), [](auto a, auto b) { return a.first > b.first; });
    for (size_t i = 0; i < k && i < kept.size(); ++i) out.experts.insert(kept[i].second);
    if (kept.size() > k) out.margin = std::min(out.margin, static_cast<double>(kept[k - 1].first) - kept[k].first);
    return out;
}

/// One MoE layer's rows of the first `num_tokens` traced tokens, in token order (the steps of a chunked prefill
/// concatenated).
struct layer_rows {
    std::vector<float> input, logits;
    std::vector<int32_t> topk_ids;
};

inline std::vector<layer_rows> rows_by_layer(const model_config& c, const router_trace& trace, int32_t num_tokens) {
    std::vector<layer_rows> out(c.num_moe_layers());
    const auto H = static_cast<size_t>(c.hidden_size), E = static_cast<size_t>(c.num_experts);
    const auto K = static_cast<size_t>(c.num_experts_per_tok);
    for (const auto& e : trace) {
        layer_rows& r = out.at(static_cast<size_t>(e.moe_layer));
        const size_t have = r.topk_ids.size() / K, take = std::min<size_t>(e.num_tokens, num_tokens - have);
        r.input.insert(r.input.end(), e.input.begin(), e.input.begin() + static_cast<std::ptrdiff_t>(take * H));
        r.logits.insert(r.logits.end(), e.logits.begin(), e.logits.begin() + static_cast<std::ptrdiff_t>(take * E));
        r.topk_ids.insert(r.topk_ids.end(), e.topk_ids.begin(),
                          e.topk_ids.begin() + static_cast<std::ptrdiff_t>(take * K));
    }
    return out;
}

/// The first (layer-major, then token) routing difference between runs a and b.
struct routing_divergence {
    bool complete = false;  ///< both traces cover num_tokens tokens at every MoE layer
    bool found = false;
    int64_t moe_layer = -1;
    int32_t token = -1;
    int32_t decisions_differing = 0;    ///< tokens of that layer routed differently
    double margin_a = 0, margin_b = 0;  ///< the decisive margins of each run at that token (logits)
    double noise = 0;                   ///< max over that token's experts of |logit a - logit b|
    double logit_scale = 0;             ///< max |logit a| of that token
    double input_error = 0;  ///< worst max|a - b| / max|a| of the router inputs, layers up to the divergent one
    bool kernel_matches_host = false;  ///< both runs' router kernels chose what the host recomputes from their logits
    std::string report;                ///< one line per MoE layer

    /// The difference is a BF16 near-tie: the inputs before and at the decision agree to BF16 precision, the
    /// routers chose consistently with their own logits, and the margin is within the runs' logit difference, which
    /// is itself at rounding level (kRouterInputAgreement of the logit scale).
    bool near_tie() const {
        return found && kernel_matches_host && input_error <= kRouterInputAgreement && margin_a <= 2 * noise &&
               noise <= kRouterInputAgreement * logit_scale;
    }
};

inline double max_rel_diff(const float* a, const float* b, size_t n) {
    double err = 0, scale = 0;
    for (size_t i = 0; i < n; ++i) {
        err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
        scale = std::max(scale, std::abs(static_cast<double>(a[i])));
    }
    return err / std::max(scale, 1e-30);
}

inline routing_divergence find_routing_divergence(const model_config& c, const router_trace& a, const router_trace& b,
                                                  int32_t num_tokens) {
    routing_divergence d;
    const std::vector<layer_rows> ra = rows_by_layer(c, a, num_tokens), rb = rows_by_layer(c, b, num_tokens);
    const auto H = static_cast<size_t>(c.hidden_size), E = static_cast<size_t>(c.num_experts);
    const auto K = static_cast<size_t>(c.num_experts_per_tok), T = static_cast<size_t>(num_tokens);
    d.complete = true;
    for (size_t l = 0; l < ra.size(); ++l)
        d.complete = d.complete && ra[l].topk_ids.size() == T * K && rb[l].topk_ids.size() == T * K;
    if (!d.complete) return d;
    for (size_t l = 0; l < ra.size() && !d.found; ++l) {
        const double in_err = max_rel_diff(ra[l].input.data(), rb[l].input.data(), T * H);
        const double logit_err = max_rel_diff(ra[l].logits.data(), rb[l].logits.data(), T * E);
        d.input_error = std::max(d.input_error, in_err);
        int32_t differing = 0;
        for (size_t t = 0; t < T; ++t) {
            const std::set<int32_t> sa(ra[l].topk_ids.begin() + t * K, ra[l].topk_ids.begin() + (t + 1) * K);
            const std::set<int32_t> sb(rb[l].topk_ids.begin() + t * K, rb[l].topk_ids.begin() + (t + 1) * K);
            if (sa == sb) continue;
            ++differing;
            if (d.found) continue;
            d.found = true;
            d.moe_layer = static_cast<int64_t>(l);
            d.token = static_cast<int32_t>(t);
            const float* la = ra[l].logits.data() + t * E;
            const float* lb = rb[l].logits.data() + t * E;
            const routing_choice ca = group_limited_choice(c, la), cb = group_limited_choice(c, lb);
            d.margin_a = ca.margin;
            d.margin_b = cb.margin;
            d.kernel_matches_host = ca.experts == sa && cb.experts == sb;
            for (size_t e = 0; e < E; ++e) {
                d.noise = std::max(d.noise, std::abs(static_cast<double>(la[e]) - lb[e]));
                d.logit_scale = std::max(d.logit_scale, std::abs(static_cast<double>(la[e])));
            }
        }
        d.decisions_differing = d.found ? differing : 0;
        d.report += "  MoE layer " + std::to_string(l) + ": router input max rel diff " + std::to_string(in_err) +
                    ", logits " + std::to_string(logit_err) + ", tokens routed differently " +
                    std::to_string(differing) + " of " + std::to_string(T) + "\n";
    }
    return d;
}

}  // namespace zmoe::cuda::testing
