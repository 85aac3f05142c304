#include "workers/router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.hpp"

namespace zmoe {
namespace {

// The `k` largest of score[i] over i in `candidates` (descending, lower index first on ties).
std::vector<int32_t> top_k_of(const std::vector<float>& score, std::vector<int32_t> candidates, int64_t k) {
    std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end(),
                      [&](int32_t a, int32_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
    candidates.resize(static_cast<size_t>(k));
    return candidates;
}

std::vector<int32_t> iota_n(int64_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), 0);
    return v;
}

// The experts of the `topk_group` groups with the highest group score, in index order.
std::vector<int32_t> kept_experts(const std::vector<float>& group_score, const router_params& p) {
    const int64_t per_group = p.num_experts / p.n_group;
    std::vector<int32_t> groups = top_k_of(group_score, iota_n(p.n_group), p.topk_group);
    std::sort(groups.begin(), groups.end());
    std::vector<int32_t> out;
    for (int32_t g : groups)
        for (int64_t i = 0; i < per_group; ++i) out.push_back(static_cast<int32_t>(g * per_group + i));
    return out;
}

}  // namespace

router_params router_params_of(const model_config& c, const float* bias) {
    return {.kind = c.router,
            .num_experts = c.num_experts,
            .top_k = c.num_experts_per_tok,
            .n_group = c.n_group,
            .topk_group = c.topk_group,
            .norm_topk_prob = c.norm_topk_prob,
            .scaling = static_cast<float>(c.routed_scaling_factor),
            .bias = bias};
}

routing route(const float* logits, const router_params& p) {
    const int64_t E = p.num_experts;
    ZMOE_CHECK(p.top_k > 0 && p.top_k <= E, "top_k " << p.top_k << " of " << E);
    std::vector<float> s(static_cast<size_t>(E));
    routing r;
    if (p.kind == router_kind::sigmoid_group_limited) {
        ZMOE_CHECK(p.bias != nullptr, "sigmoid_group_limited router without e_score_correction_bias");
        std::vector<float> choice(s.size());
        for (int64_t e = 0; e < E; ++e) {
            s[e] = 1.0f / (1.0f + std::exp(-logits[e]));
            choice[e] = s[e] + p.bias[e];
        }
        const int64_t per_group = E / p.n_group;
        std::vector<float> group_score(static_cast<size_t>(p.n_group));
        for (int64_t g = 0; g < p.n_group; ++g) {
            std::vector<float> v(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
            std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
            group_score[g] = v[0] + v[1];
        }
        r.experts = top_k_of(choice, kept_experts(group_score, p), p.top_k);
        float sum = 0.f;
        for (int32_t e : r.experts) {
            r.weights.push_back(s[e]);
            sum += s[e];
        }
        if (p.norm_topk_prob)
            for (float& w : r.weights) w /= sum + 1e-20f;
    } else {
        float max_logit = -INFINITY;
        for (int64_t e = 0; e < E; ++e) max_logit = std::max(max_logit, logits[e]);
        float sum = 0.f;
        for (int64_t e = 0; e < E; ++e) {
            s[e] = std::exp(logits[e] - max_logit);
            sum += s[e];
        }
        for (int64_t e = 0; e < E; ++e) s[e] /= sum;
        if (p.kind == router_kind::softmax_group_limited) {
            const int64_t per_group = E / p.n_group;
            std::vector<float> group_score(static_cast<size_t>(p.n_group));
            for (int64_t g = 0; g < p.n_group; ++g)
                group_score[g] = *std::max_element(s.begin() + g * per_group, s.begin() + (g + 1) * per_group);
            r.experts = top_k_of(s, kept_experts(group_score, p), p.top_k);
        } else {
            r.experts = top_k_of(s, iota_n(E), p.top_k);
        }
        float top_sum = 0.f;
        for (int32_t e : r.experts) {
            r.weights.push_back(s[e]);
            top_sum += s[e];
        }
        if (p.norm_topk_prob)
            for (float& w : r.weights) w /= top_sum;
    }
    if (p.scaling != 1.f)
        for (float& w : r.weights) w *= p.scaling;
    return r;
}

}  // namespace zmoe
