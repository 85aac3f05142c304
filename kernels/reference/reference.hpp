#pragma once
// CPU references of the CUDA kernels in kernels/api.hpp: plain C++, single-threaded, no CUDA, so they build
// and run anywhere. Each one is the definition of what its kernel computes: inputs are floats holding
// BF16-representable values, arithmetic is fp32 or wider, and intermediates the kernel stores in BF16 are
// rounded to BF16 here at the same points. Shapes follow the kernels' params structs.

#include <cstdint>

#include "kernels/sampling.hpp"

namespace zmoe::kernels::ref {

/// out[t] = table[ids[t]], zero rows for ids outside [0, vocab_size).
void embedding(const int32_t* ids, const float* table, float* out, int32_t num_tokens, int32_t hidden,
               int32_t vocab_size);

/// residual may be nullptr. See launch_rms_norm.
void rms_norm(const float* x, float* residual, const float* weight, float* out, int32_t num_tokens, int32_t hidden,
              float eps);

struct rope_shape {
    int32_t num_tokens = 0;
    int32_t num_q_heads = 0;
    int32_t num_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t block_size = 0;
    float rope_theta = 10000.f;
    float eps = 1e-6f;
    int32_t norm = 0;  ///< qk_norm_mode: 0 none, 1 per head, 2 whole projection
};

/// See launch_rope_qk_norm_kv.
void rope_qk_norm_kv(const rope_shape& s, const float* qkv, const int32_t* positions, const int32_t* slots,
                     const float* q_norm_weight, const float* k_norm_weight, float* q_out, float* k_cache,
                     float* v_cache);

struct attention_shape {
    int32_t num_seqs = 0;
    int32_t num_q_heads = 0;
    int32_t num_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t block_size = 0;
    int32_t max_blocks_per_seq = 0;
    float scale = 1.f;
    int32_t v_head_dim = 0;  ///< of V and the output; 0: head_dim
};

/// See launch_paged_attention.
void paged_attention(const attention_shape& s, const float* q, const float* k_cache, const float* v_cache,
                     const int32_t* block_tables, const int32_t* query_start, const int32_t* start_pos, float* out);

/// See launch_router_topk; counts [num_experts] are overwritten.
void router_topk(const float* logits, int32_t* topk_ids, float* topk_weights, int32_t* counts, int32_t num_tokens,
                 int32_t num_experts, int32_t top_k, bool renormalize);

/// See launch_moe_route; counts [num_experts] are added to; num_valid < 0 counts every token.
void moe_route(const int32_t* topk_ids, const int32_t* replica_offsets, const int32_t* replica_slots, int32_t num_valid,
               int32_t* slot_ids, int32_t* counts, int32_t num_tokens, int32_t top_k);

/// See launch_ep_dispatch_plan: send_token/send_slot [num_ranks * capacity], src_row [num_tokens * top_k],
/// send_counts [num_ranks]; returns whether a rank was due more than capacity rows.
bool ep_dispatch_plan(const int32_t* slot_ids, int32_t num_tokens, int32_t top_k, int32_t num_ranks,
                      int32_t slots_per_rank, int32_t capacity, int32_t* send_token, int32_t* send_slot,
                      int32_t* src_row, int32_t* send_counts);

/// See launch_ep_p2p_dispatch: what rank `rank`'s send rows put in every rank's window, rows as raw 16-bit values:
/// recv_x[d] [num_ranks * capacity, hidden] and recv_slot[d] [num_ranks * capacity] of rank d.
void ep_p2p_dispatch(int32_t rank, int32_t num_ranks, int32_t capacity, int32_t slots_per_rank, int32_t hidden,
                     const uint16_t* x, const int32_t* send_token, const int32_t* send_slot, uint16_t* const* recv_x,
                     int32_t* const* recv_slot);
/// See launch_ep_p2p_combine: rank `rank`'s used rows of y (by its recv_slot) into every source rank's y_back[s].
void ep_p2p_combine(int32_t rank, int32_t num_ranks, int32_t capacity, int32_t slots_per_rank, int32_t hidden,
                    const uint16_t* y, const int32_t* recv_slot, uint16_t* const* y_back);

/// See launch_moe_permute (the plan part): expert_offsets [E+1], dest_rows [T*k], row_token [max_rows].
void moe_permute_plan(const int32_t* topk_ids, int32_t num_tokens, int32_t top_k, int32_t num_experts,
                      int32_t row_align, int32_t max_rows, int32_t* expert_offsets, int32_t* dest_rows,
                      int32_t* row_token);

/// See launch_grouped_gemm; c is written for rows [0, expert_offsets[num_experts]).
void grouped_gemm(const float* a, const float* b, const int32_t* expert_offsets, float* c, int32_t n, int32_t k,
                  int32_t num_experts, bool swiglu);

/// See launch_moe_combine.
void moe_combine(const float* y, const int32_t* dest_rows, const float* topk_weights, float* out, int32_t num_tokens,
                 int32_t top_k, int32_t hidden);

/// See launch_moe_decode: router_topk, moe_route (counts added to, valid tokens only when num_valid >= 0), then per
/// choice act = bf16(silu(x . gate) * (x . up)), y = bf16(act . down) (dots in double), and
/// out[t] = bf16(sum_j weights[t, j] * y[t, j]) in fp32, top-k order. w_gate_up [slots, 2 * inter, hidden],
/// w_down [slots, hidden, inter]; topk_weights and slot_ids [num_tokens, top_k] are written too.
void moe_decode(const float* router_logits, const int32_t* replica_offsets, const int32_t* replica_slots,
                int32_t num_valid, const float* x, const float* w_gate_up, const float* w_down, float* topk_weights,
                int32_t* slot_ids, int32_t* counts, float* out, int32_t num_tokens, int32_t top_k, int32_t num_experts,
                int32_t hidden, int32_t inter, bool renormalize);

/// The side arrays of sample_params that sample_seq_params' index ranges point into.
struct sample_inputs {
    const int32_t* history = nullptr;
    const int32_t* bias_ids = nullptr;
    const float* bias_values = nullptr;
    const int32_t* banned = nullptr;
    const uint32_t* masks = nullptr;  ///< [rows, mask_words]: structured-output token bitmasks (mask_row)
    int32_t mask_words = 0;
};

/// See launch_sample: out = logits + logit bias, then the penalties (apply_penalties on every token of the
/// history), then banned ids set to -inf, then the tokens the sequence's mask (mask_row >= 0) disallows set to -inf.
void process_logits(const float* logits, int32_t vocab_size, const sample_seq_params& s, const sample_inputs& in,
                    float* out);

/// See launch_sample: the token drawn for one sequence from `logits` (already processed).
int32_t sample(const float* logits, int32_t vocab_size, const sample_seq_params& s);
int32_t sample(const float* logits, int32_t vocab_size, float temperature, float top_p, int32_t top_k, uint64_t seed,
               uint32_t counter);

/// See launch_sample: process_logits when the sequence has_processing, then sample.
int32_t process_and_sample(const float* logits, int32_t vocab_size, const sample_seq_params& s,
                           const sample_inputs& in);

/// See launch_sample: the raw log-softmax of `token` and of the k largest logits (descending, lower id on ties).
void logprobs(const float* logits, int32_t vocab_size, int32_t token, int32_t k, float* token_logprob, int32_t* top_ids,
              float* top_logprobs);

/// Row-major y[m, n] = x[m, k] . w[n, k]^T, accumulated in double.
void gemm(const float* x, const float* w, float* y, int32_t m, int32_t n, int32_t k);

/// See launch_add_bias: y [num_tokens, n] in place.
void add_bias(float* y, const float* bias, int32_t num_tokens, int32_t n);

/// See launch_silu_mul: gate_up [num_tokens, 2n], out [num_tokens, n].
void silu_mul(const float* gate_up, float* out, int32_t num_tokens, int32_t n);

/// See launch_gather_rows.
void gather_rows(const float* in, const int32_t* rows, float* out, int32_t num_rows, int32_t hidden);

/// See launch_add_gated: out [num_tokens, hidden] in place; gate_logits nullptr = ungated.
void add_gated(float* out, const float* shared, const float* gate_logits, int32_t num_tokens, int32_t hidden);

/// See launch_qk_norm_clip: qkv in place; null weights skip the norm, clip <= 0 skips the clamp.
void qk_norm_clip(float* qkv, const float* q_norm_weight, const float* k_norm_weight, int32_t num_tokens,
                  int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim, bool per_head, float eps, float clip);

/// Multi-head latent attention shapes (see mla_rope_kv_params and the other MLA params structs).
struct mla_shape {
    int32_t num_tokens = 0;
    int32_t num_seqs = 0;
    int32_t num_heads = 0;
    int32_t nope_dim = 0;
    int32_t rope_dim = 0;
    int32_t v_dim = 0;
    int32_t kv_lora_rank = 0;
    int32_t block_size = 0;
    int32_t max_blocks_per_seq = 0;
    float attention_factor = 1.f;
    float eps = 1e-6f;
    bool interleave = true;
    float scale = 1.f;
};

/// See launch_mla_rope_kv: q [num_tokens, heads, nope + rope] rotated in place; cache rows written at `slots`.
void mla_rope_kv(const mla_shape& s, float* q, const float* kv, const float* kv_norm_weight, const int32_t* positions,
                 const int32_t* slots, const float* inv_freq, float* cache);

/// See launch_mla_q_absorb (sums in double).
void mla_q_absorb(const mla_shape& s, const float* q, const float* kv_b, float* q_lat);

/// See launch_mla_attention (two-pass softmax in double).
void mla_attention(const mla_shape& s, const float* q_lat, const float* q, const float* cache,
                   const int32_t* block_tables, const int32_t* query_start, const int32_t* start_pos, float* o_lat);

/// See launch_mla_v_up: out [num_tokens, heads * v_dim], BF16-rounded.
void mla_v_up(const mla_shape& s, const float* o_lat, const float* kv_b, float* out);

struct router_grouped_shape {
    int32_t num_tokens = 0;
    int32_t num_experts = 0;
    int32_t top_k = 0;
    int32_t n_group = 1;
    int32_t topk_group = 1;
    bool sigmoid = false;
    bool renormalize = false;
    float scaling = 1.f;
};

/// See launch_router_grouped (probabilities and sums in double).
void router_grouped(const router_grouped_shape& s, const float* logits, const float* bias, int32_t* topk_ids,
                    float* topk_weights);

}  // namespace zmoe::kernels::ref
