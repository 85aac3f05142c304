#include "workers/cpu_model.hpp"

#include <algorithm>
#include <cmath>

#include "base/check.hpp"
#include "workers/cpu_kernels.hpp"
#include "workers/mla_attention.hpp"
#include "workers/moe_layer.hpp"

namespace zmoe {

cpu_model::cpu_model(const model_weights& weights, const expert_placement& placement, expert_comm& comm,
                     thread_pool& pool, activation_rounding rounding)
    : weights_(weights),
      config_(weights.config()),
      placement_(placement),
      comm_(comm),
      pool_(pool),
      round_(rounding),
      rope_inv_freq_(config_.rope_inv_freq()) {}

void cpu_model::attention(int64_t layer, const forward_batch& batch, kv_cache& cache, const float* x, float* out) {
    const model_config& c = config_;
    const attention_weights& a = weights_.layers()[layer].attn;
    const int64_t T = static_cast<int64_t>(batch.tokens.size());
    if (c.is_mla()) {
        mla_attention(pool_, c, a, cache, layer, batch.seqs, x, T, rope_cos_.data(), rope_sin_.data(), out, round_);
        return;
    }
    const int64_t D = c.head_dim, q_dim = c.num_heads * D, kv_dim = c.num_kv_heads * D;
    auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
    std::vector<float> q(static_cast<size_t>(T * q_dim)), k(static_cast<size_t>(T * kv_dim)), v(k.size());
    linear(pool_, x, T, a.q, bias(a.q_bias), q.data());
    linear(pool_, x, T, a.k, bias(a.k_bias), k.data());
    linear(pool_, x, T, a.v, bias(a.v_bias), v.data());
    // BF16 storage (the CUDA path): the GEMM's output, then q/k again after their norm and after RoPE (the fused
    // kernel's outputs: q and the KV cache).
    for (std::vector<float>* t : {&q, &k, &v}) round_(t->data(), static_cast<int64_t>(t->size()));
    if (c.qk_norm == qk_norm_kind::full) {
        rmsnorm(pool_, q.data(), a.q_norm.data(), T, q_dim, c.rms_norm_eps, q.data());
        rmsnorm(pool_, k.data(), a.k_norm.data(), T, kv_dim, c.rms_norm_eps, k.data());
    } else if (c.qk_norm == qk_norm_kind::per_head) {
        rmsnorm(pool_, q.data(), a.q_norm.data(), T * c.num_heads, D, c.rms_norm_eps, q.data());
        rmsnorm(pool_, k.data(), a.k_norm.data(), T * c.num_kv_heads, D, c.rms_norm_eps, k.data());
    }
    if (c.clip_qkv > 0.f) {
        for (std::vector<float>* t : {&q, &k, &v})
            for (float& e : *t) e = std::clamp(e, -c.clip_qkv, c.clip_qkv);
    }
    for (std::vector<float>* t : {&q, &k}) round_(t->data(), static_cast<int64_t>(t->size()));
    const int64_t half = D / 2;
    pool_.parallel_for(
        T,
        [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
                const float* cs = rope_cos_.data() + t * half;
                const float* sn = rope_sin_.data() + t * half;
                for (int64_t h = 0; h < c.num_heads; ++h) rope_apply(q.data() + t * q_dim + h * D, cs, sn, D);
                for (int64_t h = 0; h < c.num_kv_heads; ++h) rope_apply(k.data() + t * kv_dim + h * D, cs, sn, D);
            }
        },
        16);
    for (std::vector<float>* t : {&q, &k}) round_(t->data(), static_cast<int64_t>(t->size()));
    kv_cache_store(pool_, cache, layer, batch.seqs, k.data(), v.data());
    std::vector<float> attn(static_cast<size_t>(T * q_dim));
    paged_attention(pool_, cache, layer, batch.seqs, q.data(), c.num_heads, 1.0f / std::sqrt(static_cast<float>(D)),
                    attn.data(), c.sliding_window);
    round_(attn.data(), T * q_dim);
    linear(pool_, attn.data(), T, a.o, bias(a.o_bias), out);
}

