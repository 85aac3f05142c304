#pragma once
// The CUDA kernels of zmoe (Hopper, sm_90a). Every kernel is reached through one host launcher
// `launch_*(const *_params&, cudaStream_t)`; the params structs are plain data whose every pointer field states
// its shape. Storage is BF16, accumulation and all arithmetic fp32. Launchers only enqueue work on the stream
// (no synchronisation, no allocation), so they can be captured in CUDA graphs. A precondition a caller breaks
// (an unsupported size) aborts with file:line: validate model configurations at load time.
//
// The CPU references that define what each kernel computes live in kernels/reference/reference.hpp.

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/sampling.hpp"

namespace zmoe::kernels {

using bf16 = __nv_bfloat16;

// ---------------------------------------------------------------------------------------------------------
// Embedding

struct embedding_params {
    const int32_t* token_ids = nullptr;  // [num_tokens]
    const bf16* table = nullptr;         // [vocab_size, hidden]
    bf16* out = nullptr;                 // [num_tokens, hidden]
    int32_t num_tokens = 0;
    int32_t hidden = 0;
    int32_t vocab_size = 0;
};

/// out[t] = table[token_ids[t]]. An id outside [0, vocab_size) yields a zero row (ids are validated upstream;
/// this only keeps a stray placeholder from reading out of bounds).
void launch_embedding(const embedding_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// RMSNorm with fused residual add

struct rms_norm_params {
    const bf16* x = nullptr;       // [num_tokens, hidden]
    bf16* residual = nullptr;      // [num_tokens, hidden], in/out; nullptr for a plain norm
    const bf16* weight = nullptr;  // [hidden]
    bf16* out = nullptr;           // [num_tokens, hidden]; may alias x
    int32_t num_tokens = 0;
    int32_t hidden = 0;  ///< multiple of 8
    float eps = 1e-6f;
};

/// With residual: s = bf16(x + residual); residual = s; out = bf16(s * rsqrt(mean(s^2) + eps) * weight).
/// Without: the same with s = x. As Hugging Face's decoder layers, where the sum is kept in BF16.
void launch_rms_norm(const rms_norm_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// RoPE (neox rotate-half) fused with q/k RMSNorm and the paged KV-cache write

enum class qk_norm_mode : int32_t {
    none = 0,
    per_head = 1,  ///< Qwen3: RMSNorm over each head's head_dim, one weight [head_dim] shared by all heads
    whole = 2,     ///< OLMoE: RMSNorm over the whole q (k) projection, weight [num_heads * head_dim]
};

struct rope_qk_norm_kv_params {
    const bf16* qkv = nullptr;              // [num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim]: q | k | v
    const int32_t* positions = nullptr;     // [num_tokens]
    const int32_t* slot_mapping = nullptr;  // [num_tokens]: block * block_size + offset; < 0 skips the write
    const bf16* q_norm_weight = nullptr;    // per_head: [head_dim]; whole: [num_q_heads * head_dim]; none: unused
    const bf16* k_norm_weight = nullptr;    // per_head: [head_dim]; whole: [num_kv_heads * head_dim]; none: unused
    bf16* q_out = nullptr;                  // [num_tokens, num_q_heads, head_dim]
    bf16* k_cache = nullptr;                // [num_blocks, block_size, num_kv_heads, head_dim]
    bf16* v_cache = nullptr;                // [num_blocks, block_size, num_kv_heads, head_dim]
    int32_t num_tokens = 0;
    int32_t num_q_heads = 0;
    int32_t num_kv_heads = 0;
    int32_t head_dim = 0;  ///< even, multiple of 8
    int32_t block_size = 0;
    float rope_theta = 10000.f;
    float eps = 1e-6f;
    qk_norm_mode norm = qk_norm_mode::none;
};

/// q_out = rope(norm_q(q)); k_cache[slot] = rope(norm_k(k)); v_cache[slot] = v. Rotation over the full head_dim,
/// inv_freq[i] = theta^(-2i / head_dim), angle = position * inv_freq[i] in fp32 (as transformers computes it).
void launch_rope_qk_norm_kv(const rope_qk_norm_kv_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Paged attention for mixed batches (prefill chunks and decodes in one launch)

/// Rows (query token x query head of one KV head group) one attention work item covers: the default, and the most
/// items a step can need are counted with it (paged_attention_rows_per_item can be larger, never smaller).
constexpr int32_t kAttentionRowsPerItem = 64;

/// The kernel behind launch_paged_attention.
enum class paged_attention_impl : int32_t {
    automatic = 0,  ///< wgmma where it runs (compute capability 9.x, head_dim 64 or 128): the warp-specialised
                    ///< kernel for 128-row items and a block size that is a multiple of 8, else the plain one; else
                    ///< mma. Head dims (192, 128): the warp-specialised kernel for 128-row items, mma for 64-row ones
    mma = 1,        ///< mma.sync m16n8k16 (paged_attention.cu): any device, every head_dim of the contract
    wgmma = 2,      ///< the plain wgmma kernel (paged_attention_sm90.cu): compute capability 9.x, head_dim 64 or 128
};

struct paged_attention_params {
    const bf16* q = nullptr;                // [num_tokens, num_q_heads, head_dim]
    const bf16* k_cache = nullptr;          // [num_blocks, block_size, num_kv_heads, head_dim]
    const bf16* v_cache = nullptr;          // [num_blocks, block_size, num_kv_heads, v_head_dim or head_dim]
    const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
    const int32_t* query_start = nullptr;   // [num_seqs + 1]: cumulative query tokens; seq s owns [qs[s], qs[s+1])
    const int32_t* start_pos = nullptr;     // [num_seqs]: position of each sequence's first query token
    const int32_t* work_items = nullptr;    // [num_work_items, 2]: (seq, first row), from paged_attention_plan
    bf16* out = nullptr;                    // [num_tokens, num_q_heads, v_head_dim or head_dim]
    int32_t num_seqs = 0;
    int32_t num_work_items = 0;
    int32_t num_q_heads = 0;
    int32_t num_kv_heads = 0;  ///< divides num_q_heads
    int32_t head_dim = 0;      ///< 16, 32, 64, 128 or 256
    int32_t block_size = 0;
    int32_t max_blocks_per_seq = 0;
    float scale = 1.f;  ///< usually 1/sqrt(head_dim)
    paged_attention_impl impl = paged_attention_impl::automatic;
    int32_t rows_per_item = kAttentionRowsPerItem;  ///< the plan's (paged_attention_plan): 64, or 128 for wgmma
    int32_t v_head_dim = 0;  ///< of V and the output; 0: head_dim (paged_attention_dims_supported)
};

/// The rows per work item launch_paged_attention runs fastest with on the current device for these head dims
/// (v_head_dim 0: head_dim): 128 where a wgmma kernel runs them (its two warpgroups share each K/V tile; (192, 128)
/// only on the warp-specialised one, which needs a block size that is a multiple of 8), else kAttentionRowsPerItem.
int32_t paged_attention_rows_per_item(int32_t head_dim, int32_t v_head_dim = 0);

/// True for the (head_dim, v_head_dim) pairs launch_paged_attention takes: (d, 0 or d) for d in 16, 32, 64, 128,
/// 256, and (192, 128) (MLA's expanded form: nope 128 + rope 64 for Q and K, 128 for V).
bool paged_attention_dims_supported(int32_t head_dim, int32_t v_head_dim);

/// Host-side plan: the work items for one step, from the host copy of query_start. Each item is a tile of
/// rows_per_item rows of one sequence, where row r of sequence s is query token r / group and query head
/// kv_head * group + r % group (group = num_q_heads / num_kv_heads): the heads that share a KV head share the
/// K/V tiles. Returns [num_items * 2] ints to upload as work_items.
std::vector<int32_t> paged_attention_plan(std::span<const int32_t> query_start_host, int32_t num_q_heads,
                                          int32_t num_kv_heads, int32_t rows_per_item = kAttentionRowsPerItem);

/// Host-side helper: positions and KV-cache slots of one sequence's query tokens [start_pos, start_pos + n).
void kv_slots_plan(std::span<const int32_t> block_table, int32_t start_pos, int32_t n, int32_t block_size,
                   int32_t* positions_out, int32_t* slots_out);

/// Each query token at position pos = start_pos[s] + t attends causally to KV positions [0, pos] of its sequence,
/// read through its block table; softmax in fp32 with scale; the K/V of the query tokens must be in the cache
/// already (launch_rope_qk_norm_kv first). p.impl picks the kernel (paged_attention_impl); the same work items serve
/// both.
void launch_paged_attention(const paged_attention_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Paged attention for decode steps (one query token per sequence), split over the KV

/// A launch splits each sequence's KV into at most num_splits chunks of decode_attention_chunk(kv_len, num_splits)
/// keys, one block per chunk and KV head: at least kDecodeAttentionMinChunk keys, a multiple of
/// kDecodeAttentionChunkAlign. A function of the sequence's own length and the launch's split count only: a graph
/// captured for a batch size serves every KV length, and a sequence's result does not depend on the others.
constexpr int32_t kDecodeAttentionMinChunk = 256;
constexpr int32_t kDecodeAttentionChunkAlign = 64;
constexpr int32_t kDecodeAttentionMaxSplits = 256;
constexpr int32_t decode_attention_chunk(int32_t kv_len, int32_t num_splits) {
    const int32_t per = (kv_len + num_splits - 1) / num_splits;
    const int32_t rounded =
        (per + kDecodeAttentionChunkAlign - 1) / kDecodeAttentionChunkAlign * kDecodeAttentionChunkAlign;
    return rounded > kDecodeAttentionMinChunk ? rounded : kDecodeAttentionMinChunk;
}

/// True when launch_decode_attention supports this shape: head_dim 64, 128 or 256 and num_q_heads / num_kv_heads
/// in {1, 2, 4, 8, 16}. Other shapes use launch_paged_attention.
bool decode_attention_supported(int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim);

/// The chunk-pass blocks a split aims at on the current device for this (supported) shape: one per multiprocessor.
/// Queries the device: call once, at set-up.
int32_t decode_attention_slots(int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim);
/// The split count for a step's shape: as many chunks per (sequence, KV head) as keep the batch's blocks within
/// `slots` (decode_attention_slots), at most what a sequence of max_kv_len keys (the longest any may have) can use,
/// at most kDecodeAttentionMaxSplits; from 8 splits up rounded down to a multiple of 8 (the blocks of a wave stay
/// whole); 1 (no combine pass) when the batch alone fills the device.
int32_t decode_attention_splits(int32_t num_seqs, int32_t num_kv_heads, int32_t max_kv_len, int32_t slots);
/// The fp32 scratch of a launch with num_splits > 1 (0 otherwise): each chunk's normalised output and log-sum-exp.
size_t decode_attention_workspace_bytes(int32_t num_seqs, int32_t num_q_heads, int32_t head_dim, int32_t num_splits);

struct decode_attention_params {
    const bf16* q = nullptr;                // [num_seqs, num_q_heads, head_dim]: sequence s's one query token
    const bf16* k_cache = nullptr;          // [num_blocks, block_size, num_kv_heads, head_dim]
    const bf16* v_cache = nullptr;          // [num_blocks, block_size, num_kv_heads, head_dim]
    const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
    const int32_t* start_pos = nullptr;     // [num_seqs]: the query token's position; it sees keys [0, start_pos]
    float* workspace = nullptr;             // decode_attention_workspace_bytes(num_seqs, ..., num_splits) bytes:
                                            // [num_seqs, num_q_heads, num_splits] x (head_dim outputs), then
                                            // [num_seqs, num_q_heads, num_splits] log-sum-exps; unused when
                                            // num_splits == 1
    bf16* out = nullptr;                    // [num_seqs, num_q_heads, head_dim]
    int32_t num_seqs = 0;
    int32_t num_q_heads = 0;
    int32_t num_kv_heads = 0;
    int32_t head_dim = 0;  ///< decode_attention_supported
    int32_t block_size = 0;
    int32_t max_blocks_per_seq = 0;
    int32_t num_splits = 1;  ///< chunks per sequence at most, [1, kDecodeAttentionMaxSplits]
                             ///< (decode_attention_splits); the chunking, hence the bits, depend on it
    float scale = 1.f;
};

/// What launch_paged_attention computes for a batch of one query token per sequence (query_start = 0, 1, ..., n),
/// on tensor cores (BF16 MMAs, fp32 accumulation and softmax, the probabilities rounded to BF16 for PV as
/// launch_paged_attention does): one block per (chunk, KV head, sequence), the group's query heads the MMA rows that
/// share each K/V tile; a sequence of one chunk is written by its block, one of several chunks is combined, in chunk
/// order, by a second launch (only when num_splits > 1).
void launch_decode_attention(const decode_attention_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// MoE router

struct router_topk_params {
    const float* logits = nullptr;     // [num_tokens, num_experts]
    int32_t* topk_ids = nullptr;       // [num_tokens, top_k]
    float* topk_weights = nullptr;     // [num_tokens, top_k]
    int32_t* expert_counts = nullptr;  // [num_experts] or nullptr: zeroed, then counted, by the launcher
    int32_t num_tokens = 0;
    int32_t num_experts = 0;   ///< <= 512
    int32_t top_k = 0;         ///< 1..16, <= num_experts
    bool renormalize = false;  ///< divide the top-k probabilities by their sum (norm_topk_prob)
    // The replica choice of launch_moe_route fused in (one launch less per MoE layer), when replica_offsets is set;
    // the fields mean what moe_route_params' do.
    const int32_t* replica_offsets = nullptr;  // [num_experts + 1]
    const int32_t* replica_slots = nullptr;    // [replica_offsets[num_experts]]
    const int32_t* num_valid = nullptr;        // [1] or nullptr (all valid)
    int32_t* slot_ids = nullptr;               // [num_tokens, top_k]
    int32_t* load_counts = nullptr;            // [num_experts] or nullptr: += the valid choices (not zeroed)
};

/// probs = softmax(logits); ids = top-k of probs in descending order (lower expert index first on ties);
/// weights = their probabilities, renormalised to sum 1 if asked. Mixtral's top-k-then-softmax is the
/// renormalised form. With replica_offsets set, also what launch_moe_route computes from those ids.
void launch_router_topk(const router_topk_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Replica choice (logical expert -> physical slot) and the EPLB load counts

struct moe_route_params {
    const int32_t* topk_ids = nullptr;         // [num_tokens, top_k]: logical experts, from launch_router_topk
    const int32_t* replica_offsets = nullptr;  // [num_experts + 1]: expert e's replicas are replica_slots[o[e], o[e+1])
    const int32_t* replica_slots = nullptr;    // [replica_offsets[num_experts]]: each replica's slot, in (rank, slot)
                                               // order, numbered rank * slots_per_rank + local slot
    const int32_t* num_valid = nullptr;        // [1] or nullptr (all valid): tokens from *num_valid on are padding
    int32_t* slot_ids = nullptr;               // [num_tokens, top_k]: the slot serving each choice
    int32_t* expert_counts = nullptr;          // [num_experts] or nullptr: += the valid choices of each expert
    int32_t num_tokens = 0;
    int32_t top_k = 0;
    int32_t num_experts = 0;  ///< <= 1024; every expert has at least one replica
};

/// slot_ids[t, j] = replica_slots[o[e] + t % (o[e+1] - o[e])] with e = topk_ids[t, j] (expert_placement::pick's
/// rule: the token's index in the batch picks the replica); expert_counts[e] += the number of (t < *num_valid, j)
/// choosing e. Counts are not zeroed here, so one buffer can collect a whole step.
void launch_moe_route(const moe_route_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Expert parallelism: the fixed-capacity dispatch plan, made on the device

/// Most ranks launch_ep_dispatch_plan plans for.
constexpr int32_t kMaxEpRanks = 32;

struct ep_dispatch_plan_params {
    const int32_t* slot_ids = nullptr;  // [num_tokens, top_k]: global slots in [0, num_ranks * slots_per_rank)
    int32_t* send_token = nullptr;      // [num_ranks, capacity]: the token each send row carries; 0 if unused
    int32_t* send_slot = nullptr;       // [num_ranks, capacity]: the row's slot on its rank; slots_per_rank if unused
    int32_t* src_row = nullptr;         // [num_tokens, top_k]: the send row carrying (t, k); 0 if it did not fit
    int32_t* send_counts = nullptr;     // [num_ranks] or nullptr: the rows each rank was due (may exceed capacity)
    int32_t* overflow = nullptr;        // [1]: set to 1 when a rank was due more than capacity rows (never cleared)
    int32_t num_tokens = 0;
    int32_t top_k = 0;
    int32_t num_ranks = 0;  ///< 1..kMaxEpRanks
    int32_t slots_per_rank = 0;
    int32_t capacity = 0;  ///< send rows per destination rank, >= 1
};

/// Rank d's send rows [d * capacity, (d + 1) * capacity) carry, in (token, k) order, the choices whose slot lies
/// on d (slot / slots_per_rank == d), each with its local slot (slot % slots_per_rank); rows past what d is due
/// carry token 0 and slot slots_per_rank (an empty "expert" the receiver skips). Choices past a rank's capacity
/// are not carried: src_row 0 and *overflow = 1, for the caller to redo the step on an exact path. One block: the
/// same plan the host would make, with no copy to the host, so it can be captured in a CUDA graph.
void launch_ep_dispatch_plan(const ep_dispatch_plan_params& p, cudaStream_t stream);

// The FP8 dispatch (an FP8 model's experts read e4m3 rows): each dispatched row travels as one record, the token's
// hidden state quantized per 128-channel group exactly as launch_fp8_quantize does (so the receiving rank's FP8
// grouped GEMM reads it as is, bit for bit what quantizing after the exchange would give). Record layout (bytes):
//   [0, hidden)                      e4m3 codes
//   [hidden, hidden + 4 * groups)    fp32 scales, one per 128-channel group (groups = ceil(hidden / 128))
//   up to ep_fp8_record_bytes        zero padding, so that records are 16-byte aligned
// About half a BF16 row's bytes (hidden 7168: 7392 against 14336). The combine stays BF16.

/// Bytes of one FP8 dispatch record of a `hidden`-wide row (hidden a multiple of 4).
constexpr int64_t ep_fp8_record_bytes(int32_t hidden) {
    return (int64_t(hidden) + 4 * ((int64_t(hidden) + 127) / 128) + 15) / 16 * 16;
}

/// Bytes of one dispatched row: an FP8 record, or `hidden` BF16 values.
constexpr int64_t ep_dispatch_row_bytes(int32_t hidden, bool fp8) {
    return fp8 ? ep_fp8_record_bytes(hidden) : int64_t(hidden) * 2;
}

struct ep_fp8_pack_params {
    const bf16* x = nullptr;         // [*, hidden]: every rows[i] indexes a row of it
    const int32_t* rows = nullptr;   // [num_records]: the row of x record i carries
    const int32_t* slots = nullptr;  // [num_records] or nullptr: record i is skipped when slots[i] >= skip_slot
    uint8_t* records = nullptr;      // [num_records, ep_fp8_record_bytes(hidden)]
    int32_t num_records = 0;
    int32_t hidden = 0;     ///< multiple of 4
    int32_t skip_slot = 0;  ///< with slots: the fixed plan's unused-row slot (slots_per_rank)
};

/// records[i] = the FP8 record of x[rows[i]] (quantized as launch_fp8_quantize, padding zeroed); skipped records
/// (the fixed path's unused rows) are left as they are.
void launch_ep_fp8_pack(const ep_fp8_pack_params& p, cudaStream_t stream);

struct ep_fp8_unpack_params {
    const uint8_t* records = nullptr;    // [num_tokens, ep_fp8_record_bytes(cols)]
    const int32_t* dest_rows = nullptr;  // [num_tokens, top_k]: as fp8_quantize_params::dest_rows
    uint8_t* q = nullptr;                // [rows, cols] e4m3 codes
    float* scales = nullptr;             // [ceil(cols / 128), scale_ld]: as fp8_quantize_params::scales
    int32_t num_tokens = 0;
    int32_t top_k = 1;
    int32_t cols = 0;  ///< multiple of 4
    int32_t scale_ld = 0;
};

/// What launch_fp8_quantize writes for rows already quantized into records: record t's codes to row
/// dest_rows[t, j] of q and its scales to column dest_rows[t, j] of scales, for every j < top_k (bit copies).
void launch_ep_fp8_unpack(const ep_fp8_unpack_params& p, cudaStream_t stream);

/// Peer-to-peer exchange windows (one host, NVLink): every rank owns a window of the same layout, mapped into every
/// other rank's address space; senders write rows straight into the receiver's window, then raise a flag there.
/// Layout of one window (byte offsets, the same on every rank): recv_x [num_ranks * max_capacity, row_bytes] (the
/// dispatched rows: BF16, or FP8 records), recv_slot [num_ranks * max_capacity] int32, y_back [num_ranks *
/// max_capacity, hidden] bf16, flags [2 * num_ranks] uint32 (dispatch flags, then combine flags, one per source
/// rank). Rank s's rows go to rows [s * capacity, (s + 1) * capacity) of every window.
struct ep_p2p_window_layout {
    size_t recv_x = 0, recv_slot = 0, y_back = 0, flags = 0;  ///< byte offsets
    size_t bytes = 0;                                         ///< of the whole window
};
/// The layout for num_ranks source ranks of at most max_capacity rows each (offsets aligned to 256 bytes); fp8:
/// recv_x holds FP8 records (ep_fp8_record_bytes) instead of BF16 rows.
ep_p2p_window_layout ep_p2p_layout(int32_t num_ranks, int32_t max_capacity, int32_t hidden, bool fp8 = false);

struct ep_p2p_params {
    char* windows[kMaxEpRanks] = {};  ///< each rank's window, as this GPU addresses it (its own included)
    ep_p2p_window_layout layout{};
    int32_t rank = 0;  ///< this rank
    int32_t num_ranks = 0;
    int32_t capacity = 0;  ///< rows per source rank this step (<= the layout's max_capacity)
    int32_t slots_per_rank = 0;
    int32_t hidden = 0;         ///< multiple of 8
    int32_t blocks = 0;         ///< grid size (bounds the SMs the copy takes); 0: one block per 8 rows, at most 64
    uint32_t* epoch = nullptr;  ///< [1] this lane's exchange counter (dispatch increments it, combine reads it)
    uint32_t* done = nullptr;   ///< [1] zeroed once; the kernel's block counter (one per lane and direction)
    bool fp8 = false;           ///< the dispatch quantizes each row into an FP8 record (the layout's fp8)
};

/// Dispatch: for every send row i = d * capacity + pos of launch_ep_dispatch_plan's plan, writes slot send_slot[i]
/// to row s * capacity + pos of rank d's recv_slot (s = this rank) and, if the row is used (slot < slots_per_rank),
/// x[send_token[i]] to the same row of d's recv_x (with fp8: its FP8 record, quantized on the way as
/// launch_ep_fp8_pack does); then *epoch += 1 and flag s of d's dispatch flags = *epoch.
void launch_ep_p2p_dispatch(const ep_p2p_params& p, const bf16* x, const int32_t* send_token, const int32_t* send_slot,
                            cudaStream_t stream);
/// Combine: for every used row r = s * capacity + pos of this rank's window (recv_slot[r] < slots_per_rank), writes
/// y[r] to row d * capacity + pos of rank s's y_back (d = this rank); then flag d of s's combine flags = *epoch.
void launch_ep_p2p_combine(const ep_p2p_params& p, const bf16* y, cudaStream_t stream);
/// Waits (on the GPU) until every source rank's dispatch (combine = false) or combine flag in this rank's window has
/// reached *epoch. Traps after about 30 s (a peer that never writes: a dead rank), so a hang becomes an error.
void launch_ep_p2p_wait(const ep_p2p_params& p, bool combine, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Token permutation into expert-contiguous order, and the weighted combine back

/// Upper bound on the rows of the permuted buffer: every expert's group padded to a multiple of row_align.
constexpr int32_t moe_permuted_rows_bound(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t row_align) {
    return num_tokens * top_k + num_experts * (row_align - 1);
}

/// The row alignment the grouped GEMM runs best with at this batch size (16, 32, 64 or 128), from the mean rows per
/// expert num_tokens * top_k / num_experts (known on the host without reading the routing); on Hopper always 64
/// (the wgmma kernel measured fastest at every batch). 8 (the small-group kernel) is never chosen here.
int32_t moe_row_align_for(int32_t num_tokens, int32_t top_k, int32_t num_experts);

/// Scratch bytes launch_moe_permute needs.
size_t moe_permute_workspace_bytes(int32_t num_tokens, int32_t top_k, int32_t num_experts);

struct moe_permute_params {
    const int32_t* topk_ids = nullptr;  // [num_tokens, top_k]; ids in [0, num_experts)
    const bf16* x = nullptr;            // [num_tokens, hidden]; nullptr: plan only
    int32_t* expert_offsets = nullptr;  // [num_experts + 1]: padded first row of each expert; [E] = rows used
    int32_t* dest_rows = nullptr;       // [num_tokens, top_k]: permuted row of each (token, slot)
    int32_t* row_token = nullptr;       // [max_rows]: token in each permuted row, -1 for padding
    bf16* x_permuted = nullptr;         // [max_rows, hidden]: x gathered, zero rows for padding
    void* workspace = nullptr;          // moe_permute_workspace_bytes(num_tokens, top_k, num_experts)
    int32_t num_tokens = 0;
    int32_t top_k = 0;
    int32_t num_experts = 0;  ///< <= 1024
    int32_t hidden = 0;       ///< multiple of 8
    int32_t row_align = 16;   ///< 8, 16, 32 or a multiple of 64
    int32_t max_rows = 0;     ///< moe_permuted_rows_bound(...)
};

/// Exact and deterministic: expert e's group starts at expert_offsets[e] (padded to row_align, empty experts take
/// no rows), and within a group rows follow (token, slot) order.
void launch_moe_permute(const moe_permute_params& p, cudaStream_t stream);

struct moe_combine_params {
    const bf16* y = nullptr;              // [max_rows, hidden]: expert outputs in permuted order
    const int32_t* dest_rows = nullptr;   // [num_tokens, top_k]
    const float* topk_weights = nullptr;  // [num_tokens, top_k]
    bf16* out = nullptr;                  // [num_tokens, hidden]
    int32_t num_tokens = 0;
    int32_t top_k = 0;   ///< 1..64
    int32_t hidden = 0;  ///< multiple of 8
};

/// out[t] = bf16(sum_j topk_weights[t, j] * y[dest_rows[t, j]]), summed in fp32 fused multiply-adds in top-k order.
void launch_moe_combine(const moe_combine_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// The whole routed-expert block of a decode step of a few tokens, in one launch (grid barriers between the phases)

/// Tokens (and tokens x top_k choices) the few-token MoE path takes at most.
constexpr int32_t kMoeDecodeMaxTokens = 8;
constexpr int32_t kMoeDecodeMaxPairs = 64;

/// True when launch_moe_decode takes this shape: num_tokens in [1, kMoeDecodeMaxTokens], num_tokens x top_k <=
/// kMoeDecodeMaxPairs, num_experts <= 512, top_k <= 16, hidden and inter multiples of 8, and x [T, hidden] BF16 +
/// (one token) act [top_k, inter] BF16 + logits [T, num_experts] fp32 within 96 KB of shared memory.
bool moe_decode_supported(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t hidden, int32_t inter);

/// The routed-expert path a batch takes on one GPU with the softmax top-k router: true for launch_moe_decode (where
/// moe_decode_supported), false for the permutation + grouped GEMMs + combine. Chosen on the host from the shape
/// alone; the CUDA executor and bench/kernels/moe_layer_bench both choose by it.
bool moe_use_decode_path(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t hidden, int32_t inter);

/// True when launch_moe_decode takes one token of this shape with ungated shared experts of shared_inter columns
/// (moe_decode_params::shared_inter): moe_decode_supported(1, ...), shared_inter a positive multiple of 8, and x + act
/// [top_k * inter + shared_inter] BF16 + logits within 96 KB of shared memory (DeepSeek-V2-Lite: 27 KB; V3's 7 168 x
/// top-8 x 2 048 + 2 048: 51 KB).
bool moe_decode_shared_supported(int32_t top_k, int32_t num_experts, int32_t hidden, int32_t inter,
                                 int32_t shared_inter);

/// int32 scratch launch_moe_decode needs for num_tokens x top_k choices: its grid barrier's counters and the counter
/// of its gate|up tail. Zero it once before the first launch; every launch leaves it zero again.
size_t moe_decode_scratch_ints(int32_t num_tokens, int32_t top_k);

struct moe_decode_params {
    const bf16* router_w = nullptr;            // [num_experts, hidden] or nullptr: the router_logits are given
    float* router_logits = nullptr;            // [num_tokens, num_experts] fp32: in, or out when router_w is given
    const int32_t* replica_offsets = nullptr;  // [num_experts + 1], as moe_route_params
    const int32_t* replica_slots = nullptr;    // as moe_route_params
    const int32_t* num_valid = nullptr;        // [1] or nullptr (all valid): tokens from *num_valid on are padding
    const bf16* x = nullptr;                   // [num_tokens, hidden]: the normalised hidden states
    const bf16* w_gate_up = nullptr;           // [num_slots, 2 * inter, hidden]: gate rows, then up rows
    const bf16* w_down = nullptr;              // [num_slots, hidden, inter]
    float* topk_weights = nullptr;             // [num_tokens, top_k] out
    int32_t* slot_ids = nullptr;               // [num_tokens, top_k] out: the slot serving each choice
    int32_t* scratch = nullptr;                // moe_decode_scratch_ints(num_tokens, top_k)
    bf16* act = nullptr;                       // [num_tokens * top_k, inter] scratch: SiLU(gate) * up per choice
                                               // (+ shared_inter elements after them with shared experts)
    int32_t* expert_counts = nullptr;          // [num_experts] or nullptr: += the valid choices of each expert
    bf16* out = nullptr;                       // [num_tokens, hidden]
    int32_t num_tokens = 0;
    int32_t top_k = 0;
    int32_t num_experts = 0;
    int32_t hidden = 0;
    int32_t inter = 0;
    bool renormalize = false;
    /// Ungated shared experts (DeepSeek's), one token only (moe_decode_shared_supported): shared_inter == 0 none.
    const bf16* shared_gate_up = nullptr;  // [2 * shared_inter, hidden]: gate rows, then up rows
    const bf16* shared_down = nullptr;     // [hidden, shared_inter]
    int32_t shared_inter = 0;
};

/// What (the router GEMM +) launch_router_topk + launch_moe_route + launch_moe_permute + the two grouped GEMMs +
/// launch_moe_combine compute, for a few tokens, in ONE launch whose phases meet at grid barriers (every block of
/// its grid must be resident at once: nothing that waits on this kernel may hold the multiprocessors meanwhile, and
/// two of these launches must not run concurrently on different streams):
/// (0) with router_w, router_logits = fp32(x . router_w^T), one warp per expert; (1) in every block: softmax top-k
/// per token, replica choice (block 0 writes the weights, slots and load counts), the distinct slots of the step with
/// the tokens that chose each; (2) per distinct slot and FFN column, act = bf16(silu(x . gate) * (x . up)) for every
/// token that chose it, each weight row read once; (3) per hidden row, y = bf16(act . down) per choice, then out[t] =
/// bf16(sum_j weights[t, j] * y[t, j]) in top-k order. A token's result does not depend on the other tokens of the
/// batch. With shared experts (one token): (2) also act_s = bf16(silu(bf16(x . gate_s)) * bf16(x . up_s)) per shared
/// column, after the routed act; (3) out = bf16(bf16(routed sum) + bf16(act_s . down_s)): what launch_gemv_bf16
/// gate|up, launch_silu_mul and launch_gemv_bf16 down with the routed out as its bias compute, bit for bit (the dots
/// in the GEMV's order).
void launch_moe_decode(const moe_decode_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Grouped expert GEMM

/// Which kernel launch_grouped_gemm runs. automatic: by row_align (moe_row_align_for's choice from the mean rows per
/// expert): 8 the small-group kernel (only when a caller asks for 8); a multiple of 64 the wgmma + TMA kernel on
/// compute capability 9.x; else the mma.sync one.
enum class grouped_gemm_impl : int32_t {
    automatic = 0,
    mma_sync = 1,  ///< WMMA / mma.sync with a cp.async pipeline; any CUDA GPU, row_align 16, 32 or a multiple of 64
    wgmma = 2,     ///< sm_90a wgmma + TMA, persistent and warp-specialised; needs compute capability 9.x and
                   ///< row_align % 64 == 0
    small = 3,     ///< few rows per expert: weights on the tensor cores' M side, the expert's rows on N (8-row
                   ///< tiles), streamed through registers; any row_align that is a multiple of 8
};

struct grouped_gemm_params {
    const bf16* a = nullptr;                  // [max_rows, k]: permuted activations; with a_rows: [*, k]
    const int32_t* a_rows = nullptr;          // [max_rows] or nullptr: row r of the product reads row a_rows[r] of a,
                                              // a zero row where it is < 0 (moe_permute's row_token: x need not be
                                              // gathered into a permuted copy first)
    const bf16* b = nullptr;                  // [num_experts, swiglu ? 2 * n : n, k], row-major per expert
    const int32_t* expert_offsets = nullptr;  // [num_experts + 1], from launch_moe_permute
    bf16* c = nullptr;                        // [max_rows, n]
    int32_t max_rows = 0;
    int32_t n = 0;
    int32_t k = 0;  ///< multiple of 8
    int32_t num_experts = 0;
    int32_t row_align = 16;  ///< as given to launch_moe_permute
    bool swiglu = false;
    grouped_gemm_impl impl = grouped_gemm_impl::automatic;
    /// > 0: the persistent (wgmma) kernel's grid stays within this many CTAs, leaving the other SMs to work on other
    /// streams (an expert-parallel exchange in flight); 0: one CTA per SM. The other kernels ignore it.
    int32_t max_ctas = 0;
};

/// For each expert e and row r in [offsets[e], offsets[e+1]): c[r] = a[r] . b[e]^T on the tensor cores (fp32
/// accumulate). With swiglu, b[e] holds gate rows [0, n) then up rows [n, 2n), and c[r, j] = silu(g_j) * u_j.
/// Rows past offsets[num_experts] are not written.
void launch_grouped_gemm(const grouped_gemm_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Block-scaled FP8 (e4m3) experts: activation quantization and the grouped GEMM (docs/fp8.md for the format)

/// Rows of the activation-scale arrays below for a buffer of max_rows rows: max_rows rounded up to a multiple of 4
/// (the GEMM's bulk copies of a tile's scales need 16-byte aligned starts).
constexpr int32_t fp8_scale_ld(int32_t max_rows) { return (max_rows + 3) / 4 * 4; }

struct fp8_quantize_params {
    const bf16* x = nullptr;             // [num_tokens, cols]
    const int32_t* dest_rows = nullptr;  // [num_tokens, top_k] or nullptr: row t of x goes to row t (top_k 1)
    uint8_t* q = nullptr;                // [rows, cols] e4m3 codes; rows of dest_rows (or num_tokens)
    float* scales = nullptr;             // [ceil(cols / 128), scale_ld]: group g of row r at scales[g * scale_ld + r]
    int32_t num_tokens = 0;
    int32_t top_k = 1;
    int32_t cols = 0;      ///< multiple of 4
    int32_t scale_ld = 0;  ///< >= the destination rows
};

/// Per token and 128-channel group g of x (fp32 of the BF16 values): scale = amax / 448 (1 for an all-zero group),
/// code = e4m3(x / scale) rounded to nearest even and saturated (quantize_fp8_activation_row in workers/fp8.hpp, bit
/// for bit); written to row dest_rows[t, j] for every j < top_k (the MoE permutation's destinations: the
/// quantization fused with the gather), or to row t. Rows nothing maps to are not written.
void launch_fp8_quantize(const fp8_quantize_params& p, cudaStream_t stream);

/// The FP8 grouped GEMM's tile shapes (kernels/grouped_gemm_fp8_sm90.cu). automatic: wide once the groups average
/// 128 rows or more (or row_align is a multiple of 128), else narrow.
enum class fp8_gemm_tiles : int32_t {
    automatic = 0,
    narrow = 1,          ///< 64-row tiles of 256 b rows (gate/up: one 128-channel output group), or 128 x 128 (down)
    wide = 2,            ///< 128-row tiles of 256 b rows, each math warpgroup 64 rows x 256 in two 128-column halves
    wide_staggered = 3,  ///< wide, the second math warpgroup starting half a K block after the first
    wide_multicast = 4,  ///< wide in clusters of 2 CTAs on two row tiles of one expert, each loading half of the
                         ///< shared b tile for both (TMA multicast)
    pair = 5,            ///< gate/up: clusters of 2 CTAs on one 128-row tile and one 128-channel output group, each
                         ///< CTA 64 gate + 64 up rows of b (one promotion per K block), the row amax exchanged
                         ///< between the two; down: wide
    pair_multicast = 6,  ///< pair, each CTA loading half of the shared A tile for both (TMA multicast); down: the
                         ///< same clusters, each CTA 128 rows x 128 of the unit's 256 output columns
    wide_rs = 7,         ///< wide, each K block's A read once into registers (ldmatrix) for both halves' wgmmas
                         ///< instead of by every wgmma from shared memory (no a_rows gather)
};

struct grouped_gemm_fp8_params {
    const uint8_t* a = nullptr;               // [max_rows, k] e4m3, expert-contiguous as launch_moe_permute orders it
    const float* a_scales = nullptr;          // [ceil(k / 128), a_scale_ld]: row r's K block kb at [kb * ld + r]
    int32_t a_scale_ld = 0;                   ///< >= max_rows, multiple of 4 (fp8_scale_ld)
    const uint8_t* b = nullptr;               // [num_experts, swiglu ? 2 * n : n, k] e4m3, row-major per expert
    const float* b_scales = nullptr;          // [num_experts, swiglu ? 2 : 1, ceil(n / 128), ceil(k / 128)]: the
                                              // checkpoint's weight_scale_inv per expert (gate's then up's)
    const int32_t* expert_offsets = nullptr;  // [num_experts + 1], from launch_moe_permute
    bf16* c = nullptr;                        // without swiglu: [max_rows, n] BF16
    uint8_t* c_q = nullptr;                   // with swiglu: [max_rows, n] e4m3 ...
    float* c_scales = nullptr;                // ... and [ceil(n / 128), c_scale_ld] scales, as a_scales
    int32_t c_scale_ld = 0;                   ///< >= max_rows
    int32_t max_rows = 0;
    int32_t n = 0;            ///< multiple of 16
    int32_t k = 0;            ///< multiple of 16
    int32_t num_experts = 0;  ///< <= 256
    int32_t row_align = 64;   ///< as given to launch_moe_permute: a multiple of 64
    bool swiglu = false;
    int32_t max_ctas = 0;  ///< as grouped_gemm_params
    fp8_gemm_tiles tiles = fp8_gemm_tiles::automatic;
    /// Non-null (wide tiles only): row r of the A operand is row a_rows[r] of a (a zero row where it is < 0:
    /// moe_permute's row_token), its scales a_scales[kb * a_scale_ld + a_rows[r]]; a holds one row per token.
    const int32_t* a_rows = nullptr;
};

/// The tiles launch_grouped_gemm_fp8 runs p with (p.tiles, or what automatic chooses for p's shape).
fp8_gemm_tiles resolve_fp8_gemm_tiles(const grouped_gemm_fp8_params& p);

/// Whether the gate/up GEMM with these (resolved) tiles can gather A's rows through a_rows: the wide tiles only.
bool fp8_gemm_tiles_gather(fp8_gemm_tiles tiles);

/// True when the current device is compute capability 9.x and p suits the FP8 kernel (its field comments).
bool grouped_gemm_fp8_supported(const grouped_gemm_fp8_params& p);

/// For each expert e and row r in [offsets[e], offsets[e+1]), with kb over the 128-wide K blocks (the last one
/// ragged when k % 128 != 0):
///   acc[r, j] = sum_kb fp32(a_q[r, kb] . b_q[e, j, kb]) * a_scale[kb, r] * b_scale[e, j / 128, kb]
/// (each block's dot exact-ish in fp32 on the tensor cores, the blocks added in fp32 in order: the CPU reference's
/// linear_rows_fp8). Without swiglu c[r, j] = bf16(acc[r, j]). With swiglu (b[e] = gate rows [0, n) then up rows
/// [n, 2n), each with its own scales) act = silu(acc_gate) * acc_up in fp32, quantized per row and 128-column group
/// as launch_fp8_quantize does: c_q and c_scales, the A operand of the down GEMM. Needs sm_90a (Hopper); aborts
/// unless grouped_gemm_fp8_supported(p).
void launch_grouped_gemm_fp8(const grouped_gemm_fp8_params& p, cudaStream_t stream);

/// The FP8 routed experts of launch_moe_experts: weights and the FP8 scratch.
struct moe_fp8_experts {
    const uint8_t* w_gate_up = nullptr;       // [num_slots, 2 * inter, hidden] e4m3: gate rows, then up rows
    const float* w_gate_up_scales = nullptr;  // [num_slots, 2, ceil(inter / 128), ceil(hidden / 128)]
    const uint8_t* w_down = nullptr;          // [num_slots, hidden, inter] e4m3
    const float* w_down_scales = nullptr;     // [num_slots, ceil(hidden / 128), ceil(inter / 128)]
    uint8_t* x_q = nullptr;                   // [max_rows, hidden] scratch: x quantized, in permuted order
    float* x_scales = nullptr;                // [ceil(hidden / 128), fp8_scale_ld(max_rows)] scratch
    uint8_t* act_q = nullptr;                 // [max_rows, inter] scratch: SiLU(gate) * up quantized
    float* act_scales = nullptr;              // [ceil(inter / 128), fp8_scale_ld(max_rows)] scratch
    /// Non-null: x arrives already quantized, as FP8 dispatch records [num_tokens, ep_fp8_record_bytes(hidden)]
    /// (expert parallelism's FP8 dispatch); launch_moe_experts then copies them into x_q / x_scales
    /// (launch_ep_fp8_unpack) instead of quantizing moe_experts_params::x, which is unused.
    const uint8_t* x_records = nullptr;
};

// ---------------------------------------------------------------------------------------------------------
// The routed-expert block of an MoE layer: one launch sequence for the CUDA executor and
// bench/kernels/moe_layer_bench

/// The stages launch_moe_experts / launch_moe_layer enqueue, in the order they enqueue them.
enum class moe_stage : int32_t { router_gemm, router_topk, moe_decode, permute, gemm_gate_up, gemm_down, combine, end };

/// Called on the host before each stage is enqueued and with moe_stage::end after the last (a benchmark records
/// an event there); never called inside a kernel.
using moe_stage_mark = void (*)(void* context, moe_stage stage);

/// Rows of the permuted buffers (row_token, x_permuted, act, y) launch_moe_experts needs for this batch.
int32_t moe_experts_rows(int32_t num_tokens, int32_t top_k, int32_t permute_slots, int32_t row_align);

struct moe_experts_params {
    const int32_t* slots = nullptr;       // [num_tokens, top_k]: the slot serving each choice, < permute_slots
    const bf16* x = nullptr;              // [num_tokens, hidden]
    const float* topk_weights = nullptr;  // [num_tokens, top_k]
    const bf16* w_gate_up = nullptr;      // [num_slots, 2 * inter, hidden]: gate rows, then up rows
    const bf16* w_down = nullptr;         // [num_slots, hidden, inter]
    bf16* out = nullptr;                  // [num_tokens, hidden]
    int32_t* expert_offsets = nullptr;    // [permute_slots + 1] scratch
    int32_t* dest_rows = nullptr;         // [num_tokens, top_k] scratch
    int32_t* row_token = nullptr;         // [max_rows] scratch
    void* permute_workspace = nullptr;    // moe_permute_workspace_bytes(num_tokens, top_k, permute_slots)
    bf16* x_permuted = nullptr;           // [max_rows, hidden] or nullptr: gate|up reads x through row_token
    bf16* act = nullptr;                  // [max_rows, inter] scratch: SiLU(gate) * up per permuted row
    bf16* y = nullptr;                    // [max_rows, hidden] scratch: the down projection per permuted row
    int32_t max_rows = 0;                 ///< rows the scratch above holds, >= moe_experts_rows(...)
    int32_t num_tokens = 0;
    int32_t top_k = 0;
    int32_t num_slots = 0;      ///< expert weight slots (the grouped GEMMs' groups)
    int32_t permute_slots = 0;  ///< groups of the permutation, >= num_slots; 0: num_slots. Rows of slots past
                                ///< num_slots (expert parallelism's unused rows) are grouped last, uncomputed
    int32_t hidden = 0;         ///< multiple of 8
    int32_t inter = 0;          ///< multiple of 8
    int32_t row_align = 0;      ///< 0: moe_row_align_for(num_tokens, top_k, permute_slots)
    grouped_gemm_impl impl = grouped_gemm_impl::automatic;
    int32_t max_ctas = 0;           ///< as grouped_gemm_params: 0 every SM
    moe_stage_mark mark = nullptr;  // or nullptr
    void* mark_context = nullptr;
    fp8_gemm_tiles fp8_tiles = fp8_gemm_tiles::automatic;  ///< the FP8 GEMMs' tiles (with fp8 only)
                                                           /// With fp8 and wide gate/up tiles: x is quantized once per
                                                           /// token and the gate/up GEMM gathers its rows through
    /// row_token (false: quantized into each permuted row, read by TMA). Off by default: on H100 the gather's
    /// cp.async producer slowed gate/up by more than it saved in the quantization (docs/kernels.md).
    bool fp8_gather = false;
    /// Non-null: the experts run in block-scaled FP8 (launch_fp8_quantize fused with the permutation's gather, the
    /// FP8 gate/up GEMM with SiLU * up quantized in its epilogue, the FP8 down GEMM with BF16 out); w_gate_up,
    /// w_down, x_permuted, act and impl are then unused, row_align is a multiple of 64 (0: 64), hidden and inter
    /// multiples of 16. launch_moe_layer's decode path runs the few-token one launch with the router fused
    /// (kernels/moe_decode_one_launch.hpp; !fuse_router: the router, then kernels/moe_decode_fp8.hpp's two launches),
    /// which keep their fp32 act in act_q's memory (max_rows >= 4 x tokens x top_k).
    const moe_fp8_experts* fp8 = nullptr;
};

/// The experts over num_tokens x top_k routed rows of x: launch_moe_permute (plan only, or gathering x into
/// x_permuted when given), launch_grouped_gemm gate|up with SiLU * up, launch_grouped_gemm down, then
/// launch_moe_combine: out[t] = bf16(sum_j topk_weights[t, j] * y[t, j]) in top-k order. num_tokens == 0 is a no-op.
void launch_moe_experts(const moe_experts_params& p, cudaStream_t stream);

/// The routed-expert path launch_moe_layer takes: automatic chooses by moe_use_decode_path and, from two tokens, the
/// few-token one launch's measured range (moe_layer_launch.cpp).
enum class moe_path : int32_t { automatic = 0, decode = 1, grouped = 2 };

struct moe_layer_params {
    /// x, the expert weights, out, the permutation scratch, the shapes (num_slots: one GPU, every slot of
    /// replica_slots is here), row_align, impl and the stage marks; its slots and topk_weights are ignored (the
    /// router's slot_ids and topk_weights below are used). On the decode path act holds num_tokens * top_k rows.
    moe_experts_params experts;
    const bf16* router_w = nullptr;   // [num_experts, hidden]
    float* router_logits = nullptr;   // [num_tokens, num_experts] fp32 scratch
    cublasLtHandle_t blas = nullptr;  // as moe_router_params
    void* blas_workspace = nullptr;   // [blas_workspace_bytes]
    size_t blas_workspace_bytes = 0;
    const int32_t* replica_offsets = nullptr;  // [num_experts + 1], as moe_route_params
    const int32_t* replica_slots = nullptr;    // as moe_route_params
    const int32_t* num_valid = nullptr;        // [1] or nullptr (all valid): tokens from *num_valid on are padding
    int32_t* expert_counts = nullptr;          // [num_experts] or nullptr: += the valid choices of each expert
    int32_t* topk_ids = nullptr;               // [num_tokens, top_k] scratch (logical experts)
    float* topk_weights = nullptr;             // [num_tokens, top_k] out
    int32_t* slot_ids = nullptr;               // [num_tokens, top_k] out
    int32_t* decode_scratch = nullptr;         // moe_decode_scratch_ints(kMoeDecodeMaxTokens, top_k)
    int32_t num_experts = 0;
    bool renormalize = false;
    moe_path path = moe_path::automatic;  ///< decode only where a few-token kernel takes the shape
    bool fuse_router = true;              ///< the decode path computes the router logits itself (else a GEMM first)
    /// Ungated shared experts added to out (shared_inter == 0: none): only where moe_layer_takes_shared, else refused.
    /// experts.act then holds top_k * inter + shared_inter elements.
    const bf16* shared_gate_up = nullptr;  // [2 * shared_inter, hidden]: gate rows, then up rows
    const bf16* shared_down = nullptr;     // [hidden, shared_inter]
    int32_t shared_inter = 0;
};

/// True when launch_moe_layer takes the decode path for p (p.path, moe_use_decode_path, moe_decode_supported).
bool moe_layer_uses_decode_path(const moe_layer_params& p);

/// True when launch_moe_layer can add ungated shared experts of shared_inter columns to p's routed experts in the same
/// launch: p (whatever its shared_* fields) takes the BF16 one-token launch_moe_decode, which takes shared_inter
/// (moe_decode_shared_supported), and experts.act holds top_k * inter + shared_inter elements (max_rows x inter).
bool moe_layer_takes_shared(const moe_layer_params& p, int32_t shared_inter);

/// The routed experts of one MoE layer on one GPU with the softmax top-k router (what the CUDA executor runs per MoE
/// layer and moe_layer_bench times): on the decode path one launch with the router GEMV fused in (BF16: one token
/// launch_moe_decode, from two tokens kernels/moe_decode_one_launch.hpp's; FP8: the latter) unless !fuse_router
/// (launch_moe_router's logits, or with FP8 its top-k, first); else launch_moe_router (the router GEMM, then the
/// softmax top-k with the replica choice), then launch_moe_experts. num_tokens == 0 is a no-op.
void launch_moe_layer(const moe_layer_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// The softmax top-k router of an MoE layer: the router GEMM, then launch_router_topk with the replica choice

/// The router GEMM's kernel (router_gemm_topk.cu says which one automatic takes at which batch size, and why).
enum class moe_router_impl : int32_t {
    automatic = 0,  ///< the one measured fastest for the batch size; cuBLASLt for a shape the chosen one refuses
    gemv = 1,       ///< launch_gemv_bf16 (up to kGemvMaxRows rows; x and router_w 16-byte aligned)
    mma = 2,        ///< router_gemm_topk.cu's mma.sync kernel, the top-k fused into the same launch up to 128 experts
                    ///< (hidden a multiple of 8; x and router_w 16-byte aligned)
    cublaslt = 3,   ///< cuBLASLt, then launch_router_topk (two launches)
};

struct moe_router_params {
    const bf16* x = nullptr;          // [num_tokens, hidden]: the normalised hidden states
    const bf16* router_w = nullptr;   // [num_experts, hidden]
    float* router_logits = nullptr;   // [num_tokens, num_experts] fp32 out
    cublasLtHandle_t blas = nullptr;  // the router GEMM on cuBLASLt (moe_router_impl)
    void* blas_workspace = nullptr;   // [blas_workspace_bytes]
    size_t blas_workspace_bytes = 0;
    // The top-k; topk_weights == nullptr: the logits only (the decode path's router, its top-k its own).
    int32_t* topk_ids = nullptr;               // [num_tokens, top_k] out: logical experts
    float* topk_weights = nullptr;             // [num_tokens, top_k] out
    const int32_t* replica_offsets = nullptr;  // [num_experts + 1] or nullptr (no replica choice), as moe_route_params
    const int32_t* replica_slots = nullptr;    // as moe_route_params
    const int32_t* num_valid = nullptr;        // [1] or nullptr (all valid): tokens from *num_valid on are padding
    int32_t* slot_ids = nullptr;               // [num_tokens, top_k] out with replica_offsets
    int32_t* load_counts = nullptr;            // [num_experts] or nullptr: += the valid choices of each expert
    int32_t num_tokens = 0;
    int32_t num_experts = 0;  ///< <= 512
    int32_t hidden = 0;       ///< multiple of 8
    int32_t top_k = 0;        ///< 1..16, <= num_experts
    bool renormalize = false;
    moe_router_impl impl = moe_router_impl::automatic;  ///< a kernel that does not take the shape: cuBLASLt
    moe_stage_mark mark = nullptr;                      // or nullptr: called with router_gemm and router_topk
    void* mark_context = nullptr;
};

/// router_logits = fp32(x . router_w^T) (BF16 products, fp32 accumulation; the kernel by impl), then, unless
/// topk_weights is nullptr, launch_router_topk over them with the replica choice and load counts fused in (what
/// launch_moe_route would add). The one router of the CUDA executor's softmax MoE layers (launch_moe_layer's and the
/// expert-parallel path's). num_tokens
/// == 0 is a no-op.
void launch_moe_router(const moe_router_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Sampling

// sample_seq_params (one sequence's parameters) is in kernels/sampling.hpp, shared with the CPU reference.

struct sample_params {
    const float* logits = nullptr;            // [num_seqs, vocab_size], raw
    const sample_seq_params* seqs = nullptr;  // [num_seqs]
    int32_t* tokens = nullptr;                // [num_seqs]
    int32_t num_seqs = 0;
    int32_t vocab_size = 0;
    // Logits processing; read only for sequences that has_processing().
    float* processed = nullptr;          // [num_seqs, vocab_size] scratch: the processed rows
    uint32_t* counts = nullptr;          // [num_seqs, vocab_size] scratch: token counts of rows with penalties
    const int32_t* history = nullptr;    // [sum of num_prompt + num_output]
    const int32_t* bias_ids = nullptr;   // [sum of num_bias]
    const float* bias_values = nullptr;  // [sum of num_bias]
    const int32_t* banned = nullptr;     // [sum of num_banned]
    const uint32_t* masks = nullptr;     // [rows, mask_words]: token bitmasks of the rows with mask_row >= 0
    int32_t mask_words = 0;
    // Logprobs; written only for sequences with num_logprobs >= 0.
    float* token_logprobs = nullptr;  // [num_seqs]: raw logprob of the sampled token
    int32_t* top_ids = nullptr;       // [num_seqs, kMaxLogprobs]: the first num_logprobs entries
    float* top_logprobs = nullptr;    // [num_seqs, kMaxLogprobs]
};

/// Per sequence: the processed logits (ref::process_logits: + logit bias, penalties, banned ids -> -inf, tokens its
/// structured-output mask disallows -> -inf) when it
/// has_processing, else the raw row, are sampled: greedy: argmax, lowest index on ties. Otherwise
/// z = logits / temperature; keep z >= the k-th largest (ties kept) when top_k > 0, and z >= max z + log(min_p)
/// when min_p > 0; then keep the smallest set of largest z whose softmax mass reaches top_p; draw by Gumbel-max:
/// argmax over kept i of z_i - log(-log(u_i)), u_i = sample_uniform(seed, counter, i). The same (seed, counter)
/// gives the same token whatever the batch. With num_logprobs = k >= 0, the raw log-softmax of the sampled token
/// and of the k largest raw logits (descending, lower id on ties) are written.
void launch_sample(const sample_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Dense GEMM through cuBLASLt

struct gemm_bf16_params {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;  // [workspace_bytes] device scratch for cuBLASLt
    size_t workspace_bytes = 0;
    const bf16* x = nullptr;  // [m, k]
    const bf16* w = nullptr;  // [n, k]
    void* y = nullptr;        // [m, n]: bf16, or fp32 when y_fp32
    int32_t m = 0;
    int32_t n = 0;
    int32_t k = 0;
    bool y_fp32 = false;
};

/// Row-major y = x . w^T, fp32 accumulate. m == 0 is a no-op.
void launch_gemm_bf16(const gemm_bf16_params& p, cudaStream_t stream);

/// Rows of x the small-M GEMV takes (decode steps of a few sequences); larger m goes to launch_gemm_bf16.
constexpr int32_t kGemvMaxRows = 8;

struct gemv_bf16_params {
    const bf16* x = nullptr;     // [m, k], 16-byte aligned
    const bf16* w = nullptr;     // [n, k], 16-byte aligned
    const bf16* bias = nullptr;  // [n] or nullptr
    void* y = nullptr;           // [m, n]: bf16, or fp32 when y_fp32
    int32_t m = 0;               ///< gemv_bf16_supported
    int32_t n = 0;
    int32_t k = 0;
    bool y_fp32 = false;
};

/// True for 1 <= m <= kGemvMaxRows, k a multiple of 8 and x (m * k BF16) within 64 KB of shared memory.
bool gemv_bf16_supported(int32_t m, int32_t n, int32_t k);

/// Row-major y = x . w^T (+ bias), fp32 accumulate, one pass over w with 16-byte streaming loads (memory bound for
/// the m it takes). A BF16 output's bias is added to the product rounded to BF16 (as launch_gemm_bf16 followed by
/// launch_add_bias rounds). m == 0 is a no-op.
void launch_gemv_bf16(const gemv_bf16_params& p, cudaStream_t stream);

/// Rows of x the skinny tensor-core GEMM takes (decode steps of tens of sequences).
constexpr int32_t kSkinnyGemmMaxRows = 64;

struct skinny_gemm_bf16_params {
    const bf16* x = nullptr;     // [m, k], 16-byte aligned
    const bf16* w = nullptr;     // [n, k], 16-byte aligned
    const bf16* bias = nullptr;  // [n] or nullptr
    void* y = nullptr;           // [m, n]: bf16, or fp32 when y_fp32
    int32_t m = 0;               ///< skinny_gemm_bf16_supported
    int32_t n = 0;
    int32_t k = 0;
    bool y_fp32 = false;
    int32_t splits = 0;  ///< k split over a cluster of this many CTAs (1..8); 0: about three CTAs per SM
};

/// True for 1 <= m <= kSkinnyGemmMaxRows and k a multiple of 8 (any n).
bool skinny_gemm_bf16_supported(int32_t m, int32_t n, int32_t k);

/// Row-major y = x . w^T (+ bias) on tensor cores, fp32 accumulate: 64 rows of w per CTA, k split over a cluster
/// whose partial sums meet in distributed shared memory in rank order (deterministic; the bits depend on the split
/// count, which depends on n, k and the GPU's SM count, not on m). A BF16 output's bias is added to the product
/// rounded to BF16, as launch_gemm_bf16 followed by launch_add_bias rounds. m == 0 is a no-op.
void launch_skinny_gemm_bf16(const skinny_gemm_bf16_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Glue between the model kernels: bias add, SiLU * up for the dense MLPs, row gather, the qwen2_moe shared-expert
// gate, and the unfused q/k norm + clamp of OLMoE's clip_qkv. num_tokens (num_rows) == 0 is a no-op.

struct add_bias_params {
    bf16* y = nullptr;           // [num_tokens, n], in/out
    const bf16* bias = nullptr;  // [n]
    int32_t num_tokens = 0;
    int32_t n = 0;
};

/// y[t, j] = bf16(y[t, j] + bias[j]).
void launch_add_bias(const add_bias_params& p, cudaStream_t stream);

struct silu_mul_params {
    const bf16* gate_up = nullptr;  // [num_tokens, 2 * n]: gate | up
    bf16* out = nullptr;            // [num_tokens, n]
    int32_t num_tokens = 0;
    int32_t n = 0;
};

/// out[t, j] = bf16(silu(gate_up[t, j]) * gate_up[t, n + j]), in fp32.
void launch_silu_mul(const silu_mul_params& p, cudaStream_t stream);

struct gather_rows_params {
    const bf16* in = nullptr;       // [*, hidden]: every rows[i] indexes a row of it
    const int32_t* rows = nullptr;  // [num_rows]
    bf16* out = nullptr;            // [num_rows, hidden]
    int32_t num_rows = 0;
    int32_t hidden = 0;  ///< multiple of 8
};

/// out[i] = in[rows[i]], bit-exact.
void launch_gather_rows(const gather_rows_params& p, cudaStream_t stream);

struct add_gated_params {
    bf16* out = nullptr;                 // [num_tokens, hidden], in/out
    const bf16* shared = nullptr;        // [num_tokens, hidden]: the shared expert's output
    const float* gate_logits = nullptr;  // [num_tokens]: shared_expert_gate(x), fp32; nullptr: ungated
    int32_t num_tokens = 0;
    int32_t hidden = 0;
};

/// out[t] = bf16(out[t] + bf16(sigmoid(gate_logits[t]) * shared[t])) (qwen2_moe's shared expert); without gate
/// logits out[t] = bf16(out[t] + shared[t]) (DeepSeek's shared experts).
void launch_add_gated(const add_gated_params& p, cudaStream_t stream);

struct qk_norm_clip_params {
    bf16* qkv = nullptr;  // [num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim]: q | k | v, in place
    const bf16* q_norm_weight = nullptr;  // per_head: [head_dim]; else [num_q_heads * head_dim]; nullptr: no norm
    const bf16* k_norm_weight = nullptr;  // per_head: [head_dim]; else [num_kv_heads * head_dim]; nullptr: no norm
    int32_t num_tokens = 0;
    int32_t num_q_heads = 0;
    int32_t num_kv_heads = 0;
    int32_t head_dim = 0;
    bool per_head = false;  ///< RMSNorm per head (Qwen3) rather than over the whole q (k) projection (OLMoE)
    float eps = 1e-6f;
    float clip = 0.f;  ///< > 0: clamp q, k and v to [-clip, clip] after the norms; 0: no clamp
};

/// RMSNorm of q and k (both weights given, else none), then q, k and v clamped to [-clip, clip].
void launch_qk_norm_clip(const qk_norm_clip_params& p, cudaStream_t stream);

}  // namespace zmoe::kernels

// ---------------------------------------------------------------------------------------------------------
// Multi-head latent attention (DeepSeek-V2/V3), absorbed form over a paged cache of latents. Per token and layer
// the cache holds one row [kv_lora_rank + rope_dim]: the normalised latent c, then the rotated shared rope key
// k_pe. Per query head h (W_k,h / W_v,h: the head's nope_dim key rows / v_dim value rows of kv_b_proj):
// q_lat = W_k,h^T q_nope (launch_mla_q_absorb), score_j = (q_lat . c_j + q_pe . k_pe_j) * scale, o_lat =
// softmax . c (launch_mla_attention), out_h = W_v,h o_lat (launch_mla_v_up).
//
// mla_rows: the three absorbed-form launches take an optional list `rows` of step tokens; with it they compute only
// the tokens rows[0 .. num_tokens) (every buffer still indexed by step token), so that a step's decodes run here
// while its prefill chunks take the expanded form (launch_mla_gather_latent .. launch_paged_attention); without it,
// tokens 0 .. num_tokens.

namespace zmoe::kernels {

struct mla_rope_kv_params {
    bf16* q = nullptr;                      // [num_tokens, num_heads, nope_dim + rope_dim]: rope parts rotated in place
    const bf16* kv = nullptr;               // [num_tokens, kv_lora_rank + rope_dim]: kv_a_proj_with_mqa's output
    const bf16* kv_norm_weight = nullptr;   // [kv_lora_rank]
    const int32_t* positions = nullptr;     // [num_tokens]
    const int32_t* slot_mapping = nullptr;  // [num_tokens]: block * block_size + offset; < 0 skips the write
    const float* inv_freq = nullptr;        // [rope_dim / 2]
    bf16* cache = nullptr;                  // [num_blocks, block_size, kv_lora_rank + rope_dim]
    int32_t num_tokens = 0;
    int32_t num_heads = 0;
    int32_t nope_dim = 0;
    int32_t rope_dim = 0;      ///< even, <= 128
    int32_t kv_lora_rank = 0;  ///< multiple of 8, <= 1024
    int32_t block_size = 0;
    float attention_factor = 1.f;  ///< cos and sin are multiplied by it (YaRN)
    float eps = 1e-6f;
    bool interleave = true;  ///< rotate pairs (2i, 2i + 1), else (i, i + rope_dim / 2)
};

/// angle_i = position * inv_freq[i] (fp32), cos/sin in double then fp32, times attention_factor. Cache row =
/// [bf16(RMSNorm(kv[:r]) * weight), bf16(rope(kv[r:]))]; every head's q[nope_dim:] rotated in place (BF16).
void launch_mla_rope_kv(const mla_rope_kv_params& p, cudaStream_t stream);

struct mla_absorb_params {
    const bf16* q = nullptr;        // [num_tokens, num_heads, nope_dim + rope_dim]
    const bf16* kv_b = nullptr;     // [num_heads * (nope_dim + v_dim), kv_lora_rank]: per head nope_dim key rows, then
                                    // v_dim value rows
    float* q_lat = nullptr;         // [num_tokens, num_heads, kv_lora_rank]
    const int32_t* rows = nullptr;  // [num_tokens] or nullptr: see mla_rows
    int32_t num_tokens = 0;
    int32_t num_heads = 0;
    int32_t nope_dim = 0;  ///< <= 256
    int32_t rope_dim = 0;
    int32_t v_dim = 0;
    int32_t kv_lora_rank = 0;
};

/// q_lat[t, h, i] = sum_d q[t, h, d] * kv_b[h * (nope_dim + v_dim) + d, i], d ascending, fp32.
void launch_mla_q_absorb(const mla_absorb_params& p, cudaStream_t stream);

struct mla_attention_params {
    const float* q_lat = nullptr;           // [num_tokens, num_heads, kv_lora_rank]
    const bf16* q = nullptr;                // [num_tokens, num_heads, nope_dim + rope_dim]: q_pe at offset nope_dim
    const bf16* cache = nullptr;            // [num_blocks, block_size, kv_lora_rank + rope_dim]
    const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
    const int32_t* query_start = nullptr;   // [num_seqs + 1]
    const int32_t* start_pos = nullptr;     // [num_seqs]
    float* o_lat = nullptr;                 // [num_tokens, num_heads, kv_lora_rank]
    const int32_t* rows = nullptr;          // [num_tokens] or nullptr: see mla_rows
    int32_t num_tokens = 0;                 ///< query_start[num_seqs], or the rows listed
    int32_t num_seqs = 0;
    int32_t num_heads = 0;
    int32_t nope_dim = 0;
    int32_t rope_dim = 0;      ///< multiple of 8
    int32_t kv_lora_rank = 0;  ///< multiple of 8; kv_lora_rank + rope_dim <= 1024
    int32_t block_size = 0;
    int32_t max_blocks_per_seq = 0;
    float scale = 1.f;
};

/// Each query token at position pos = start_pos[s] + (t - query_start[s]) attends causally to the cache rows of
/// positions [0, pos] of its sequence (its own row written already by launch_mla_rope_kv); softmax in fp32.
void launch_mla_attention(const mla_attention_params& p, cudaStream_t stream);

struct mla_v_up_params {
    const float* o_lat = nullptr;   // [num_tokens, num_heads, kv_lora_rank]
    const bf16* kv_b = nullptr;     // as mla_absorb_params::kv_b
    bf16* out = nullptr;            // [num_tokens, num_heads * v_dim]
    const int32_t* rows = nullptr;  // [num_tokens] or nullptr: see mla_rows
    int32_t num_tokens = 0;
    int32_t num_heads = 0;
    int32_t nope_dim = 0;
    int32_t v_dim = 0;
    int32_t kv_lora_rank = 0;  ///< <= 1024
};

/// out[t, h * v_dim + e] = bf16(sum_i o_lat[t, h, i] * kv_b[h * (nope_dim + v_dim) + nope_dim + e, i]).
void launch_mla_v_up(const mla_v_up_params& p, cudaStream_t stream);

// MLA prefill in the expanded (multi-head) form: the latents of every position a prefill chunk sees are gathered
// (launch_mla_gather_latent) and up-projected in one GEMM, kv_up = latent . kv_b^T [rows, heads * (nope + v)]
// (launch_gemm_bf16); launch_mla_build_kv lays out per-head K = [k_nope | k_pe | 0] and V = [v | 0] for
// launch_paged_attention (num_kv_heads = num_heads; head_dim 192 with v_head_dim 128 for DeepSeek's dims, zero
// padding to a supported head dim for others: zeros change neither Q K^T nor P V).

struct mla_gather_latent_params {
    const bf16* cache = nullptr;     // [num_blocks, block_size, kv_lora_rank + rope_dim]
    const int32_t* slots = nullptr;  // [num_rows]: block * block_size + offset; < 0: a zero row
    bf16* latent = nullptr;          // [num_rows, kv_lora_rank]
    int32_t num_rows = 0;
    int32_t kv_lora_rank = 0;  ///< multiple of 8
    int32_t rope_dim = 0;      ///< multiple of 8
};

/// latent[i] = cache row slots[i][:kv_lora_rank] (bit-exact), zeros for slots[i] < 0.
void launch_mla_gather_latent(const mla_gather_latent_params& p, cudaStream_t stream);

struct mla_build_kv_params {
    const bf16* kv_up = nullptr;     // [num_rows, num_heads * (nope_dim + v_dim)]: per head nope_dim, then v_dim
    const bf16* cache = nullptr;     // as mla_gather_latent_params: k_pe at offset kv_lora_rank of each row
    const int32_t* slots = nullptr;  // [num_rows]; < 0: zero k_pe
    bf16* k = nullptr;               // [num_rows, num_heads, k_dim]
    bf16* v = nullptr;               // [num_rows, num_heads, v_out_dim]
    int32_t num_rows = 0;
    int32_t num_heads = 0;
    int32_t nope_dim = 0;
    int32_t rope_dim = 0;
    int32_t v_dim = 0;
    int32_t kv_lora_rank = 0;
    int32_t k_dim = 0;      ///< >= nope_dim + rope_dim
    int32_t v_out_dim = 0;  ///< >= v_dim
};

/// k[i, h] = [kv_up[i, h, :nope_dim] | k_pe of slots[i] | zeros], v[i, h] = [kv_up[i, h, nope_dim:] | zeros]
/// (bit-exact copies).
void launch_mla_build_kv(const mla_build_kv_params& p, cudaStream_t stream);

struct mla_repack_heads_params {
    const bf16* in = nullptr;  // [num_rows, num_heads, in_dim]
    bf16* out = nullptr;       // [num_rows, num_heads, out_dim]
    int32_t num_rows = 0;
    int32_t num_heads = 0;
    int32_t in_dim = 0;
    int32_t out_dim = 0;
};

/// out[i, h, d] = d < in_dim ? in[i, h, d] : 0 for d < out_dim: pads rows of heads with zeros, or truncates them.
void launch_mla_repack_heads(const mla_repack_heads_params& p, cudaStream_t stream);

// MLA decode (one query token per sequence) in the absorbed form on tensor cores: what launch_mla_attention computes
// for such a batch, with the latent cache tiles loaded once per block and shared by 16 query heads (the MMA rows),
// the sequence's keys split over num_splits blocks whose partial outputs a combine pass merges in split order. The
// absorbed query enters the MMAs rounded to BF16 (launch_mla_attention keeps it in fp32), the probabilities too.

/// Most splits of one sequence's keys.
constexpr int32_t kMlaDecodeMaxSplits = 32;

/// True for the latent shapes launch_mla_decode takes: kv_lora_rank 512 and rope_dim 64 (DeepSeek-V2/V3).
bool mla_decode_supported(int32_t kv_lora_rank, int32_t rope_dim);

/// Splits for a batch: about two blocks per multiprocessor in all, 1..kMlaDecodeMaxSplits.
int32_t mla_decode_splits(int32_t num_seqs, int32_t num_heads, int32_t num_sms);

/// fp32 scratch launch_mla_decode needs (0 for one split).
size_t mla_decode_workspace_floats(int32_t num_seqs, int32_t num_heads, int32_t num_splits);

struct mla_decode_params {
    const float* q_lat = nullptr;           // [num_seqs, num_heads, kv_lora_rank]: sequence s's token is row s
    const bf16* q = nullptr;                // [num_seqs, num_heads, nope_dim + rope_dim]: q_pe at offset nope_dim
    const bf16* cache = nullptr;            // [num_blocks, block_size, kv_lora_rank + rope_dim]
    const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
    const int32_t* start_pos = nullptr;     // [num_seqs]: the token's position; it sees positions [0, start_pos]
    float* o_lat = nullptr;                 // [num_seqs, num_heads, kv_lora_rank]
    float* workspace = nullptr;             // mla_decode_workspace_floats(num_seqs, num_heads, num_splits)
    int32_t num_seqs = 0;
    int32_t num_heads = 0;
    int32_t nope_dim = 0;  ///< multiple of 8
    int32_t rope_dim = 0;
    int32_t kv_lora_rank = 0;
    int32_t block_size = 0;
    int32_t max_blocks_per_seq = 0;
    int32_t num_splits = 1;  ///< 1..kMlaDecodeMaxSplits (mla_decode_splits); the bits depend on it
    float scale = 1.f;
};

void launch_mla_decode(const mla_decode_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Group-limited routers (DeepSeek-V2/V3)

enum class router_scoring : int32_t {
    softmax = 0,  ///< DeepSeek-V2: softmax probabilities; a group scores its best expert
    sigmoid = 1,  ///< DeepSeek-V3 noaux_tc: sigmoid; selection on sigmoid + bias, a group scores its top-2 sum
};

struct router_grouped_params {
    const float* logits = nullptr;  // [num_tokens, num_experts]
    const float* bias = nullptr;    // [num_experts]: e_score_correction_bias (sigmoid only; nullptr = 0)
    int32_t* topk_ids = nullptr;    // [num_tokens, top_k]
    float* topk_weights = nullptr;  // [num_tokens, top_k]
    int32_t num_tokens = 0;
    int32_t num_experts = 0;  ///< <= 512, a multiple of n_group
    int32_t top_k = 0;        ///< 1..16, <= topk_group * num_experts / n_group
    int32_t n_group = 1;      ///< <= 32; sigmoid: num_experts / n_group >= 2
    int32_t topk_group = 1;   ///< groups kept, <= n_group
    router_scoring scoring = router_scoring::softmax;
    bool renormalize = false;  ///< softmax: divide by the top-k sum; sigmoid: by (the top-k sum + 1e-20)
    float scaling = 1.f;       ///< routed_scaling_factor, multiplied in last
};

/// Per token: the topk_group groups with the highest group score are kept (lower index first on ties), and the
/// top_k experts among theirs by selection score (softmax: the logits, which order like the probabilities;
/// sigmoid: sigmoid(logit) + bias), descending, lower index first on ties. Weights: the softmax probabilities /
/// the plain sigmoid scores of the chosen experts, renormalised if asked, times scaling. With n_group ==
/// topk_group == 1 the softmax kind is the plain softmax top-k.
void launch_router_grouped(const router_grouped_params& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Block-scaled FP8 (e4m3) dense projections, and activation quantization fused into the kernels producing the
// activations (docs/fp8.md for the format; docs/kernels.md, FP8 dense projections)

struct gemm_fp8_params {
    const uint8_t* a = nullptr;       // [m, k] e4m3 activations (row-major)
    const float* a_scales = nullptr;  // [ceil(k / 128), a_scale_ld]: row r's K block kb at [kb * a_scale_ld + r]
    int32_t a_scale_ld = 0;           // >= m, multiple of 4 (fp8_scale_ld), as launch_fp8_quantize writes it
    const uint8_t* w = nullptr;       // [n, k] e4m3 weights, row-major (the checkpoint layout)
    const float* w_scales = nullptr;  // [ceil(n / 128), ceil(k / 128)] weight_scale_inv
    bf16* c = nullptr;                // [m, n]
    int32_t m = 0, n = 0, k = 0;
};

/// True when the current device runs FP8 mma (compute capability 8.9 or later) and p is well formed: m, n, k >= 0,
/// a_scale_ld >= m and a multiple of 4, every pointer set when m, n and k are positive. Any n and k (ragged: not
/// multiples of 128, nor of 16).
bool gemm_fp8_supported(const gemm_fp8_params& p);

/// c = bf16(acc), the W8A8 linear of the CPU backend (linear_rows_fp8 in workers/cpu_kernels.cpp), with kb over the
/// 128-wide K blocks (the last one ragged when k % 128 != 0):
///   acc[r, j] = sum_kb fp32(a_q[r, kb] . w_q[j, kb]) * (a_scale[kb, r] * w_scale[j / 128, kb])
/// each block's dot on the tensor cores (fp32 accumulation of the exact e4m3 products), promoted into the fp32 sum
/// once per block. m <= kGemmFp8SkinnyMaxRows (decode steps): a skinny kernel streaming the weight rows (k split
/// over a thread-block cluster when n is small); larger m: the grouped FP8 GEMM (launch_grouped_gemm_fp8, one group)
/// where its constraints hold (n, k multiples of 16, 16-byte aligned operands, compute capability 9.x) and its tiles
/// are 16 or more, else the skinny kernel over 64-row slices of a. m, n or k == 0: c is left as is (k == 0:
/// zero-filled). Aborts unless gemm_fp8_supported(p).
void launch_gemm_fp8(const gemm_fp8_params& p, cudaStream_t stream);

/// Rows of a the skinny FP8 kernel takes in one pass (launch_gemm_fp8's small-M path).
constexpr int32_t kGemmFp8SkinnyMaxRows = 64;

struct rms_norm_fp8_params {
    const bf16* x = nullptr;       // [num_tokens, hidden]
    bf16* residual = nullptr;      // [num_tokens, hidden], in/out; nullptr for a plain norm
    const bf16* weight = nullptr;  // [hidden]
    bf16* out = nullptr;           // [num_tokens, hidden] or nullptr: the BF16 norm output, as launch_rms_norm
    uint8_t* q = nullptr;          // [num_tokens, hidden] e4m3 codes
    float* scales = nullptr;       // [ceil(hidden / 128), scale_ld]: group g of token t at scales[g * scale_ld + t]
    int32_t scale_ld = 0;          ///< >= num_tokens
    int32_t num_tokens = 0;
    int32_t hidden = 0;  ///< multiple of 8, at most 16384
    float eps = 1e-6f;
};

/// launch_rms_norm (the same residual update and BF16 output values) followed by launch_fp8_quantize of its BF16
/// output, in one kernel: per token and 128-channel group of o = the BF16 norm output, scale = amax / 448 (1 for
/// an all-zero group) and q = e4m3(o / scale) rounded to nearest even, saturated (quantize_fp8_activation_row, bit
/// for bit). out may be nullptr (only the FP8 operand of the next GEMM is needed).
void launch_rms_norm_fp8(const rms_norm_fp8_params& p, cudaStream_t stream);

struct silu_mul_fp8_params {
    const bf16* gate_up = nullptr;  // [num_tokens, 2 * n]: gate | up
    uint8_t* q = nullptr;           // [num_tokens, n] e4m3 codes of act
    float* scales = nullptr;        // [ceil(n / 128), scale_ld]: group g of token t at scales[g * scale_ld + t]
    int32_t scale_ld = 0;           ///< >= num_tokens
    int32_t num_tokens = 0;
    int32_t n = 0;  ///< multiple of 4
};

/// act[t, j] = silu_f32(gate) * up in fp32 (silu_f32: kernels/silu_f32.hpp, the same bits on host and device), not
/// rounded to BF16, quantized per token and 128-channel group as quantize_fp8_activation_row does (bit for bit):
/// the A operand of a dense MLP's down projection (launch_gemm_fp8).
void launch_silu_mul_fp8(const silu_mul_fp8_params& p, cudaStream_t stream);

}  // namespace zmoe::kernels
