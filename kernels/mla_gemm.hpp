#pragma once
// MLA's per-head projections through kv_b as strided-batched cuBLASLt GEMMs (one batch entry per head), declared
// apart from api.hpp: the absorbed projections around the tensor-core decode kernel taking and giving BF16 latents,
// and the expanded prefill's K and V written straight into the attention kernel's layouts.

#include "kernels/api.hpp"

namespace zmoe::kernels {

// The absorbed projections as batched tensor-core GEMMs (cuBLASLt, one batch entry per head), for the decode path
// whose kernel takes BF16 latents (launch_mla_decode_bf16): q_lat[t, h] = W_k,h^T
// q_nope[t, h] (kv_b's rows h (nope + v) .. + nope, rounded to BF16 from fp32 sums) and out[t, h] = W_v,h o_lat[t, h]
// (rows h (nope + v) + nope .. + v). What launch_mla_q_absorb / launch_mla_v_up compute on every token, with BF16
// latents. Every pointer and row stride must be 16-byte aligned (nope_dim, rope_dim, v_dim, kv_lora_rank multiples
// of 8).
struct mla_absorb_gemm_params {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;  // [workspace_bytes] device scratch for cuBLASLt
    size_t workspace_bytes = 0;
    const bf16* kv_b = nullptr;  // [num_heads * (nope_dim + v_dim), kv_lora_rank]
    const bf16* in = nullptr;    // q_absorb: q [num_tokens, num_heads, nope + rope]; v_up: o_lat [.., kv_lora_rank]
    bf16* out = nullptr;         // q_absorb: q_lat [num_tokens, num_heads, kv_lora_rank]; v_up: [.., heads * v_dim]
    int32_t num_tokens = 0;
    int32_t num_heads = 0;
    int32_t nope_dim = 0;
    int32_t rope_dim = 0;
    int32_t v_dim = 0;
    int32_t kv_lora_rank = 0;
};

void launch_mla_q_absorb_gemm(const mla_absorb_gemm_params& p, cudaStream_t stream);
void launch_mla_v_up_gemm(const mla_absorb_gemm_params& p, cudaStream_t stream);

/// The same two projections for a decode step of 1..kMlaAbsorbGemvMaxTokens tokens as streaming kernels over kv_b
/// (mla_absorb_gemv.cu; handle and workspace unused): the weights loaded before the programmatic wait, launched
/// programmatically dependent (pdl.cuh), fp32 sums in a fixed order rounded once to BF16. Where cuBLASLt's batched
/// GEMMs at one token read the 2 MB of W_k or W_v well below the copy bandwidth and end the kernels' PDL chain.
constexpr int32_t kMlaAbsorbGemvMaxTokens = 4;
/// True when launch_mla_q_absorb_gemv / launch_mla_v_up_gemv take this shape: kv_lora_rank 512, nope_dim <= 256,
/// v_dim a multiple of 16, 1..kMlaAbsorbGemvMaxTokens tokens.
bool mla_absorb_gemv_supported(int32_t num_tokens, int32_t nope_dim, int32_t v_dim, int32_t kv_lora_rank);
void launch_mla_q_absorb_gemv(const mla_absorb_gemm_params& p, cudaStream_t stream);
void launch_mla_v_up_gemv(const mla_absorb_gemm_params& p, cudaStream_t stream);
/// launch_mla_rope_kv(rope) and launch_mla_q_absorb_gemv(p) in one launch, with the same bits: the latent rows
/// (norm, RoPE, cache write) and q_pe's rotation are done by a few of the absorb kernel's blocks after the wait, so a
/// decode step's chain holds one kernel less. rope.q is p.in and the dims and token counts agree.
void launch_mla_rope_q_absorb_gemv(const mla_rope_kv_params& rope, const mla_absorb_gemm_params& p,
                                   cudaStream_t stream);

/// Floats per split's partial row in launch_mla_decode's workspace: the kv_lora_rank (512) normalised outputs, the
/// split's log-sum-exp, padding to 16 bytes. Row (t, h, split) is at ((t * num_heads + h) * num_splits + split).
constexpr int32_t kMlaDecodePartStride = 512 + 4;
/// launch_mla_v_up_gemv whose input is still split: p.in is unused; `partials` holds num_splits (2 ..
/// kMlaDecodeMaxSplits) partial rows per (token, head) as launch_mla_decode_bf16's split pass leaves them, merged in
/// the kernel exactly as that launch's combine merges them (the same weights, order and BF16 rounding), so the result
/// equals the combine followed by launch_mla_v_up_gemv bit for bit, one launch fewer.
void launch_mla_combine_v_up_gemv(const mla_absorb_gemm_params& p, const float* partials, int32_t num_splits,
                                  cudaStream_t stream);

// The expanded prefill's K and V straight from the gathered latents, in the prefill attention kernel's layouts
// (rows of num_heads heads: K [nope | rope] = nope_dim + rope_dim wide, V v_dim wide, no padding): K[n, h, :nope] =
// W_k,h latent[n] and V[n, h] = W_v,h latent[n] as two batched GEMMs over the heads (the latents shared), rounded to
// BF16 from fp32 sums; launch_mla_gather_latent_rope writes K's rope part. What launch_gemm_bf16 into kv_up followed
// by launch_mla_build_kv computes, without kv_up.
struct mla_expand_gemm_params {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;  // [workspace_bytes] device scratch for cuBLASLt
    size_t workspace_bytes = 0;
    const bf16* kv_b = nullptr;    // [num_heads * (nope_dim + v_dim), kv_lora_rank]
    const bf16* latent = nullptr;  // [num_rows, kv_lora_rank]
    bf16* k = nullptr;             // [num_rows, num_heads, nope_dim + rope_dim]: the nope part written
    bf16* v = nullptr;             // [num_rows, num_heads, v_dim]
    int32_t num_rows = 0;
    int32_t num_heads = 0;
    int32_t nope_dim = 0;
    int32_t rope_dim = 0;
    int32_t v_dim = 0;
    int32_t kv_lora_rank = 0;
};

void launch_mla_expand_gemm(const mla_expand_gemm_params& p, cudaStream_t stream);

struct mla_gather_latent_rope_params {
    const bf16* cache = nullptr;     // [num_blocks, block_size, kv_lora_rank + rope_dim]
    const int32_t* slots = nullptr;  // [num_rows]: block * block_size + offset; < 0: a zero row
    bf16* latent = nullptr;          // [num_rows, kv_lora_rank]
    bf16* k = nullptr;               // [num_rows, num_heads, nope_dim + rope_dim]: the rope part written
    int32_t num_rows = 0;
    int32_t num_heads = 0;
    int32_t nope_dim = 0;      ///< multiple of 8
    int32_t rope_dim = 0;      ///< multiple of 8
    int32_t kv_lora_rank = 0;  ///< multiple of 8
};

/// launch_mla_gather_latent, and k[i, h, nope_dim:] = the cache row's k_pe for every head (zeros for slots[i] < 0),
/// bit-exact copies.
void launch_mla_gather_latent_rope(const mla_gather_latent_rope_params& p, cudaStream_t stream);

/// The BF16 latents of launch_mla_decode_bf16.
struct mla_latents_bf16 {
    const bf16* q = nullptr;  // [num_seqs, num_heads, kv_lora_rank], in place of mla_decode_params::q_lat
    bf16* o = nullptr;        // [num_seqs, num_heads, kv_lora_rank], in place of mla_decode_params::o_lat
};

/// launch_mla_decode with the absorbed query read from lat.q instead of p.q_lat (BF16, what the MMAs take anyway)
/// and/or the output written to lat.o rounded to BF16 instead of p.o_lat: for each, exactly one of the two is set.
void launch_mla_decode_bf16(const mla_decode_params& p, const mla_latents_bf16& lat, cudaStream_t stream);

/// launch_mla_decode_bf16(p, lat) then launch_mla_v_up_gemv(v_up) (v_up.in == lat.o), with the split combine done
/// inside the v_up kernel (launch_mla_combine_v_up_gemv) where there are splits: the same bits, one launch fewer.
/// For 1..kMlaAbsorbGemvMaxTokens sequences (mla_absorb_gemv_supported).
void launch_mla_decode_v_up_gemv(const mla_decode_params& p, const mla_latents_bf16& lat,
                                 const mla_absorb_gemm_params& v_up, cudaStream_t stream);

}  // namespace zmoe::kernels
