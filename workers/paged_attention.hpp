#pragma once
// Causal grouped-query attention over the paged KV cache, fp32, for a batch mixing prefill chunks and decodes.

#include <cstdint>
#include <vector>

#include "workers/kv_cache.hpp"
#include "workers/thread_pool.hpp"

namespace zmoe {

/// One sequence's tokens within the step's flattened token rows.
struct attention_seq {
    int64_t first_row = 0;  ///< row of its first token in q/out
    int64_t num_tokens = 0;
    int64_t start_pos = 0;                 ///< position of its first token
    const int32_t* block_table = nullptr;  ///< covers positions [0, start_pos + num_tokens)
};

/// Writes rows k_rows/v_rows [num_tokens, num_kv_heads * head_dim] of every sequence into `cache` at its positions
/// (v_rows null: K only, for a cache without V).
void kv_cache_store(thread_pool& pool, kv_cache& cache, int64_t layer, const std::vector<attention_seq>& seqs,
                    const float* k_rows, const float* v_rows);

/// out[row, h*D:(h+1)*D] = softmax_j(q_h . k_j * scale) v_j over positions j in [0, pos(row)] of the row's own
/// sequence, kv head h / (num_heads / num_kv_heads). q/out: [num_rows, num_heads * head_dim]. The sequences' K/V
/// for every attended position must already be in `cache` (kv_cache_store first). Scores, softmax and the weighted
/// sum run in position order, so the result for a row is independent of the batch and of chunking. window > 0
/// restricts a row to its last `window` positions (sliding-window attention, its own position included).
void paged_attention(thread_pool& pool, const kv_cache& cache, int64_t layer, const std::vector<attention_seq>& seqs,
                     const float* q, int64_t num_heads, float scale, float* out, int64_t window = 0);

}  // namespace zmoe
