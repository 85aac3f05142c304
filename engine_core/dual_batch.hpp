#pragma once
// Dual-batch overlap (DBO), the engine core's half: whether a step runs as two micro-batches. One owner: the engine
// core decides for the whole step from every rank's share and sends the answer in each rank's step_request
// (dual_batch), so all ranks make the same expert exchanges; the workers split their own rows (micro_batch.hpp).

#include <cstdint>
#include <vector>

#include "messages/step_types.hpp"

namespace zmoe {

/// The prefill threshold that --dbo-prefill-token-threshold 0 (its default) stands for with `workers` expert-parallel
/// ranks: where DBO started to pay on prefill steps, measured with the peer-to-peer exchange on H100 and H200
/// (docs/benchmarks.md): 8192 tokens per rank on 2 GPUs (slower below), 2048 on 4 (slower at 1024). 3 ranks, not
/// measured, take the 2-GPU value: the exchange grows with the ranks, so that one can only split too late.
int32_t dbo_prefill_token_threshold_for(int32_t workers);

/// --enable-dbo, --dbo-decode-token-threshold, --dbo-prefill-token-threshold (vLLM's names; the defaults are
/// engine_config's, from the crossovers measured on GPUs).
struct dbo_options {
    bool enabled = false;
    int32_t decode_token_threshold = 1 << 30;  ///< decode-only steps split at this many tokens on some rank
    int32_t prefill_token_threshold = 8192;    ///< steps with any prefill chunk split at this many tokens on some rank

    /// The options a run's flags give: a prefill threshold of 0 resolved by the worker count.
    static dbo_options of(bool enabled, int32_t decode_token_threshold, int32_t prefill_token_threshold,
                          int32_t workers);
};

/// True when a step whose per-rank shares are `steps` (index = rank) should run as two micro-batches: DBO enabled
/// and the busiest rank has at least the threshold's tokens, the decode threshold when every scheduled sequence
/// feeds one token, else the prefill threshold. A pure function of the step, so it is testable without sockets.
bool should_split_step(const std::vector<step_request>& steps, const dbo_options& options);

}  // namespace zmoe
