#include "workers/cuda/cuda_deepseek.hpp"

#include <string>
#include <vector>

#include "base/error.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::cuda {
namespace {

using kernels::bf16;

// transformers' DeepSeek q_a_layernorm / kv_a_layernorm use the RMSNorm default eps, not rms_norm_eps (as the CPU
// backend, workers/mla_attention.cpp).
constexpr float kLatentNormEps = 1e-6f;

int32_t i32(int64_t v) { return static_cast<int32_t>(v); }

void gemm(const gemm_context& g, const void* x, const void* w, void* y, int32_t m, int32_t n, int32_t k,
          cudaStream_t stream) {
    kernels::launch_gemm_bf16({.handle = g.handle,
                               .workspace = g.workspace,
                               .workspace_bytes = g.workspace_bytes,
                               .x = static_cast<const bf16*>(x),
                               .w = static_cast<const bf16*>(w),
                               .y = y,
                               .m = m,
                               .n = n,
                               .k = k},
                              stream);
}

}  // namespace

void check_deepseek_supported(const model_config& c) {
    auto need = [&](bool ok, const std::string& what) {
        if (!ok) throw error(errc::unsupported, std::string("CUDA backend: ") + model_arch_name(c.arch) + ": " + what);
    };
    if (c.is_mla()) {
        const mla_params& m = c.mla;
        need(m.kv_lora_rank % 8 == 0, "kv_lora_rank must be a multiple of 8");
        need(m.qk_rope_head_dim % 8 == 0 && m.qk_rope_head_dim <= 128,
             "qk_rope_head_dim must be a multiple of 8 and at most 128");
        need(m.kv_lora_rank + m.qk_rope_head_dim <= 1024, "kv_lora_rank + qk_rope_head_dim must be at most 1024");
        need(m.qk_nope_head_dim >= 1 && m.qk_nope_head_dim <= 256, "qk_nope_head_dim must be in [1, 256]");
        need(m.q_lora_rank % 8 == 0, "q_lora_rank must be a multiple of 8");
        need(m.v_head_dim >= 1, "v_head_dim must be positive");
    }
    if (uses_grouped_router(c)) {
        need(c.n_group >= 1 && c.n_group <= 32, "n_group must be in [1, 32] (router kernel)");
        need(c.topk_group >= 1 && c.topk_group <= c.n_group, "topk_group must be in [1, n_group]");
        need(c.num_experts_per_tok <= c.topk_group * (c.num_experts / c.n_group),
             "num_experts_per_tok must fit in the topk_group kept groups");
    }
}

bool uses_grouped_router(const model_config& c) {
    return c.router != router_kind::softmax_topk || c.routed_scaling_factor != 1.0;
}

void launch_deepseek_router(const model_config& c, const cuda_layer& w, const float* logits, int32_t* topk_ids,
                            float* topk_weights, int32_t num_tokens, cudaStream_t stream) {
    const bool grouped = c.router != router_kind::softmax_topk;
    const bool sigmoid = c.router == router_kind::sigmoid_group_limited;
    kernels::launch_router_grouped(
        {.logits = logits,
         .bias = sigmoid ? w.router_bias.as<float>() : nullptr,
         .topk_ids = topk_ids,
         .topk_weights = topk_weights,
         .num_tokens = num_tokens,
         .num_experts = i32(c.num_experts),
         .top_k = i32(c.num_experts_per_tok),
         .n_group = grouped ? i32(c.n_group) : 1,
         .topk_group = grouped ? i32(c.topk_group) : 1,
         .scoring = sigmoid ? kernels::router_scoring::sigmoid : kernels::router_scoring::softmax,
         .renormalize = c.norm_topk_prob,
         .scaling = static_cast<float>(c.routed_scaling_factor)},
        stream);
}

