#include "workers/mla_attention.hpp"

#include <algorithm>
#include <cmath>

#include "base/check.hpp"
#include "workers/cpu_kernels.hpp"

namespace zmoe {
namespace {

// transformers' DeepSeek q_a_layernorm / kv_a_layernorm use the RMSNorm default eps, not rms_norm_eps.
constexpr float kLatentNormEps = 1e-6f;

}  // namespace

void mla_rope_cos_sin(int64_t position, const std::vector<float>& inv_freq, float attention_factor, float* cos_out,
                      float* sin_out) {
    const float pos = static_cast<float>(position);
    for (size_t i = 0; i < inv_freq.size(); ++i) {
        const float angle = pos * inv_freq[i];
        cos_out[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_factor;
        sin_out[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_factor;
    }
}

void mla_rope_apply(float* x, const float* cos_v, const float* sin_v, int64_t dim, bool interleave) {
    if (!interleave) {
        rope_apply(x, cos_v, sin_v, dim);
        return;
    }
    for (int64_t i = 0; i < dim / 2; ++i) {
        const float x1 = x[2 * i], x2 = x[2 * i + 1];
        x[2 * i] = x1 * cos_v[i] - x2 * sin_v[i];
        x[2 * i + 1] = x2 * cos_v[i] + x1 * sin_v[i];
    }
}

void mla_attention(thread_pool& pool, const model_config& c, const attention_weights& w, kv_cache& cache, int64_t layer,
                   const std::vector<attention_seq>& seqs, const float* x, int64_t T, const float* cos,
                   const float* sin, float* out, activation_rounding round) {
    const mla_params& m = c.mla;
    const int64_t heads = c.num_heads, r = m.kv_lora_rank, dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim;
    const int64_t dv = m.v_head_dim, qk = dn + dr, width = r + dr, half = dr / 2;
    ZMOE_CHECK(cache.num_kv_heads() == 1 && cache.head_dim() == width && !cache.has_v(),
               "MLA cache must hold one [kv_lora_rank + qk_rope_head_dim] row per token");
    if (T == 0) return;

    // Queries: [T, heads, dn + dr].
    std::vector<float> q(static_cast<size_t>(T * heads * qk));
    if (!w.mla.q_a.empty()) {
        std::vector<float> qa(static_cast<size_t>(T * m.q_lora_rank));
        linear(pool, x, T, w.mla.q_a, nullptr, qa.data());
        round(qa.data(), T * m.q_lora_rank);
        rmsnorm(pool, qa.data(), w.mla.q_a_norm.data(), T, m.q_lora_rank, kLatentNormEps, qa.data());
        round(qa.data(), T * m.q_lora_rank);
        linear(pool, qa.data(), T, w.mla.q_b, nullptr, q.data());
    } else {
        linear(pool, x, T, w.q, nullptr, q.data());
    }
    // Latent and rope key: [T, r + dr], normalised and rotated in place: exactly the cache rows.
    std::vector<float> kv(static_cast<size_t>(T * width));
    linear(pool, x, T, w.mla.kv_a, nullptr, kv.data());
    round(q.data(), T * heads * qk);
    round(kv.data(), T * width);
    pool.parallel_for(
        T,
        [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
                float* row = kv.data() + t * width;
                rmsnorm_row(row, w.mla.kv_a_norm.data(), r, kLatentNormEps, row);
                const float* cs = cos + t * half;
                const float* sn = sin + t * half;
                mla_rope_apply(row + r, cs, sn, dr, m.rope_interleave);
                for (int64_t h = 0; h < heads; ++h)
                    mla_rope_apply(q.data() + (t * heads + h) * qk + dn, cs, sn, dr, m.rope_interleave);
            }
        },
        16);
    round(q.data(), T * heads * qk);
    round(kv.data(), T * width);
    kv_cache_store(pool, cache, layer, seqs, kv.data(), nullptr);

    struct row_ref {
        const attention_seq* seq;
        int64_t index;
    };
    std::vector<row_ref> rows;
    for (const attention_seq& s : seqs)
        for (int64_t i = 0; i < s.num_tokens; ++i) rows.push_back({&s, i});
    ZMOE_CHECK(static_cast<int64_t>(rows.size()) == T, "MLA: " << rows.size() << " sequence rows vs " << T);

    const float scale = c.softmax_scale();
    const int64_t bs = cache.block_size();
    const float* kv_b = w.mla.kv_b.data();  // [heads * (dn + dv), r]
    std::vector<float> kv_b_bf16;
    if (round.bf16) {
        kv_b_bf16.assign(w.mla.kv_b.begin(), w.mla.kv_b.end());
        round(kv_b_bf16.data(), static_cast<int64_t>(kv_b_bf16.size()));
        kv_b = kv_b_bf16.data();
    }
    std::vector<float> attn(static_cast<size_t>(T * heads * dv));
    pool.parallel_for(
        T * heads,
        [&](int64_t i0, int64_t i1) {
            thread_local std::vector<float> q_lat, o_lat, scores;
            q_lat.resize(static_cast<size_t>(r));
            o_lat.resize(static_cast<size_t>(r));
            for (int64_t item = i0; item < i1; ++item) {
                const row_ref& rr = rows[item / heads];
                const int64_t h = item % heads;
                const attention_seq& s = *rr.seq;
                const int64_t row = s.first_row + rr.index;
                const int64_t len = s.start_pos + rr.index + 1;  // causal: positions [0, pos]
                const float* qh = q.data() + (row * heads + h) * qk;
                const float* wk = kv_b + h * (dn + dv) * r;  // the head's dn key rows
                const float* wv = wk + dn * r;               // then its dv value rows
                // Absorb W_k into the query: q_lat = sum_d q_nope[d] * W_k[d, :], d in order.
                std::fill(q_lat.begin(), q_lat.end(), 0.f);
                for (int64_t d = 0; d < dn; ++d) {
                    const float qd = qh[d];
                    const float* wrow = wk + d * r;
                    for (int64_t i = 0; i < r; ++i) q_lat[i] += qd * wrow[i];
                }
                round(q_lat.data(), r);
                scores.resize(static_cast<size_t>(len));
                float max_score = -INFINITY;
                for (int64_t j = 0; j < len; ++j) {
                    const float* cj = cache.k(layer, s.block_table[j / bs], j % bs);
                    scores[j] = (dot_f32(q_lat.data(), cj, r) + dot_f32(qh + dn, cj + r, dr)) * scale;
                    max_score = std::max(max_score, scores[j]);
                }
                float sum = 0.f;
                for (int64_t j = 0; j < len; ++j) {
                    scores[j] = std::exp(scores[j] - max_score);
                    sum += scores[j];
                }
                const float inv_sum = 1.0f / sum;
                std::fill(o_lat.begin(), o_lat.end(), 0.f);
                for (int64_t j = 0; j < len; ++j) {
                    const float p = scores[j] * inv_sum;
                    const float* cj = cache.k(layer, s.block_table[j / bs], j % bs);
                    for (int64_t i = 0; i < r; ++i) o_lat[i] += p * cj[i];
                }
                round(o_lat.data(), r);
                float* oh = attn.data() + (row * heads + h) * dv;
                for (int64_t e = 0; e < dv; ++e) oh[e] = dot_f32(wv + e * r, o_lat.data(), r);
            }
        },
        2);
    round(attn.data(), T * heads * dv);
    linear(pool, attn.data(), T, w.o, nullptr, out);
}

}  // namespace zmoe
