// CPU references of the MoE pipeline: router top-k, permutation plan, grouped GEMM, weighted combine.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/reference/bf16.hpp"
#include "kernels/reference/reference.hpp"

namespace zmoe::kernels::ref {

void router_topk(const float* logits, int32_t* topk_ids, float* topk_weights, int32_t* counts, int32_t num_tokens,
                 int32_t num_experts, int32_t top_k, bool renormalize) {
    std::fill(counts, counts + num_experts, 0);
    std::vector<int32_t> order(num_experts);
    for (int32_t t = 0; t < num_tokens; ++t) {
        const float* row = logits + size_t(t) * num_experts;
        const float max_logit = *std::max_element(row, row + num_experts);
        double denom = 0;
        for (int32_t e = 0; e < num_experts; ++e) denom += std::exp(double(row[e]) - max_logit);
        for (int32_t e = 0; e < num_experts; ++e) order[e] = e;
        // Selection on the logits: softmax is monotonic, and comparing logits keeps ties exact.
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
        double sum = 0;
        for (int32_t j = 0; j < top_k; ++j) {
            const int32_t e = order[j];
            topk_ids[size_t(t) * top_k + j] = e;
            topk_weights[size_t(t) * top_k + j] = float(std::exp(double(row[e]) - max_logit) / denom);
            sum += topk_weights[size_t(t) * top_k + j];
            ++counts[e];
        }
        if (renormalize)
            for (int32_t j = 0; j < top_k; ++j)
                topk_weights[size_t(t) * top_k + j] = float(topk_weights[size_t(t) * top_k + j] / sum);
    }
}

void moe_route(const int32_t* topk_ids, const int32_t* replica_offsets, const int32_t* replica_slots, int32_t num_valid,
               int32_t* slot_ids, int32_t* counts, int32_t num_tokens, int32_t top_k) {
    for (int32_t t = 0; t < num_tokens; ++t)
        for (int32_t j = 0; j < top_k; ++j) {
            const int32_t e = topk_ids[size_t(t) * top_k + j];
            const int32_t replicas = replica_offsets[e + 1] - replica_offsets[e];
            slot_ids[size_t(t) * top_k + j] = replica_slots[replica_offsets[e] + t % replicas];
            if (num_valid < 0 || t < num_valid) ++counts[e];
        }
}

void moe_permute_plan(const int32_t* topk_ids, int32_t num_tokens, int32_t top_k, int32_t num_experts,
                      int32_t row_align, int32_t max_rows, int32_t* expert_offsets, int32_t* dest_rows,
                      int32_t* row_token) {
    const int32_t num_assign = num_tokens * top_k;
    std::vector<int32_t> counts(num_experts, 0);
    for (int32_t a = 0; a < num_assign; ++a) ++counts[topk_ids[a]];
    expert_offsets[0] = 0;
    for (int32_t e = 0; e < num_experts; ++e)
        expert_offsets[e + 1] = expert_offsets[e] + (counts[e] + row_align - 1) / row_align * row_align;
    std::fill(row_token, row_token + max_rows, -1);
    std::vector<int32_t> next(expert_offsets, expert_offsets + num_experts);
    for (int32_t a = 0; a < num_assign; ++a) {
        const int32_t row = next[topk_ids[a]]++;
        dest_rows[a] = row;
        row_token[row] = a / top_k;
    }
}

void grouped_gemm(const float* a, const float* b, const int32_t* expert_offsets, float* c, int32_t n, int32_t k,
                  int32_t num_experts, bool swiglu) {
    const int32_t n_b = swiglu ? 2 * n : n;
    for (int32_t e = 0; e < num_experts; ++e) {
        const float* be = b + size_t(e) * n_b * k;
        for (int32_t r = expert_offsets[e]; r < expert_offsets[e + 1]; ++r) {
            const float* ar = a + size_t(r) * k;
            for (int32_t j = 0; j < n; ++j) {
                double g = 0, u = 0;
                for (int32_t l = 0; l < k; ++l) g += double(ar[l]) * be[size_t(j) * k + l];
                if (swiglu) {
                    for (int32_t l = 0; l < k; ++l) u += double(ar[l]) * be[size_t(n + j) * k + l];
                    g = g / (1.0 + std::exp(-g)) * u;
                }
                c[size_t(r) * n + j] = round_bf16(float(g));
            }
        }
    }
}

void moe_combine(const float* y, const int32_t* dest_rows, const float* topk_weights, float* out, int32_t num_tokens,
                 int32_t top_k, int32_t hidden) {
    for (int32_t t = 0; t < num_tokens; ++t)
        for (int32_t h = 0; h < hidden; ++h) {
            float acc = 0.f;
            for (int32_t j = 0; j < top_k; ++j)
                acc += topk_weights[size_t(t) * top_k + j] * y[size_t(dest_rows[size_t(t) * top_k + j]) * hidden + h];
            out[size_t(t) * hidden + h] = round_bf16(acc);
        }
}

void moe_decode(const float* router_logits, const int32_t* replica_offsets, const int32_t* replica_slots,
                int32_t num_valid, const float* x, const float* w_gate_up, const float* w_down, float* topk_weights,
                int32_t* slot_ids, int32_t* counts, float* out, int32_t num_tokens, int32_t top_k, int32_t num_experts,
                int32_t hidden, int32_t inter, bool renormalize) {
    const size_t tk = size_t(num_tokens) * top_k;
    std::vector<int32_t> ids(tk), router_counts(num_experts);
    router_topk(router_logits, ids.data(), topk_weights, router_counts.data(), num_tokens, num_experts, top_k,
                renormalize);
    moe_route(ids.data(), replica_offsets, replica_slots, num_valid, slot_ids, counts, num_tokens, top_k);
    std::vector<float> act(inter), y(tk * hidden);
    for (size_t a = 0; a < tk; ++a) {
        const float* xt = x + (a / top_k) * hidden;
        const float* gu = w_gate_up + size_t(slot_ids[a]) * 2 * inter * hidden;
        for (int32_t j = 0; j < inter; ++j) {
            double g = 0, u = 0;
            for (int32_t l = 0; l < hidden; ++l) {
                g += double(xt[l]) * gu[size_t(j) * hidden + l];
                u += double(xt[l]) * gu[size_t(inter + j) * hidden + l];
            }
            const float gf = float(g), uf = float(u);
            act[j] = round_bf16(gf / (1.f + std::exp(-gf)) * uf);
        }
        const float* down = w_down + size_t(slot_ids[a]) * hidden * inter;
        for (int32_t h = 0; h < hidden; ++h) {
            double d = 0;
            for (int32_t j = 0; j < inter; ++j) d += double(act[j]) * down[size_t(h) * inter + j];
            y[a * hidden + h] = round_bf16(float(d));
        }
    }
    for (int32_t t = 0; t < num_tokens; ++t)
        for (int32_t h = 0; h < hidden; ++h) {
            float acc = 0.f;
            for (int32_t j = 0; j < top_k; ++j)
                acc += topk_weights[size_t(t) * top_k + j] * y[(size_t(t) * top_k + j) * hidden + h];
            out[size_t(t) * hidden + h] = round_bf16(acc);
        }
}

}  // namespace zmoe::kernels::ref
