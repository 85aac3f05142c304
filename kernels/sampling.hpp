#pragma once
// The per-sequence parameters of sampling and the element-wise rules of logits processing, shared by the CUDA
// kernel (kernels/sample.cu) and its CPU reference (kernels/reference/sample.cpp), hence by both worker
// backends. Plain C++ without CUDA headers: the functions compile for host and device.

#include <cmath>
#include <cstdint>

#include "kernels/sample_rng.hpp"

namespace zmoe::kernels {

/// Most top logprobs a sequence may ask for (vLLM's default max_logprobs).
constexpr int32_t kMaxLogprobs = 20;

/// One sequence's sampling. The index ranges point into the side arrays of sample_params (history, bias, banned).
struct sample_seq_params {
    float temperature = 0.f;  ///< 0: greedy
    float top_p = 1.f;        ///< (0, 1]
    int32_t top_k = 0;        ///< 0: off
    uint32_t counter = 0;     ///< the RNG counter: tokens this request generated before
    uint64_t seed = 0;
    float min_p = 0.f;               ///< [0, 1]: keep p_i >= min_p * max_j p_j (after temperature); 0: off
    float presence_penalty = 0.f;    ///< subtracted from every token the output contains
    float frequency_penalty = 0.f;   ///< subtracted once per occurrence in the output
    float repetition_penalty = 1.f;  ///< > 0; tokens of prompt or output: l > 0 ? l / r : l * r; 1: off
    int32_t num_logprobs = -1;       ///< -1: none; k in [0, kMaxLogprobs]: the sampled token's and the top k's
    int32_t history_begin = 0;       ///< history[history_begin, + num_prompt + num_output): prompt, then output
    int32_t num_prompt = 0;
    int32_t num_output = 0;
    int32_t bias_begin = 0;  ///< bias_ids / bias_values [bias_begin, + num_bias): added to those logits (ids unique)
    int32_t num_bias = 0;
    int32_t banned_begin = 0;  ///< banned[banned_begin, + num_banned): logits set to -inf (stop ids under min_tokens)
    int32_t num_banned = 0;
    /// Structured outputs: row of the masks array ([rows, mask_words] uint32, bit i % 32 of word i / 32 = token i
    /// allowed) whose disallowed tokens (and every id past mask_words * 32) are set to -inf last; -1: no mask.
    int32_t mask_row = -1;
};

ZMOE_HOST_DEVICE inline bool has_penalties(const sample_seq_params& s) {
    return s.presence_penalty != 0.f || s.frequency_penalty != 0.f || s.repetition_penalty != 1.f;
}

/// Whether logits processing changes this sequence's logits (otherwise the raw row is sampled).
ZMOE_HOST_DEVICE inline bool has_processing(const sample_seq_params& s) {
    return s.num_bias > 0 || s.num_banned > 0 || s.mask_row >= 0 || has_penalties(s);
}

/// Whether token `i` is allowed by row `row` of a token bitmask of `words` uint32 words per row.
ZMOE_HOST_DEVICE inline bool mask_allows(const uint32_t* masks, int32_t words, int32_t row, int32_t i) {
    return i < words * 32 && ((masks[static_cast<int64_t>(row) * words + i / 32] >> (i % 32)) & 1u) != 0;
}

/// The penalties of one token, as vLLM and transformers define them: the repetition penalty (CTRL) on a token
/// seen in the prompt or the output, then frequency_penalty * (occurrences in the output), then presence_penalty
/// if it occurs there at all. Each step rounds once, in this order, on host and device alike.
ZMOE_HOST_DEVICE inline float apply_penalties(float l, bool seen, uint32_t output_count, const sample_seq_params& s) {
    if (seen) l = l > 0.f ? l / s.repetition_penalty : l * s.repetition_penalty;
    if (output_count > 0) {
#if defined(__CUDA_ARCH__)
        l = __fsub_rn(l, __fmul_rn(s.frequency_penalty, float(output_count)));  // no fused multiply-add
#else
        l = l - s.frequency_penalty * float(output_count);
#endif
        l = l - s.presence_penalty;
    }
    return l;
}

/// The smallest scaled logit min-p keeps: p_i >= min_p * p_max  <=>  z_i >= z_max + log(min_p).
ZMOE_HOST_DEVICE inline float min_p_floor(float z_max, float min_p) { return z_max + logf(min_p); }

}  // namespace zmoe::kernels
