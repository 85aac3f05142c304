// CPU references of the glue kernels: bias add, SiLU * up, row gather, the shared-expert gate, q/k norm + clamp.

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/reference/bf16.hpp"
#include "kernels/reference/reference.hpp"

namespace zmoe::kernels::ref {

void add_bias(float* y, const float* bias, int32_t num_tokens, int32_t n) {
    for (int32_t t = 0; t < num_tokens; ++t)
        for (int32_t j = 0; j < n; ++j) y[size_t(t) * n + j] = round_bf16(y[size_t(t) * n + j] + bias[j]);
}

void silu_mul(const float* gate_up, float* out, int32_t num_tokens, int32_t n) {
    for (int32_t t = 0; t < num_tokens; ++t)
        for (int32_t j = 0; j < n; ++j) {
            const double g = gate_up[size_t(t) * 2 * n + j], u = gate_up[size_t(t) * 2 * n + n + j];
            out[size_t(t) * n + j] = round_bf16(float(g / (1.0 + std::exp(-g)) * u));
        }
}

void gather_rows(const float* in, const int32_t* rows, float* out, int32_t num_rows, int32_t hidden) {
    for (int32_t i = 0; i < num_rows; ++i) std::copy_n(in + size_t(rows[i]) * hidden, hidden, out + size_t(i) * hidden);
}

void add_gated(float* out, const float* shared, const float* gate_logits, int32_t num_tokens, int32_t hidden) {
    for (int32_t t = 0; t < num_tokens; ++t) {
        const double g = gate_logits ? 1.0 / (1.0 + std::exp(-double(gate_logits[t]))) : 1.0;
        for (int32_t h = 0; h < hidden; ++h) {
            const size_t i = size_t(t) * hidden + h;
            const float s = gate_logits ? round_bf16(float(g * shared[i])) : shared[i];
            out[i] = round_bf16(out[i] + s);
        }
    }
}

void qk_norm_clip(float* qkv, const float* q_norm_weight, const float* k_norm_weight, int32_t num_tokens,
                  int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim, bool per_head, float eps, float clip) {
    const int32_t q_dim = num_q_heads * head_dim, kv_dim = num_kv_heads * head_dim;
    const int32_t row_len = q_dim + 2 * kv_dim;
    auto norm = [&](float* x, const float* w, int32_t len) {
        double sum_sq = 0;
        for (int32_t i = 0; i < len; ++i) sum_sq += double(x[i]) * x[i];
        const float inv = float(1.0 / std::sqrt(sum_sq / len + eps));
        for (int32_t i = 0; i < len; ++i) x[i] = round_bf16(x[i] * inv * w[i]);
    };
    for (int32_t t = 0; t < num_tokens; ++t) {
        float* row = qkv + size_t(t) * row_len;
        if (q_norm_weight && k_norm_weight) {
            if (per_head) {
                for (int32_t h = 0; h < num_q_heads; ++h) norm(row + h * head_dim, q_norm_weight, head_dim);
                for (int32_t h = 0; h < num_kv_heads; ++h) norm(row + q_dim + h * head_dim, k_norm_weight, head_dim);
            } else {
                norm(row, q_norm_weight, q_dim);
                norm(row + q_dim, k_norm_weight, kv_dim);
            }
        }
        if (clip > 0.f)
            for (int32_t i = 0; i < row_len; ++i) row[i] = round_bf16(std::min(std::max(row[i], -clip), clip));
    }
}

}  // namespace zmoe::kernels::ref
