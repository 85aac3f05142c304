// CPU references of multi-head latent attention (the absorbed form over a paged latent cache) and of the
// group-limited DeepSeek routers.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/reference/bf16.hpp"
#include "kernels/reference/reference.hpp"

namespace zmoe::kernels::ref {
namespace {

void rope_pair(int32_t i, int32_t dim, bool interleave, int32_t& a, int32_t& b) {
    a = interleave ? 2 * i : i;
    b = interleave ? 2 * i + 1 : i + dim / 2;
}

}  // namespace

void mla_rope_kv(const mla_shape& s, float* q, const float* kv, const float* kv_norm_weight, const int32_t* positions,
                 const int32_t* slots, const float* inv_freq, float* cache) {
    const int32_t r = s.kv_lora_rank, dr = s.rope_dim, half = dr / 2, width = r + dr, qk = s.nope_dim + dr;
    std::vector<float> cs(half), sn(half);
    for (int32_t t = 0; t < s.num_tokens; ++t) {
        for (int32_t i = 0; i < half; ++i) {
            const float angle = float(positions[t]) * inv_freq[i];
            cs[i] = float(std::cos(double(angle))) * s.attention_factor;
            sn[i] = float(std::sin(double(angle))) * s.attention_factor;
        }
        const float* x = kv + size_t(t) * width;
        if (slots[t] >= 0) {
            float* row = cache + size_t(slots[t]) * width;
            double sum_sq = 0;
            for (int32_t i = 0; i < r; ++i) sum_sq += double(x[i]) * x[i];
            const float inv = float(1.0 / std::sqrt(sum_sq / r + s.eps));
            for (int32_t i = 0; i < r; ++i) row[i] = round_bf16(x[i] * inv * kv_norm_weight[i]);
            for (int32_t i = 0; i < half; ++i) {
                int32_t a, b;
                rope_pair(i, dr, s.interleave, a, b);
                row[r + a] = round_bf16(x[r + a] * cs[i] - x[r + b] * sn[i]);
                row[r + b] = round_bf16(x[r + b] * cs[i] + x[r + a] * sn[i]);
            }
        }
        for (int32_t h = 0; h < s.num_heads; ++h) {
            float* qh = q + (size_t(t) * s.num_heads + h) * qk + s.nope_dim;
            for (int32_t i = 0; i < half; ++i) {
                int32_t a, b;
                rope_pair(i, dr, s.interleave, a, b);
                const float x1 = qh[a], x2 = qh[b];
                qh[a] = round_bf16(x1 * cs[i] - x2 * sn[i]);
                qh[b] = round_bf16(x2 * cs[i] + x1 * sn[i]);
            }
        }
    }
}

void mla_q_absorb(const mla_shape& s, const float* q, const float* kv_b, float* q_lat) {
    const int32_t r = s.kv_lora_rank, dn = s.nope_dim, qk = dn + s.rope_dim;
    for (int32_t t = 0; t < s.num_tokens; ++t)
        for (int32_t h = 0; h < s.num_heads; ++h) {
            const float* qh = q + (size_t(t) * s.num_heads + h) * qk;
            const float* wk = kv_b + size_t(h) * (dn + s.v_dim) * r;
            for (int32_t i = 0; i < r; ++i) {
                double acc = 0;
                for (int32_t d = 0; d < dn; ++d) acc += double(qh[d]) * wk[size_t(d) * r + i];
                q_lat[(size_t(t) * s.num_heads + h) * r + i] = float(acc);
            }
        }
}

void mla_attention(const mla_shape& s, const float* q_lat, const float* q, const float* cache,
                   const int32_t* block_tables, const int32_t* query_start, const int32_t* start_pos, float* o_lat) {
    const int32_t r = s.kv_lora_rank, dr = s.rope_dim, width = r + dr, qk = s.nope_dim + dr;
    std::vector<double> scores, acc(r);
    for (int32_t seq = 0; seq < s.num_seqs; ++seq) {
        const int32_t* table = block_tables + size_t(seq) * s.max_blocks_per_seq;
        for (int32_t t = query_start[seq]; t < query_start[seq + 1]; ++t) {
            const int32_t pos = start_pos[seq] + (t - query_start[seq]);
            for (int32_t h = 0; h < s.num_heads; ++h) {
                const float* ql = q_lat + (size_t(t) * s.num_heads + h) * r;
                const float* qpe = q + (size_t(t) * s.num_heads + h) * qk + s.nope_dim;
                scores.assign(size_t(pos) + 1, 0.0);
                double max_score = -std::numeric_limits<double>::infinity();
                for (int32_t j = 0; j <= pos; ++j) {
                    const float* row =
                        cache + (size_t(table[j / s.block_size]) * s.block_size + j % s.block_size) * width;
                    double dot = 0;
                    for (int32_t i = 0; i < r; ++i) dot += double(ql[i]) * row[i];
                    for (int32_t i = 0; i < dr; ++i) dot += double(qpe[i]) * row[r + i];
                    scores[j] = dot * s.scale;
                    max_score = std::max(max_score, scores[j]);
                }
                double sum = 0;
                std::fill(acc.begin(), acc.end(), 0.0);
                for (int32_t j = 0; j <= pos; ++j) {
                    const double p = std::exp(scores[j] - max_score);
                    sum += p;
                    const float* row =
                        cache + (size_t(table[j / s.block_size]) * s.block_size + j % s.block_size) * width;
                    for (int32_t i = 0; i < r; ++i) acc[i] += p * row[i];
                }
                float* out = o_lat + (size_t(t) * s.num_heads + h) * r;
                for (int32_t i = 0; i < r; ++i) out[i] = float(acc[i] / sum);
            }
        }
    }
}

void mla_v_up(const mla_shape& s, const float* o_lat, const float* kv_b, float* out) {
    const int32_t r = s.kv_lora_rank, dn = s.nope_dim, dv = s.v_dim;
    for (int32_t t = 0; t < s.num_tokens; ++t)
        for (int32_t h = 0; h < s.num_heads; ++h) {
            const float* o = o_lat + (size_t(t) * s.num_heads + h) * r;
            const float* wv = kv_b + (size_t(h) * (dn + dv) + dn) * r;
            for (int32_t e = 0; e < dv; ++e) {
                double acc = 0;
                for (int32_t i = 0; i < r; ++i) acc += double(o[i]) * wv[size_t(e) * r + i];
                out[size_t(t) * s.num_heads * dv + size_t(h) * dv + e] = round_bf16(float(acc));
            }
        }
}

void router_grouped(const router_grouped_shape& s, const float* logits, const float* bias, int32_t* topk_ids,
                    float* topk_weights) {
    const int32_t E = s.num_experts, per_group = E / s.n_group;
    std::vector<float> choice(E), group_score(s.n_group);
    std::vector<int32_t> order;
    // Descending by score, lower index first on ties.
    auto by_score = [](const std::vector<float>& v) {
        return [&v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
    };
    for (int32_t t = 0; t < s.num_tokens; ++t) {
        const float* row = logits + size_t(t) * E;
        const float max_l = *std::max_element(row, row + E);
        double denom = 0;
        for (int32_t e = 0; e < E; ++e) {
            denom += std::exp(double(row[e]) - max_l);
            choice[e] = s.sigmoid ? float(1.0 / (1.0 + std::exp(-double(row[e])))) + (bias ? bias[e] : 0.f) : row[e];
        }
        for (int32_t g = 0; g < s.n_group; ++g) {
            std::vector<float> v(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
            std::sort(v.begin(), v.end(), std::greater<float>());
            group_score[g] = s.sigmoid ? v[0] + v[1] : v[0];
        }
        std::vector<int32_t> groups(s.n_group);
        std::iota(groups.begin(), groups.end(), 0);
        std::stable_sort(groups.begin(), groups.end(), by_score(group_score));
        order.clear();
        for (int32_t k = 0; k < s.topk_group; ++k)
            for (int32_t i = 0; i < per_group; ++i) order.push_back(groups[k] * per_group + i);
        std::sort(order.begin(), order.end(), by_score(choice));
        double sum = 0;
        std::vector<double> w(s.top_k);
        for (int32_t j = 0; j < s.top_k; ++j) {
            const int32_t e = order[j];
            topk_ids[size_t(t) * s.top_k + j] = e;
            w[j] = s.sigmoid ? 1.0 / (1.0 + std::exp(-double(row[e]))) : std::exp(double(row[e]) - max_l) / denom;
            sum += w[j];
        }
        for (int32_t j = 0; j < s.top_k; ++j)
            topk_weights[size_t(t) * s.top_k + j] = float((s.renormalize ? w[j] / sum : w[j]) * s.scaling);
    }
}

}  // namespace zmoe::kernels::ref