void cpu_model::forward(const forward_batch& batch, kv_cache& cache, std::vector<float>& logits,
                        std::vector<uint32_t>& expert_counts) {
    const model_config& c = config_;
    const int64_t T = static_cast<int64_t>(batch.tokens.size());
    const int64_t H = c.hidden_size, V = c.vocab_size, E = c.num_experts;
    ZMOE_CHECK(static_cast<int64_t>(batch.positions.size()) == T, "positions vs tokens");
    expert_counts.resize(static_cast<size_t>(c.num_moe_layers() * E), 0);

    const int64_t half = (c.is_mla() ? c.mla.qk_rope_head_dim : c.head_dim) / 2;
    rope_cos_.resize(static_cast<size_t>(T * half));
    rope_sin_.resize(rope_cos_.size());
    for (int64_t t = 0; t < T; ++t) {
        if (c.is_mla()) {
            mla_rope_cos_sin(batch.positions[t], rope_inv_freq_, static_cast<float>(c.rope.attention_factor),
                             rope_cos_.data() + t * half, rope_sin_.data() + t * half);
        } else {
            rope_cos_sin(batch.positions[t], c.head_dim, c.rope_theta, rope_cos_.data() + t * half,
                         rope_sin_.data() + t * half);
        }
    }

    if (batch.micro_batch_split >= 0 && !stream_) stream_ = std::make_unique<comm_stream>(comm_);
    std::vector<float> h(static_cast<size_t>(T * H)), xn(h.size()), delta(h.size());
    pool_.parallel_for(T, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) weights_.embed().row_to_f32(batch.tokens[t], h.data() + t * H);
    });
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const layer_weights& lw = weights_.layers()[l];
        rmsnorm(pool_, h.data(), lw.input_norm.data(), T, H, c.rms_norm_eps, xn.data());
        round_(xn.data(), T * H);
        attention(l, batch, cache, xn.data(), delta.data());
        round_(delta.data(), T * H);
        for (int64_t i = 0; i < T * H; ++i) h[i] += delta[i];
        round_(h.data(), T * H);
        rmsnorm(pool_, h.data(), lw.post_norm.data(), T, H, c.rms_norm_eps, xn.data());
        round_(xn.data(), T * H);
        if (lw.moe_index >= 0 && batch.micro_batch_split >= 0) {
            moe_forward_dual(pool_, c, lw.moe, placement_, lw.moe_index, *stream_, comm_.rank(), comm_.world_size(),
                             xn.data(), T, batch.micro_batch_split, delta.data(),
                             expert_counts.data() + lw.moe_index * E, ep_dispatch_format_of(c), round_);
        } else if (lw.moe_index >= 0) {
            moe_forward(pool_, c, lw.moe, placement_, lw.moe_index, comm_, xn.data(), T, delta.data(),
                        expert_counts.data() + lw.moe_index * E, ep_dispatch_format_of(c), round_);
        } else {
            mlp_forward(pool_, lw.dense, xn.data(), T, delta.data(), round_);
        }
        for (int64_t i = 0; i < T * H; ++i) h[i] += delta[i];
        round_(h.data(), T * H);
    }

    const auto num_out = static_cast<int64_t>(batch.logit_rows.size());
    std::vector<float> last(static_cast<size_t>(num_out * H));
    for (int64_t i = 0; i < num_out; ++i) {
        const int64_t row = batch.logit_rows[i];
        ZMOE_CHECK(row >= 0 && row < T, "logit row " << row << " of " << T);
        rmsnorm_row(h.data() + row * H, weights_.final_norm().data(), H, c.rms_norm_eps, last.data() + i * H);
        round_(last.data() + i * H, H);
    }
    logits.resize(static_cast<size_t>(num_out * V));
    linear(pool_, last.data(), num_out, weights_.lm_head(), nullptr, logits.data());
}

}  // namespace zmoe
