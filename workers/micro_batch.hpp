#pragma once
// Dual-batch overlap (DBO), the workers' half: where a rank's step splits into micro-batches A and B. Whether a step
// splits is the engine core's decision (step_request::dual_batch, engine_core/dual_batch.hpp); how this rank's rows
// divide is local, since the MoE layer treats rows independently and every rank makes the same exchanges whatever
// its split (a rank with no rows sends and receives empty buffers in both micro-batches).

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace zmoe {

/// The first row of micro-batch B for a rank whose sequences feed `seq_tokens[i]` rows each, in order. A decode-only
/// batch (every sequence one token) splits by sequences, A taking the first ceil(n/2); a batch with any prefill
/// chunk splits by balanced token counts, A taking the first ceil(total/2) rows (which may cut a chunk: rows are
/// independent in the MoE layer). 0 for an empty batch.
int64_t micro_batch_split_row(const std::vector<int64_t>& seq_tokens);

/// One micro-batch's sequences, for attention over its rows: query_start in rows of the whole step
/// ([num_seqs + 1], from its first row to its end), start_pos ([num_seqs]) and the step's index of its first
/// sequence (where its block-table rows begin).
struct micro_batch_seqs {
    int32_t first_seq = 0;
    std::vector<int32_t> query_start;
    std::vector<int32_t> start_pos;
    int32_t num_seqs() const { return static_cast<int32_t>(start_pos.size()); }
};

/// The sequences of micro-batch A (rows [0, split)) and B (rows [split, total)) of a step whose sequence i feeds
/// query rows [query_start[i], query_start[i + 1]) at positions from start_pos[i] (query_start has one entry more
/// than start_pos). A sequence the split cuts gives its head to A and its tail to B, the tail's start position moved
/// past the head (its attention sees the head's keys, written first). split is clamped to [0, total].
std::array<micro_batch_seqs, 2> micro_batch_sequences(std::span<const int32_t> query_start,
                                                      std::span<const int32_t> start_pos, int32_t split);

}  // namespace zmoe
