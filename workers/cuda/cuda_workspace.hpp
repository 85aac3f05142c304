#pragma once
// Every device buffer a CUDA step touches besides the weights and the KV cache, named and sized once at start-up
// from the engine's limits (--max-num-batched-tokens, --max-num-seqs, the longest sequence's block table): no
// allocation and no lookup while serving, and fixed addresses, so that CUDA graphs captured once stay valid.
//
// A step's host-made inputs (tokens, positions, KV slots, block tables, attention work items, sampling rows and
// parameters) are written into a pinned host mirror of one device region and travel in two copies (the small
// fields, then the used rows of the block tables); its outputs (sampled tokens, then the per-expert load counts of
// every MoE layer) come back in one copy from one device region after sampling.

#include <cstddef>
#include <cstdint>

#include "kernels/api.hpp"
#include "workers/cuda/device_buffer.hpp"
#include "workers/sampler.hpp"

namespace zmoe::cuda {

/// The limits and model dimensions the workspace is sized from.
struct workspace_shape {
    int32_t max_tokens = 0;          ///< tokens per step (--max-num-batched-tokens)
    int32_t max_seqs = 0;            ///< sequences per step (--max-num-seqs)
    int32_t max_blocks_per_seq = 0;  ///< block-table row length: the stride of every step's block tables
    int32_t max_kv_len = 0;          ///< keys the longest sequence can have (sizes the decode attention's splits)
    int32_t hidden = 0;
    int32_t num_q_heads = 0;
    int32_t num_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t vocab_size = 0;
    int32_t num_experts = 0;
    int32_t top_k = 0;
    int32_t num_slots = 0;       ///< expert slots per MoE layer on this rank
    int32_t moe_inter = 0;       ///< routed expert FFN width
    int32_t fp8_moe_inter = 0;   ///< FP8 routed experts: their padded FFN width (cuda_layer_fp8::inter_pad); 0: BF16
    int32_t dense_inter = 0;     ///< widest dense MLP or shared expert; 0 if none
    int32_t num_moe_layers = 0;  ///< layers whose load counts are kept
    int32_t world_size = 1;      ///< > 1: room for the expert-parallel exchange
};

/// Pinned host memory (cudaMallocHost), for the step's input and output copies.
class pinned_buffer {
  public:
    pinned_buffer() = default;
    explicit pinned_buffer(size_t bytes);
    ~pinned_buffer();
    pinned_buffer(pinned_buffer&& o) noexcept;
    pinned_buffer& operator=(pinned_buffer&& o) noexcept;
    pinned_buffer(const pinned_buffer&) = delete;
    pinned_buffer& operator=(const pinned_buffer&) = delete;
    template <typename T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }
    size_t bytes() const { return bytes_; }

  private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

/// The side arrays of logits processing (penalty histories, logit biases, banned ids) that a step's
/// kernels::sample_seq_params rows point into. A fixed device region holds what fits its capacities, at addresses
/// that never change (the decode graphs read them); a step beyond them stages into an overflow region that grows as
/// needed, and must run eagerly.
class sample_side_arrays {
  public:
    /// Elements of each array in the fixed region.
    static constexpr size_t kHistory = size_t{1} << 20, kBias = size_t{1} << 16, kBanned = size_t{1} << 14;

    /// Allocates the fixed region (throws zmoe::error(out_of_memory)).
    void allocate();
    /// Writes `batch`'s side arrays into the host staging buffer; returns whether they fit the fixed region.
    bool stage(const sample_batch& batch);
    /// Copies what stage() wrote to the device region it chose (no copy for empty arrays).
    void upload(cudaStream_t stream) const;
    /// The device arrays of the last stage() (the fixed region before any).
    const int32_t* history() const { return ptr<int32_t>(0); }
    const int32_t* bias_ids() const { return ptr<int32_t>(1); }
    const float* bias_values() const { return ptr<float>(2); }
    const int32_t* banned() const { return ptr<int32_t>(3); }
    size_t bytes() const { return fixed_.bytes() + overflow_.bytes(); }

