#include "workers/paged_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "workers/cpu_kernels.hpp"

namespace zmoe {
namespace {

struct row_ref {
    const attention_seq* seq;
    int64_t index;  // token index within the sequence
};

std::vector<row_ref> rows_of(const std::vector<attention_seq>& seqs) {
    std::vector<row_ref> rows;
    for (const attention_seq& s : seqs)
        for (int64_t i = 0; i < s.num_tokens; ++i) rows.push_back({&s, i});
    return rows;
}

}  // namespace

void kv_cache_store(thread_pool& pool, kv_cache& cache, int64_t layer, const std::vector<attention_seq>& seqs,
                    const float* k_rows, const float* v_rows) {
    const std::vector<row_ref> rows = rows_of(seqs);
    const int64_t width = cache.num_kv_heads() * cache.head_dim();
    const int64_t bs = cache.block_size();
    pool.parallel_for(
        static_cast<int64_t>(rows.size()),
        [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                const attention_seq& s = *rows[r].seq;
                const int64_t pos = s.start_pos + rows[r].index;
                const int64_t block = s.block_table[pos / bs];
                const int64_t row = s.first_row + rows[r].index;
                std::memcpy(cache.k(layer, block, pos % bs), k_rows + row * width, sizeof(float) * width);
                if (v_rows) std::memcpy(cache.v(layer, block, pos % bs), v_rows + row * width, sizeof(float) * width);
            }
        },
        64);
}

void paged_attention(thread_pool& pool, const kv_cache& cache, int64_t layer, const std::vector<attention_seq>& seqs,
                     const float* q, int64_t num_heads, float scale, float* out, int64_t window) {
    const std::vector<row_ref> rows = rows_of(seqs);
    const int64_t dim = cache.head_dim();
    const int64_t group = num_heads / cache.num_kv_heads();
    const int64_t bs = cache.block_size();
    const int64_t num_items = static_cast<int64_t>(rows.size()) * num_heads;
    pool.parallel_for(
        num_items,
        [&](int64_t i0, int64_t i1) {
            thread_local std::vector<float> scores;
            for (int64_t item = i0; item < i1; ++item) {
                const row_ref& rr = rows[item / num_heads];
                const int64_t h = item % num_heads;
                const int64_t kvh = h / group;
                const attention_seq& s = *rr.seq;
                const int64_t row = s.first_row + rr.index;
                const int64_t len = s.start_pos + rr.index + 1;  // causal: positions [0, pos]
                // Sliding window: the last `window` positions, the row's own included (HF's kv > q - window).
                const int64_t first = window > 0 ? std::max<int64_t>(0, len - window) : 0;
                const float* qh = q + (row * num_heads + h) * dim;
                scores.resize(static_cast<size_t>(len));
                float max_score = -INFINITY;
                for (int64_t j = first; j < len; ++j) {
                    const float* kj = cache.k(layer, s.block_table[j / bs], j % bs) + kvh * dim;
                    scores[j] = dot_f32(qh, kj, dim) * scale;
                    max_score = std::max(max_score, scores[j]);
                }
                float sum = 0.f;
                for (int64_t j = first; j < len; ++j) {
                    scores[j] = std::exp(scores[j] - max_score);
                    sum += scores[j];
                }
                const float inv_sum = 1.0f / sum;
                float* oh = out + (row * num_heads + h) * dim;
                std::fill(oh, oh + dim, 0.f);
                for (int64_t j = first; j < len; ++j) {
                    const float p = scores[j] * inv_sum;
                    const float* vj = cache.v(layer, s.block_table[j / bs], j % bs) + kvh * dim;
                    for (int64_t d = 0; d < dim; ++d) oh[d] += p * vj[d];
                }
            }
        },
        4);
}

}  // namespace zmoe
