#include "engine_core/dual_batch.hpp"

#include <algorithm>

namespace zmoe {

int32_t dbo_prefill_token_threshold_for(int32_t workers) { return workers >= 4 ? 2048 : 8192; }

dbo_options dbo_options::of(bool enabled, int32_t decode_token_threshold, int32_t prefill_token_threshold,
                            int32_t workers) {
    return dbo_options{.enabled = enabled,
                       .decode_token_threshold = decode_token_threshold,
                       .prefill_token_threshold = prefill_token_threshold > 0
                                                      ? prefill_token_threshold
                                                      : dbo_prefill_token_threshold_for(workers)};
}

bool should_split_step(const std::vector<step_request>& steps, const dbo_options& options) {
    if (!options.enabled) return false;
    size_t busiest = 0;
    bool decode_only = true;
    for (const step_request& s : steps) {
        size_t tokens = 0;
        for (const scheduled_seq& q : s.seqs) {
            tokens += q.token_ids.size();
            if (q.token_ids.size() != 1) decode_only = false;
        }
        busiest = std::max(busiest, tokens);
    }
    if (busiest == 0) return false;
    const int32_t threshold = decode_only ? options.decode_token_threshold : options.prefill_token_threshold;
    return busiest >= static_cast<size_t>(std::max(threshold, 1));
}

}  // namespace zmoe