  private:
    template <typename T>
    const T* ptr(int i) const {
        return reinterpret_cast<const T*>((overflowed_ ? overflow_ : fixed_).as<std::byte>() + offsets_[i]);
    }
    device_buffer fixed_, overflow_;
    pinned_buffer host_;
    bool overflowed_ = false;
    size_t offsets_[5] = {};  ///< byte offsets of history, bias ids, bias values, banned; then the end
    size_t used_[4] = {};     ///< bytes staged per array
};

/// A typed view of part of a device region and of its host mirror.
template <typename T>
struct mirrored {
    T* device = nullptr;
    T* host = nullptr;
};

/// A ZMOE_DECODE_ATTENTION_SPLITS value: a split count in [1, kDecodeAttentionMaxSplits]; null or empty: 0 (the
/// shape's choice). Anything else throws errc::invalid_argument naming the value (refused, not ignored).
int32_t parse_attention_splits(const char* value);

struct cuda_workspace {
    workspace_shape shape;
    int32_t max_work_items = 0;  ///< attention work items one step can need
    int32_t max_moe_rows = 0;    ///< rows of the permuted expert buffers
    int32_t max_recv_rows = 0;   ///< rows this rank's experts can receive in one exchange
    int32_t attn_slots = 0;      ///< decode attention blocks the device holds at once (0: shape not supported)
    /// A fixed decode attention split count for every batch size, from ZMOE_DECODE_ATTENTION_SPLITS (a measurement
    /// knob: the step's time at another split than decode_attention_splits picks); 0: the shape's choice.
    int32_t attn_splits_fixed = 0;

    // Step inputs: [small fields | block tables] in `inputs`, mirrored in `inputs_host`.
    device_buffer inputs;
    pinned_buffer inputs_host;
    size_t small_inputs_bytes = 0;                  ///< bytes of the first copy
    mirrored<kernels::sample_seq_params> sampling;  // [max_seqs]
    mirrored<int32_t> tokens, positions, kv_slots;  // [max_tokens]
    mirrored<int32_t> query_start;                  // [max_seqs + 1]
    mirrored<int32_t> start_pos;                    // [max_seqs]
    mirrored<int32_t> logit_rows;                   // [max_seqs]: the token row each sampled sequence reads
    mirrored<int32_t> work_items;                   // [max_work_items * 2]
    mirrored<int32_t> num_valid;                    // [1]: real tokens (the rest of a graph's batch is padding)
    mirrored<int32_t> block_tables;                 // [max_seqs, max_blocks_per_seq], last

    // Step outputs: [sampled | expert counts] in `outputs`, mirrored in `outputs_host`.
    device_buffer outputs;
    pinned_buffer outputs_host;
    mirrored<int32_t> sampled;        // [max_seqs]
    mirrored<int32_t> expert_counts;  // [num_moe_layers, num_experts]: this step's routed choices per expert
    mirrored<float> token_logprobs;   // [max_seqs]: the sampled token's raw logprob (rows that ask)
    mirrored<int32_t> top_ids;        // [max_seqs, kMaxLogprobs]
    mirrored<float> top_logprobs;     // [max_seqs, kMaxLogprobs]

    // Activations.
    device_buffer residual, xn, delta;  // [max_tokens, hidden]
    device_buffer qkv;                  // [max_tokens, (q + 2 kv heads) * head_dim]
    device_buffer q, attn;              // [max_tokens, q heads * head_dim]
    device_buffer attn_partial;         // decode attention's per-chunk states: the most any batch size's split needs
    device_buffer mlp_gate_up;          // [max_tokens, 2 * dense_inter]
    device_buffer mlp_act;              // [max_tokens, dense_inter]
    device_buffer shared_out;           // [max_tokens, hidden]
    device_buffer shared_gate;          // [max_tokens] fp32

