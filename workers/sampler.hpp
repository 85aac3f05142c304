#pragma once
// Token sampling from logits: greedy, temperature, top-k, top-p, drawn from a counter-based RNG keyed on
// (seed, sample_index), so a request's n-th token does not depend on the batch, the rank or the step timing.

#include <cstdint>

#include "messages/step_types.hpp"

namespace zmoe {

/// A uniform double in [0, 1), a pure function of (seed, counter) (splitmix64 finalisers, 53 bits).
double counter_uniform(uint64_t seed, uint64_t counter);

/// Index of the largest logit; the lowest index on ties; NaNs are never chosen unless all are NaN (then 0).
int32_t argmax(const float* logits, int64_t n);

/// Samples one token from `logits` [vocab]. temperature 0 (or top_k 1) is greedy. Otherwise: softmax of
/// logits / temperature, keep the top_k largest (if top_k > 0), then the smallest prefix of the rest, by
/// descending probability, whose mass reaches top_p (at least one token); draw from the kept tokens
/// renormalised, with u = counter_uniform(seed, sample_index). Ties order by lower token id.
int32_t sample_token(const float* logits, int64_t vocab, const sampling_params& params, uint32_t sample_index);

}  // namespace zmoe
