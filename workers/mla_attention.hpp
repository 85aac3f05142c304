#pragma once
// Multi-head latent attention (DeepSeek-V2/V3) on the CPU, fp32, over a paged cache of latents.
//
// Per token the cache holds c = RMSNorm(kv_a(x)[:r]) (the latent, r = kv_lora_rank) followed by the rotated
// shared rope key k_pe [dr]; keys and values are never expanded. Attention runs in the absorbed form: for query
// head h, q_lat = W_k,h^T q_nope,h (W_k,h: the head's dn key rows of kv_b_proj), score_j = (q_lat . c_j +
// q_pe,h . k_pe,j) * scale, o_lat = sum_j softmax_j c_j, out_h = W_v,h o_lat (the head's dv value rows). That is
// transformers' expanded form (k_nope = W_k c, v = W_v c) with the products reassociated.

#include <cstdint>
#include <vector>

#include "model/model_config.hpp"
#include "workers/cpu_kernels.hpp"
#include "workers/kv_cache.hpp"
#include "workers/model_weights.hpp"
#include "workers/paged_attention.hpp"
#include "workers/thread_pool.hpp"

namespace zmoe {

/// RoPE cos/sin of one position for MLA: angle_i = position * inv_freq[i] (fp32), cos/sin times
/// `attention_factor` (transformers scales both by YaRN's attention factor). cos_out/sin_out: [inv_freq.size()].
void mla_rope_cos_sin(int64_t position, const std::vector<float>& inv_freq, float attention_factor, float* cos_out,
                      float* sin_out);

/// Rotates x [dim] in place: interleaved pairs (2i, 2i + 1) when `interleave`, else rotate-half pairs
/// (i, i + dim/2), each by angle i. The interleaved result stays interleaved (transformers' DeepSeek-V3 writes
/// it de-interleaved; q and k get the same permutation, so q . k is unchanged).
void mla_rope_apply(float* x, const float* cos_v, const float* sin_v, int64_t dim, bool interleave);

/// The attention block of layer `layer` for x [num_rows, hidden] (input-normed rows of `seqs`): stores every row's
/// latent and rope key in `cache` (kv_width() floats per token, K only), attends causally within each sequence and
/// writes o_proj's output to out [num_rows, hidden]. cos/sin: [num_rows, qk_rope_head_dim / 2] from
/// mla_rope_cos_sin. Deterministic per row (independent of the batch, chunking and thread count). `round`: BF16
/// where the CUDA executor stores BF16 (each projection's output, the latent norms' outputs, the cache rows, the
/// absorbed query and latent output, the attention output; kv_b itself rounded to BF16 as the CUDA worker keeps it).
void mla_attention(thread_pool& pool, const model_config& config, const attention_weights& w, kv_cache& cache,
                   int64_t layer, const std::vector<attention_seq>& seqs, const float* x, int64_t num_rows,
                   const float* cos, const float* sin, float* out, activation_rounding round = {});

}  // namespace zmoe