    // Routing and the rank-local expert computation.
    device_buffer router_logits;       // [max_tokens, num_experts] fp32
    device_buffer topk_ids;            // [max_tokens, top_k]
    device_buffer topk_weights;        // [max_tokens, top_k] fp32
    device_buffer slot_ids;            // [max_tokens, top_k]: the slot serving each choice
    device_buffer replica_offsets;     // [num_moe_layers, num_experts + 1]
    device_buffer replica_slots;       // [num_moe_layers, num_slots * world_size]
    device_buffer perm_offsets;        // [num_slots + 2] (expert parallelism: + the unused-row slot)
    device_buffer perm_dest;           // [max(max_tokens * top_k, max_recv_rows)]
    device_buffer perm_row_token;      // [max_moe_rows]
    device_buffer perm_y;              // [max_moe_rows, hidden]
    device_buffer perm_act;            // [max_moe_rows, moe_inter]
    device_buffer perm_workspace;      // launch_moe_permute's scratch
    device_buffer combine_ones;        // [max_recv_rows] fp32 ones (expert parallelism: the un-permute weights)
    device_buffer moe_decode_scratch;  // launch_moe_decode's scratch (steps of at most kMoeDecodeMaxTokens tokens)

    // FP8 routed experts only (moe_fp8_experts' scratch; ld = kernels::fp8_scale_ld(max_moe_rows)).
    device_buffer fp8_x_q;         // [max_moe_rows, hidden] e4m3
    device_buffer fp8_x_scales;    // [ceil(hidden / 128), ld]
    device_buffer fp8_act_q;       // [max_moe_rows, fp8_moe_inter] e4m3 (the few-token path: its fp32 act)
    device_buffer fp8_act_scales;  // [ceil(fp8_moe_inter / 128), ld]

    // Expert parallelism (world_size > 1): rows sent to / received from the other ranks.
    device_buffer moe_plan;        // [3 * max_tokens * top_k]
    device_buffer send_x, y_back;  // [max_tokens * top_k, hidden]
    device_buffer recv_x, y_recv;  // [max_recv_rows, hidden]
    device_buffer recv_slot;       // [max_recv_rows]

    // LM head and sampling.
    device_buffer last_rows;  // [max_seqs, hidden]
    device_buffer logits;     // [max_seqs, vocab_size] fp32
    device_buffer processed;  // [max_seqs, vocab_size] fp32: launch_sample's processed rows
    device_buffer counts;     // [max_seqs, vocab_size] u32: launch_sample's token counts (penalties)
    sample_side_arrays sample_side;

    /// Stages the step's sampled rows: sampling.host[0, batch.seqs.size()) and the side arrays. Returns false when
    /// the side arrays exceed the fixed region: the step must then not replay a decode graph.
    bool stage_samples(const sample_batch& batch);
    /// launch_sample's arguments for the first num_seqs rows of `logits` (the staged rows and side arrays, the
    /// scratch and logprob outputs of this workspace).
    kernels::sample_params sample_args(int32_t num_seqs) const;
    /// The logprobs launch_sample wrote for sampled row `row` (num_logprobs of sampling.host[row] >= 0), read from
    /// the host mirror after the outputs' copy back.
    zmoe::token_logprobs logprobs_of(int32_t row) const;

    /// Allocates everything for `shape` on the current device; throws zmoe::error(out_of_memory).
    explicit cuda_workspace(const workspace_shape& shape);
    cuda_workspace() = default;
    cuda_workspace(cuda_workspace&&) = default;
    cuda_workspace& operator=(cuda_workspace&&) = default;

    /// The decode attention's split count for a batch of num_seqs sequences (kernels::decode_attention_splits):
    /// one definition for the eager steps and the graphs.
    int32_t attn_splits(int32_t num_seqs) const;

    /// Device bytes held.
    int64_t bytes() const { return bytes_; }

  private:
    int64_t bytes_ = 0;
};

}  // namespace zmoe::cuda
