// CPU reference of paged attention over mixed prefill/decode batches.

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "kernels/reference/reference.hpp"

namespace zmoe::kernels::ref {

void paged_attention(const attention_shape& s, const float* q, const float* k_cache, const float* v_cache,
                     const int32_t* block_tables, const int32_t* query_start, const int32_t* start_pos, float* out) {
    const int32_t hd = s.head_dim, vd = s.v_head_dim == 0 ? s.head_dim : s.v_head_dim;
    const int32_t group = s.num_q_heads / s.num_kv_heads;
    std::vector<double> scores, acc(vd);
    for (int32_t seq = 0; seq < s.num_seqs; ++seq) {
        const int32_t* table = block_tables + size_t(seq) * s.max_blocks_per_seq;
        for (int32_t tok = query_start[seq]; tok < query_start[seq + 1]; ++tok) {
            const int32_t pos = start_pos[seq] + (tok - query_start[seq]);
            for (int32_t h = 0; h < s.num_q_heads; ++h) {
                const int32_t kvh = h / group;
                const float* qrow = q + (size_t(tok) * s.num_q_heads + h) * hd;
                scores.assign(pos + 1, 0.0);
                double max_score = -std::numeric_limits<double>::infinity();
                for (int32_t j = 0; j <= pos; ++j) {
                    const size_t slot = size_t(table[j / s.block_size]) * s.block_size + j % s.block_size;
                    const float* krow = k_cache + (slot * s.num_kv_heads + kvh) * hd;
                    double dot = 0;
                    for (int32_t d = 0; d < hd; ++d) dot += double(qrow[d]) * krow[d];
                    scores[j] = dot * s.scale;
                    max_score = std::max(max_score, scores[j]);
                }
                double denom = 0;
                std::fill(acc.begin(), acc.end(), 0.0);
                for (int32_t j = 0; j <= pos; ++j) {
                    const double p = std::exp(scores[j] - max_score);
                    denom += p;
                    const size_t slot = size_t(table[j / s.block_size]) * s.block_size + j % s.block_size;
                    const float* vrow = v_cache + (slot * s.num_kv_heads + kvh) * vd;
                    for (int32_t d = 0; d < vd; ++d) acc[d] += p * vrow[d];
                }
                float* orow = out + (size_t(tok) * s.num_q_heads + h) * vd;
                for (int32_t d = 0; d < vd; ++d) orow[d] = float(acc[d] / denom);
            }
        }
    }
}

}  // namespace zmoe::kernels::ref
