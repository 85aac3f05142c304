#pragma once
// Field-by-field equality for the plain structs of messages/step_types.hpp (which declare no operator==).

#include "messages/step_types.hpp"

namespace zmoe::test {

inline bool same_sampling(const sampling_params& a, const sampling_params& b) { return a == b; }

inline bool same_step(const step_request& a, const step_request& b) {
    if (a.step_id != b.step_id || a.finished_ids != b.finished_ids || a.dual_batch != b.dual_batch ||
        a.seqs.size() != b.seqs.size())
        return false;
    for (size_t i = 0; i < a.seqs.size(); ++i) {
        const auto& x = a.seqs[i];
        const auto& y = b.seqs[i];
        if (x.request_id != y.request_id || x.token_ids != y.token_ids || x.start_pos != y.start_pos ||
            x.block_table != y.block_table || x.do_sample != y.do_sample || x.sample_index != y.sample_index ||
            !same_sampling(x.sampling, y.sampling) || x.structured != y.structured ||
            x.output_token_ids != y.output_token_ids) {
            return false;
        }
    }
    return true;
}

inline bool same_step_result(const step_result& a, const step_result& b) {
    if (a.step_id != b.step_id || a.rank != b.rank || a.expert_counts != b.expert_counts ||
        a.compute_ms != b.compute_ms || a.frames_dropped != b.frames_dropped || a.wait_ms != b.wait_ms ||
        a.tokens.size() != b.tokens.size()) {
        return false;
    }
    for (size_t i = 0; i < a.tokens.size(); ++i) {
        if (a.tokens[i].request_id != b.tokens[i].request_id || a.tokens[i].token_id != b.tokens[i].token_id ||
            a.tokens[i].logprobs != b.tokens[i].logprobs) {
            return false;
        }
    }
    return true;
}

}  // namespace zmoe::test
