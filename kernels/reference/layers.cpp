// CPU references of the dense per-token kernels: embedding, RMSNorm, RoPE with q/k norm, dense GEMM.

#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/reference/bf16.hpp"
#include "kernels/reference/reference.hpp"

namespace zmoe::kernels::ref {

void embedding(const int32_t* ids, const float* table, float* out, int32_t num_tokens, int32_t hidden,
               int32_t vocab_size) {
    for (int32_t t = 0; t < num_tokens; ++t) {
        const bool valid = ids[t] >= 0 && ids[t] < vocab_size;
        for (int32_t h = 0; h < hidden; ++h)
            out[size_t(t) * hidden + h] = valid ? table[size_t(ids[t]) * hidden + h] : 0.f;
    }
}

void rms_norm(const float* x, float* residual, const float* weight, float* out, int32_t num_tokens, int32_t hidden,
              float eps) {
    std::vector<float> s(hidden);
    for (int32_t t = 0; t < num_tokens; ++t) {
        const size_t row = size_t(t) * hidden;
        double sum_sq = 0;
        for (int32_t h = 0; h < hidden; ++h) {
            s[h] = residual ? round_bf16(x[row + h] + residual[row + h]) : x[row + h];
            sum_sq += double(s[h]) * s[h];
        }
        const float inv = float(1.0 / std::sqrt(sum_sq / hidden + eps));
        for (int32_t h = 0; h < hidden; ++h) {
            if (residual) residual[row + h] = s[h];
            out[row + h] = round_bf16(s[h] * inv * weight[h]);
        }
    }
}

namespace {

/// RMSNorm of n values in place with weight w (the norm's statistics over all n).
void norm_in_place(float* v, int32_t n, const float* w, float eps) {
    double sum_sq = 0;
    for (int32_t i = 0; i < n; ++i) sum_sq += double(v[i]) * v[i];
    const float inv = float(1.0 / std::sqrt(sum_sq / n + eps));
    for (int32_t i = 0; i < n; ++i) v[i] = v[i] * inv * w[i];
}

void rope_in_place(float* v, int32_t head_dim, int32_t pos, float theta) {
    const int32_t half = head_dim / 2;
    for (int32_t i = 0; i < half; ++i) {
        const float inv_freq = 1.0f / std::pow(theta, float(2 * i) / float(head_dim));
        const float angle = float(pos) * inv_freq;
        const float c = std::cos(angle), s = std::sin(angle);
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c - x2 * s;
        v[i + half] = x2 * c + x1 * s;
    }
}

}  // namespace

void rope_qk_norm_kv(const rope_shape& s, const float* qkv, const int32_t* positions, const int32_t* slots,
                     const float* q_norm_weight, const float* k_norm_weight, float* q_out, float* k_cache,
                     float* v_cache) {
    const int32_t hd = s.head_dim;
    const int32_t q_size = s.num_q_heads * hd, kv_size = s.num_kv_heads * hd;
    const int32_t width = q_size + 2 * kv_size;
    std::vector<float> q(q_size), k(kv_size);
    for (int32_t t = 0; t < s.num_tokens; ++t) {
        const float* row = qkv + size_t(t) * width;
        q.assign(row, row + q_size);
        k.assign(row + q_size, row + q_size + kv_size);
        if (s.norm == 1) {
            for (int32_t h = 0; h < s.num_q_heads; ++h) norm_in_place(&q[size_t(h) * hd], hd, q_norm_weight, s.eps);
            for (int32_t h = 0; h < s.num_kv_heads; ++h) norm_in_place(&k[size_t(h) * hd], hd, k_norm_weight, s.eps);
        } else if (s.norm == 2) {
            norm_in_place(q.data(), q_size, q_norm_weight, s.eps);
            norm_in_place(k.data(), kv_size, k_norm_weight, s.eps);
        }
        for (int32_t h = 0; h < s.num_q_heads; ++h) rope_in_place(&q[size_t(h) * hd], hd, positions[t], s.rope_theta);
        for (int32_t h = 0; h < s.num_kv_heads; ++h) rope_in_place(&k[size_t(h) * hd], hd, positions[t], s.rope_theta);
        for (int32_t i = 0; i < q_size; ++i) q_out[size_t(t) * q_size + i] = round_bf16(q[i]);
        if (slots[t] < 0) continue;
        for (int32_t i = 0; i < kv_size; ++i) {
            k_cache[size_t(slots[t]) * kv_size + i] = round_bf16(k[i]);
            v_cache[size_t(slots[t]) * kv_size + i] = row[q_size + kv_size + i];
        }
    }
}

void gemm(const float* x, const float* w, float* y, int32_t m, int32_t n, int32_t k) {
    for (int32_t i = 0; i < m; ++i)
        for (int32_t j = 0; j < n; ++j) {
            double acc = 0;
            for (int32_t l = 0; l < k; ++l) acc += double(x[size_t(i) * k + l]) * w[size_t(j) * k + l];
            y[size_t(i) * n + j] = float(acc);
        }
}

}  // namespace zmoe::kernels::ref
