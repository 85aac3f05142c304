#pragma once
// The checks every step executor makes before running a step, shared by the CPU and CUDA backends: a malformed
// step (from a buggy or hostile engine core) is refused with a clear error instead of reading out of bounds.

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "messages/step_types.hpp"

namespace zmoe {

/// Validates `request` against the executor's KV pool (num_kv_blocks of block_size) and vocabulary, and returns each
/// sequence's token ids with placeholders resolved from last_sampled (request id -> token sampled for it last).
/// Throws zmoe::error(invalid_argument) "step N: request R ..." naming what is wrong: a request scheduled twice, no
/// tokens, a negative start, a block table that does not cover the positions or names a block outside the pool,
/// bad sampling parameters, an unknown placeholder or a token outside the vocabulary.
std::vector<std::vector<int32_t>> validate_step(const step_request& request, int64_t block_size, int64_t num_kv_blocks,
                                                int64_t vocab_size,
                                                const std::unordered_map<uint64_t, int32_t>& last_sampled);

}  // namespace zmoe
