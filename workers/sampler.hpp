#pragma once
// Token sampling on the worker. There is one definition of sampling in zmoe: the CUDA kernel's
// (kernels/api.hpp launch_sample), written out on the CPU by its reference (kernels::ref::sample and
// kernels::ref::process_logits). This file only gathers what a step's sampled rows need (their parameters, the
// token histories penalties read, logit biases, the stop ids min_tokens bans) into the kernel's layout; the CPU
// backend then calls the reference and the CUDA backend uploads the same arrays and launches the kernel, so a
// seeded request draws the same tokens on --device cpu and --device cuda wherever the logits agree.

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kernels/reference/reference.hpp"
#include "kernels/sampling.hpp"
#include "messages/step_types.hpp"

namespace zmoe {

/// The tokens each live request has fed so far, by position (prompt, then generated tokens), kept only for the
/// requests whose penalties read them.
class token_history {
  public:
    /// Records the tokens a step feeds at [start_pos, start_pos + tokens.size()) (placeholders already resolved);
    /// a recompute from an earlier position overwrites what followed.
    void feed(uint64_t request_id, int32_t start_pos, std::span<const int32_t> tokens);
    void erase(uint64_t request_id) { tokens_.erase(request_id); }
    /// Null when nothing was recorded for the request.
    const std::vector<int32_t>* find(uint64_t request_id) const;

  private:
    std::unordered_map<uint64_t, std::vector<int32_t>> tokens_;
};

/// Whether a request's sampling reads its token history (presence, frequency or repetition penalty).
bool needs_history(const sampling_params& p);

/// A step's sampled rows in the layout of kernels::sample_params: one sample_seq_params per row, and the side
/// arrays their index ranges point into.
struct sample_batch {
    std::vector<kernels::sample_seq_params> seqs;
    std::vector<int32_t> history;
    std::vector<int32_t> bias_ids;
    std::vector<float> bias_values;
    std::vector<int32_t> banned;
    bool any_logprobs = false;
    /// Structured outputs: the rows' token bitmasks ([rows, mask_words]; seqs[r].mask_row indexes them), set by
    /// grammar_masks once computed (not owned).
    const uint32_t* masks = nullptr;
    int32_t mask_words = 0;

    /// Appends the row of `seq` (a do_sample sequence); `history` holds its fed tokens (prompt then generated),
    /// needed when needs_history(seq.sampling).
    void add(const scheduled_seq& seq, const std::vector<int32_t>* history);
    kernels::ref::sample_inputs inputs() const {
        return {.history = history.data(),
                .bias_ids = bias_ids.data(),
                .bias_values = bias_values.data(),
                .banned = banned.data(),
                .masks = masks,
                .mask_words = mask_words};
    }
};

/// A step's sampling, gathered the same way by both backends: drops the history of request.finished_ids, records
/// the fed tokens (`tokens`: the step's token ids per sequence, placeholders resolved) of the requests that need
/// their history, and adds one row per do_sample sequence, in step order, with its request id.
sample_batch gather_samples(const step_request& request, const std::vector<std::vector<int32_t>>& tokens,
                            token_history& history, std::vector<uint64_t>& request_ids);

/// Samples every row of `batch` from `logits` [rows, vocab] with the kernel's CPU reference; fills token_id and,
/// for rows that ask, logprobs.
std::vector<sampled_token> sample_rows(const float* logits, int64_t vocab, const sample_batch& batch,
                                       std::span<const uint64_t> request_ids);

/// One row alone (no penalties' history, no logit bias): what sample_rows draws for it.
int32_t sample_token(const float* logits, int64_t vocab, const sampling_params& params, uint32_t sample_index);

}  // namespace zmoe
