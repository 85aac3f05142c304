#pragma once
// Token sampling on the CPU backend. There is one definition of sampling in zmoe: the CUDA kernel's
// (kernels/api.hpp launch_sample), written out on the CPU by its reference kernels::ref::sample. This file only
// adapts the worker's per-request parameters to it, so a seeded request draws the same tokens on --device cpu
// and --device cuda wherever the logits agree.

#include <cstdint>

#include "messages/step_types.hpp"

namespace zmoe {

/// Samples one token from `logits` [vocab] as launch_sample does: temperature 0 is greedy (lowest id on ties);
/// otherwise top-k, then top-p over z = logits / temperature, then a Gumbel-max draw whose noise is
/// kernels::sample_uniform(seed, sample_index, token): a pure function of the request's seed and its n-th
/// generated token, so the batch, the rank and the step timing do not change the token.
int32_t sample_token(const float* logits, int64_t vocab, const sampling_params& params, uint32_t sample_index);

}  // namespace zmoe
