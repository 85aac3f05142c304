#pragma once
// The routers of the supported MoE families: from one token's router logits to its top-k experts and their
// weights, in fp32 as transformers computes them.

#include <cstdint>
#include <vector>

#include "model/model_config.hpp"

namespace zmoe {

/// Router result of one token: the top-k experts (descending selection score, lower index first on ties) and
/// their combine weights.
struct routing {
    std::vector<int32_t> experts;
    std::vector<float> weights;
};

struct router_params {
    router_kind kind = router_kind::softmax_topk;
    int64_t num_experts = 0;
    int64_t top_k = 0;
    int64_t n_group = 1;     ///< group-limited kinds: num_experts is a multiple of it
    int64_t topk_group = 1;  ///< groups kept
    bool norm_topk_prob = false;
    float scaling = 1.f;          ///< routed_scaling_factor, applied last
    const float* bias = nullptr;  ///< sigmoid_group_limited: e_score_correction_bias [num_experts]
};

/// The router of `config`; `bias` as router_params::bias (may be null for the other kinds).
router_params router_params_of(const model_config& config, const float* bias);

/// Routes one token. softmax_topk: softmax, top-k, renormalised iff norm_topk_prob. softmax_group_limited
/// (DeepSeek-V2): softmax; groups ranked by their best expert, the topk_group best kept; top-k of their experts.
/// sigmoid_group_limited (DeepSeek-V3): s = sigmoid(logits); selection by s + bias, groups ranked by the sum of
/// their two best selection scores; weights s of the chosen experts, divided by (their sum + 1e-20) iff
/// norm_topk_prob. Every kind then multiplies the weights by `scaling`.
routing route(const float* logits, const router_params& p);

}  // namespace zmoe
