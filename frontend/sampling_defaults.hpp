#pragma once
// One definition of a request's sampling defaults and of the validation of its sampling fields, for every client:
// a field the client leaves unset (nil on the wire) takes the model's generation_config.json value where it has
// one (as vLLM's --generation-config auto does, for temperature, top_p, top_k, min_p and repetition_penalty),
// else vLLM's default (temperature 1, top_p 1, top_k off, min_p off, repetition_penalty 1).

#include <cstdint>
#include <string>

#include "messages/client_protocol.hpp"
#include "messages/step_types.hpp"

namespace zmoe {

struct sampling_defaults {
    float temperature = 1.f;
    float top_p = 1.f;
    int32_t top_k = 0;
    float min_p = 0.f;
    float repetition_penalty = 1.f;

    /// vLLM's defaults overridden by `model_dir`/generation_config.json's fields (a missing file changes nothing;
    /// a malformed one throws zmoe::error(invalid_argument) naming it).
    static sampling_defaults load(const std::string& model_dir);
};

/// The engine's sampling_params of `m` (seed left 0: the caller draws one when m.seed is nil). Throws
/// zmoe::error(invalid_argument) naming the first field out of range: temperature >= 0, top_p in (0, 1],
/// top_k >= -1, min_p in [0, 1], presence/frequency_penalty in [-2, 2], repetition_penalty > 0, logprobs <= 20,
/// logit_bias ids in [0, vocab_size) and unique with finite biases, stop_token_ids in [0, vocab_size).
/// vocab_size <= 0 skips the id range checks.
sampling_params resolve_sampling(const client_generate& m, const sampling_defaults& d, int64_t vocab_size);

}  // namespace zmoe
