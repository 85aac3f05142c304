#pragma once
// Dual-batch overlap (DBO), the workers' half: where a rank's step splits into micro-batches A and B. Whether a step
// splits is the engine core's decision (step_request::dual_batch, engine_core/dual_batch.hpp); how this rank's rows
// divide is local, since the MoE layer treats rows independently and every rank makes the same exchanges whatever
// its split (a rank with no rows sends and receives empty buffers in both micro-batches).

#include <cstdint>
#include <vector>

namespace zmoe {

/// The first row of micro-batch B for a rank whose sequences feed `seq_tokens[i]` rows each, in order. A decode-only
/// batch (every sequence one token) splits by sequences, A taking the first ceil(n/2); a batch with any prefill
/// chunk splits by balanced token counts, A taking the first ceil(total/2) rows (which may cut a chunk: rows are
/// independent in the MoE layer). 0 for an empty batch.
int64_t micro_batch_split_row(const std::vector<int64_t>& seq_tokens);

}  // namespace zmoe