mla_attention_runner::mla_attention_runner(const model_config& c, int32_t max_tokens) : c_(c) {
    const mla_params& m = c.mla;
    const size_t T = static_cast<size_t>(max_tokens), heads = static_cast<size_t>(c.num_heads);
    const size_t r = static_cast<size_t>(m.kv_lora_rank), dr = static_cast<size_t>(m.qk_rope_head_dim);
    const size_t qk = static_cast<size_t>(m.qk_nope_head_dim) + dr;
    auto alloc = [&](device_buffer& b, size_t bytes) {
        b = device_buffer(bytes);
        bytes_ += static_cast<int64_t>(bytes);
    };
    alloc(qa_, T * static_cast<size_t>(m.q_lora_rank) * sizeof(bf16));
    alloc(q_, T * heads * qk * sizeof(bf16));
    alloc(kv_, T * (r + dr) * sizeof(bf16));
    alloc(q_lat_, T * heads * r * sizeof(float));
    alloc(o_lat_, T * heads * r * sizeof(float));
    alloc(attn_, T * heads * static_cast<size_t>(m.v_head_dim) * sizeof(bf16));
    const std::vector<float> inv_freq = c.rope_inv_freq();
    alloc(inv_freq_, inv_freq.size() * sizeof(float));
    ZMOE_CUDA_CHECK(
        cudaMemcpy(inv_freq_.as<void>(), inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
}

void mla_attention_runner::run(const cuda_layer& w, const mla_step& s, const bf16* xn, bf16* cache, bf16* out,
                               const gemm_context& g, cudaStream_t stream) const {
    const mla_params& m = c_.mla;
    const int32_t T = s.num_tokens, H = i32(c_.hidden_size), heads = i32(c_.num_heads);
    const int32_t r = i32(m.kv_lora_rank), dn = i32(m.qk_nope_head_dim), dr = i32(m.qk_rope_head_dim);
    const int32_t dv = i32(m.v_head_dim), qk = dn + dr;
    if (T == 0) return;
    bf16* q = q_.as<bf16>();
    if (!w.mla.q_a.empty()) {
        const int32_t qr = i32(m.q_lora_rank);
        bf16* qa = qa_.as<bf16>();
        gemm(g, xn, w.mla.q_a.as<bf16>(), qa, T, qr, H, stream);
        kernels::launch_rms_norm({.x = qa,
                                  .weight = w.mla.q_a_norm.as<bf16>(),
                                  .out = qa,
                                  .num_tokens = T,
                                  .hidden = qr,
                                  .eps = kLatentNormEps},
                                 stream);
        gemm(g, qa, w.mla.q_b.as<bf16>(), q, T, heads * qk, qr, stream);
    } else {
        gemm(g, xn, w.mla.q_b.as<bf16>(), q, T, heads * qk, H, stream);
    }
    bf16* kv = kv_.as<bf16>();
    gemm(g, xn, w.mla.kv_a.as<bf16>(), kv, T, r + dr, H, stream);
    kernels::launch_mla_rope_kv({.q = q,
                                 .kv = kv,
                                 .kv_norm_weight = w.mla.kv_a_norm.as<bf16>(),
                                 .positions = s.positions,
                                 .slot_mapping = s.kv_slots,
                                 .inv_freq = inv_freq_.as<float>(),
                                 .cache = cache,
                                 .num_tokens = T,
                                 .num_heads = heads,
                                 .nope_dim = dn,
                                 .rope_dim = dr,
                                 .kv_lora_rank = r,
                                 .block_size = s.block_size,
                                 .attention_factor = static_cast<float>(c_.rope.attention_factor),
                                 .eps = kLatentNormEps,
                                 .interleave = m.rope_interleave},
                                stream);
    kernels::launch_mla_q_absorb({.q = q,
                                  .kv_b = w.mla.kv_b.as<bf16>(),
                                  .q_lat = q_lat_.as<float>(),
                                  .num_tokens = T,
                                  .num_heads = heads,
                                  .nope_dim = dn,
                                  .rope_dim = dr,
                                  .v_dim = dv,
                                  .kv_lora_rank = r},
                                 stream);
    kernels::launch_mla_attention({.q_lat = q_lat_.as<float>(),
                                   .q = q,
                                   .cache = cache,
                                   .block_tables = s.block_tables,
                                   .query_start = s.query_start,
                                   .start_pos = s.start_pos,
                                   .o_lat = o_lat_.as<float>(),
                                   .num_tokens = T,
                                   .num_seqs = s.num_seqs,
                                   .num_heads = heads,
                                   .nope_dim = dn,
                                   .rope_dim = dr,
                                   .kv_lora_rank = r,
                                   .block_size = s.block_size,
                                   .max_blocks_per_seq = s.max_blocks_per_seq,
                                   .scale = c_.softmax_scale()},
                                  stream);
    bf16* attn = attn_.as<bf16>();
    kernels::launch_mla_v_up({.o_lat = o_lat_.as<float>(),
                              .kv_b = w.mla.kv_b.as<bf16>(),
                              .out = attn,
                              .num_tokens = T,
                              .num_heads = heads,
                              .nope_dim = dn,
                              .v_dim = dv,
                              .kv_lora_rank = r},
                             stream);
    gemm(g, attn, w.o.as<bf16>(), out, T, H, heads * dv, stream);
}

}  // namespace zmoe::cuda
