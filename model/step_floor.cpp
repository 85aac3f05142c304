#include "model/step_floor.hpp"

namespace zmoe {

step_floor_model step_floor_model::of(const model_config& c) {
    const int64_t H = c.hidden_size, D = c.head_dim;
    const int64_t q = c.num_heads * D, kv = c.num_kv_heads * D;
    int64_t attn = (q + 2 * kv) * H + H * q;
    if (c.is_mla()) {  // q (through its LoRA), kv_a, kv_b, o, the two latent norms
        const mla_params& m = c.mla;
        const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
        attn = (m.q_lora_rank > 0 ? m.q_lora_rank * (H + c.num_heads * qk + 1) : H * c.num_heads * qk) +
               H * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank +
               c.num_heads * (m.qk_nope_head_dim + m.v_head_dim) * m.kv_lora_rank + c.num_heads * m.v_head_dim * H;
    }
    if (c.qkv_bias) attn += q + 2 * kv;
    if (c.o_bias) attn += H;
    int64_t n = c.vocab_size * H + H;  // the LM head (or the tied embedding it reads) and the final norm
    for (int64_t l = 0; l < c.num_layers; ++l) {
        n += attn + 2 * H;
        if (c.qk_norm == qk_norm_kind::per_head) n += 2 * D;
        if (c.qk_norm == qk_norm_kind::full) n += q + kv;
        if (c.is_moe_layer(l)) {
            n += c.num_experts * H + (c.router_bias ? c.num_experts : 0);
            if (c.shared_expert_intermediate_size > 0)
                n += 3 * c.shared_expert_intermediate_size * H + (c.shared_expert_gated ? H : 0);
        } else {
            n += 3 * c.dense_intermediate_size * H;
        }
    }
    return {.dense_bytes = 2 * n,
            .expert_bytes = 3 * c.moe_intermediate_size * c.hidden_size * 2,
            .kv_bytes_per_position = c.num_layers * (c.is_mla() ? 1 : 2) * c.kv_width() * 2};
}

int64_t experts_touched(std::span<const uint32_t> counts) {
    int64_t n = 0;
    for (const uint32_t c : counts) n += c > 0 ? 1 : 0;
    return n;
}

}  // namespace zmoe
