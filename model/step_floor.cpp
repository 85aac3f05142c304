#include "model/step_floor.hpp"

namespace zmoe {

namespace {

/// Bytes of a linear [n, k]: BF16, or (FP8) one byte per weight plus an fp32 scale per 128 x 128 block.
int64_t linear_bytes(const model_config& c, int64_t n, int64_t k) {
    if (!c.quantization.fp8()) return 2 * n * k;
    return n * k + 4 * ((n + 127) / 128) * ((k + 127) / 128);
}

}  // namespace

step_floor_model step_floor_model::of(const model_config& c) {
    const int64_t H = c.hidden_size, D = c.head_dim;
    const int64_t q = c.num_heads * D, kv = c.num_kv_heads * D;
    auto lin = [&](int64_t n, int64_t k) { return linear_bytes(c, n, k); };
    auto mlp = [&](int64_t inter) { return 2 * lin(inter, H) + lin(H, inter); };
    // Bytes of the BF16 tensors (norms, biases, routers, LM head) counted as elements, times 2 at the end.
    int64_t attn = lin(q, H) + 2 * lin(kv, H) + lin(H, q), attn_bf16 = 0;
    if (c.is_mla()) {  // q (through its LoRA), kv_a, kv_b, o, the two latent norms
        const mla_params& m = c.mla;
        const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
        // kv_b stays BF16 in an FP8 model: the worker dequantizes it at load (docs/fp8.md), and reads it so.
        attn = (m.q_lora_rank > 0 ? lin(m.q_lora_rank, H) + lin(c.num_heads * qk, m.q_lora_rank)
                                  : lin(c.num_heads * qk, H)) +
               lin(m.kv_lora_rank + m.qk_rope_head_dim, H) +
               2 * c.num_heads * (m.qk_nope_head_dim + m.v_head_dim) * m.kv_lora_rank +
               lin(H, c.num_heads * m.v_head_dim);
        attn_bf16 = (m.q_lora_rank > 0 ? m.q_lora_rank : 0) + m.kv_lora_rank;
    }
    if (c.qkv_bias) attn_bf16 += q + 2 * kv;
    if (c.o_bias) attn_bf16 += H;
    int64_t n = c.vocab_size * H + H;  // the LM head (or the tied embedding it reads) and the final norm
    int64_t quantized = 0;             // bytes of the linears (BF16 or FP8)
    for (int64_t l = 0; l < c.num_layers; ++l) {
        quantized += attn;
        n += attn_bf16 + 2 * H;
        if (c.qk_norm == qk_norm_kind::per_head) n += 2 * D;
        if (c.qk_norm == qk_norm_kind::full) n += q + kv;
        if (c.is_moe_layer(l)) {
            n += c.num_experts * H + (c.router_bias ? c.num_experts : 0);
            if (c.shared_expert_intermediate_size > 0) {
                quantized += mlp(c.shared_expert_intermediate_size);
                n += c.shared_expert_gated ? H : 0;
            }
        } else {
            quantized += mlp(c.dense_intermediate_size);
        }
    }
    return {.dense_bytes = 2 * n + quantized,
            .expert_bytes = mlp(c.moe_intermediate_size),
            .kv_bytes_per_position = c.num_layers * (c.is_mla() ? 1 : 2) * c.kv_width() * 2};
}

step_floor_model step_floor_model::of(const model_config& c, const std::string& quantization_flag) {
    model_config q = c;
    q.apply_quantization_flag(quantization_flag);
    return of(q);
}

int64_t experts_touched(std::span<const uint32_t> counts) {
    int64_t n = 0;
    for (const uint32_t c : counts) n += c > 0 ? 1 : 0;
    return n;
}

}  // namespace zmoe
