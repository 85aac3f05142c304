#pragma once
// The DeepSeek-V2/V3 parts of the CUDA forward pass, called from cuda_step_executor: multi-head latent attention
// over the paged latent cache, the group-limited routers, and the load-time checks of what the kernels support.
//
// MLA per layer (dn / dr / dv: qk_nope / qk_rope / v head dims, r = kv_lora_rank): q = q_b(RMSNorm(q_a(x))) (or
// q_proj(x) without q LoRA) [T, heads, dn + dr]; kv = kv_a_proj_with_mqa(x) [T, r + dr] → launch_mla_rope_kv:
// the cache row [RMSNorm(kv[:r]) | rope(kv[r:])] and rope of every head's q_pe (YaRN's attention factor on cos
// and sin, interleaved or rotate-half) → absorbed attention: q_lat = W_k^T q_nope (fp32), softmax over
// q_lat . c_j + q_pe . k_pe_j with DeepSeek's softmax scale, o_lat = softmax . c (fp32), out = W_v o_lat →
// o_proj. The cache holds (r + dr) BF16 values per token and layer.
//
// Prefill chunks (sequences of two or more query tokens) take the expanded form instead: the latents of every
// position [0, end) of the sequence are up-projected in one GEMM to per-head k_nope and v, K = [k_nope | k_pe] and
// the prefill attention kernel runs it as multi-head attention (head dims 192 / 128 for DeepSeek's, other dims
// zero-padded to one the kernel takes). The expanded K/V live only for the layer, in a scratch of bounded size;
// consecutive prefill sequences share one GEMM and one attention launch while their positions fit it, and a
// sequence longer than the scratch keeps the absorbed form.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/api.hpp"
#include "model/model_config.hpp"
#include "workers/cuda/cuda_gemm.hpp"
#include "workers/cuda/cuda_weights.hpp"
#include "workers/cuda/cuda_workspace.hpp"
#include "workers/cuda/device_buffer.hpp"

namespace zmoe::cuda {

/// Throws zmoe::error(unsupported) naming the config.json field when a DeepSeek configuration is outside what
/// the MLA and router kernels support. Does nothing for other architectures' attention.
void check_deepseek_supported(const model_config& c);

/// Whether `c`'s router runs launch_router_grouped (group-limited kinds, or a routed_scaling_factor != 1) rather
/// than launch_router_topk.
bool uses_grouped_router(const model_config& c);

/// logits [num_tokens, E] (fp32) → topk ids and weights (routed_scaling_factor included) for `c`'s router kind.
void launch_deepseek_router(const model_config& c, const cuda_layer& w, const float* logits, int32_t* topk_ids,
                            float* topk_weights, int32_t num_tokens, cudaStream_t stream);

/// What one MLA attention call reads of the step (device pointers from the executor's workspace).
struct mla_step {
    const int32_t* positions = nullptr;     // [num_tokens]
    const int32_t* kv_slots = nullptr;      // [num_tokens]
    const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
    const int32_t* query_start = nullptr;   // [num_seqs + 1]
    const int32_t* start_pos = nullptr;     // [num_seqs]
    int32_t num_tokens = 0;
    int32_t num_seqs = 0;
    int32_t block_size = 0;
    int32_t max_blocks_per_seq = 0;
};

/// The host copy of a step's layout that mla_attention_runner::prepare plans from.
struct mla_host_step {
    std::span<const int32_t> query_start;   // [num_seqs + 1]
    std::span<const int32_t> start_pos;     // [num_seqs]
    const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
    int32_t block_size = 0;
    int32_t max_blocks_per_seq = 0;
};

/// Default bound on the expanded-prefill scratch (latents, kv_up, K, V of the positions one launch sees).
constexpr int64_t kMlaExpandBudgetBytes = int64_t{1} << 30;

/// The expanded-form plan of one step: which sequences go to the prefill kernel, in which launches.
struct mla_prefill_plan {
    struct group {
        int32_t first_seq = 0, num_seqs = 0;      // consecutive sequences of the step
        int32_t first_token = 0, num_tokens = 0;  // their query tokens (consecutive too)
        int32_t num_rows = 0;                     // expanded positions, each sequence's padded to kExpandBlock
        int32_t num_work_items = 0;
        int32_t table_width = 0;  // blocks per sequence in its expanded block table
        // Offsets (in int32s) into the uploaded plan of: slots [num_rows], tables [num_seqs, table_width],
        // query_start [num_seqs + 1], start_pos [num_seqs], work items [num_work_items, 2].
        size_t slots = 0, tables = 0, query_start = 0, start_pos = 0, work_items = 0;
    };
    std::vector<group> groups;
    std::vector<int32_t> absorbed_tokens;  // the step tokens the absorbed form computes (all, when no group)
    bool all_absorbed = true;              // no group: the absorbed launches take every token, with no list
    size_t absorbed_offset = 0;            // offset of absorbed_tokens in the uploaded plan
    std::vector<int32_t> data;             // the int32s to upload
    int32_t num_tokens = 0;                // of the step planned
    bool decode_only = false;              // one query token per sequence (launch_mla_decode's shape)

    int32_t rows_per_item = kernels::kAttentionRowsPerItem;  // of the groups' work items
};

/// Expanded block granularity: each sequence's expanded rows start at a multiple of it.
constexpr int32_t kMlaExpandBlock = 64;

/// Plans a step (pure host function, testable without a GPU): sequences of >= 2 query tokens whose positions
/// [0, start_pos + n) fit within capacity_rows rows go to the expanded form, packed greedily into groups of
/// consecutive such sequences whose padded positions fit capacity_rows together; every other token (decodes, a
/// one-token chunk, a sequence too long for the scratch, every token when expanded is false) to the absorbed form.
/// Work items of rows_per_item rows (64, or 128 where paged_attention_rows_per_item gives it).
mla_prefill_plan plan_mla_prefill(const mla_host_step& h, int32_t num_heads, int32_t capacity_rows, bool expanded,
                                  int32_t rows_per_item = kernels::kAttentionRowsPerItem);

/// A stream beside the executor's and the events that hop work between the two (event records and waits, so a graph
/// capture of the executor's stream takes the side's work as a parallel branch).
class cuda_side_stream {
  public:
    cuda_side_stream();
    ~cuda_side_stream();
    cuda_side_stream(const cuda_side_stream&) = delete;
    cuda_side_stream& operator=(const cuda_side_stream&) = delete;

    cudaStream_t get() const { return stream_; }
    /// Work enqueued on `to` from now on waits for the work enqueued on `from` so far, through event `i`
    /// (< kEvents; one event per hop of a layer, reused by the next layer's same hop).
    void hop(cudaStream_t from, cudaStream_t to, int i) const;

    static constexpr int kEvents = 3;

  private:
    cudaStream_t stream_ = nullptr;
    cudaEvent_t events_[kEvents] = {};
};

/// MLA attention for every layer of one executor: its scratch buffers (sized once for max_tokens, fixed addresses
/// for the decode graphs) and the RoPE frequencies.
class mla_attention_runner {
  public:
    /// Allocates on the current device; throws zmoe::error(out_of_memory). max_kv_len: the longest sequence;
    /// expand_budget_bytes bounds the expanded-prefill scratch (0: every token in the absorbed form).
    /// Decode steps (one token per sequence, at most max_seqs) run launch_mla_decode where it takes the latent
    /// shape, with BF16 latents between the absorbed projections as batched tensor-core GEMMs (mla_gemm.hpp), unless
    /// tensor_core_decode is false (then launch_mla_q_absorb, launch_mla_attention and launch_mla_v_up in fp32
    /// latents, as every other shape).
    mla_attention_runner(const model_config& c, int32_t max_tokens, int32_t max_seqs, int32_t max_kv_len,
                         int64_t expand_budget_bytes = kMlaExpandBudgetBytes, bool tensor_core_decode = true);

    /// Plans the step (which tokens take which form) and uploads the plan on `stream`; once per step, before the
    /// layers. A step of one token per sequence plans no expanded launch, so the decode graphs capture only the
    /// absorbed form over every token.
    void prepare(const mla_host_step& h, cudaStream_t stream);

    /// One layer: xn [num_tokens, H] (input-normed) → out [num_tokens, H] (o_proj's output); the step's rows are
    /// written into `cache` ([num_blocks, block_size, r + dr]) first. Only launches on `stream` (capturable).
    void run(const cuda_layer& w, const mla_step& s, const kernels::bf16* xn, kernels::bf16* cache, kernels::bf16* out,
             const gemm_context& g, cudaStream_t stream) const;

    /// Device bytes of the scratch buffers.
    int64_t bytes() const { return bytes_; }
    /// Rows (positions) the expanded scratch holds; 0 when the expanded form is off.
    int32_t expand_capacity() const { return expand_rows_; }
    /// The current step's plan.
    const mla_prefill_plan& plan() const { return plan_; }

  private:
    void run_absorbed(const cuda_layer& w, const mla_step& s, const int32_t* rows, int32_t num_rows,
                      const kernels::bf16* q, const kernels::bf16* cache, kernels::bf16* attn,
                      cudaStream_t stream) const;
    /// A decode step on the tensor-core kernel, its RoPE and latent cache write included (`rope`; its q is the
    /// step's q): the absorbed projections around it (streaming kernels at a few tokens, which also take the RoPE and
    /// the split combine; batched GEMMs beyond), BF16 latents.
    /// rope_on_side: the RoPE was launched on side_ (run), joined here after the q absorption.
    void run_decode(const cuda_layer& w, const mla_step& s, const kernels::mla_rope_kv_params& rope,
                    const kernels::bf16* cache, kernels::bf16* attn, const gemm_context& g, cudaStream_t stream,
                    bool rope_on_side = false) const;
    void run_expanded(const cuda_layer& w, const mla_prefill_plan::group& pg, const kernels::bf16* q,
                      const kernels::bf16* cache, kernels::bf16* attn, const gemm_context& g,
                      cudaStream_t stream) const;
    /// K and V of a group through kv_up (one GEMM) and launch_mla_build_kv: head dims the kernel pads.
    void expand_via_kv_up(const cuda_layer& w, const mla_prefill_plan::group& pg, const kernels::bf16* cache,
                          const gemm_context& g, cudaStream_t stream) const;
    /// The prefill attention over a group's expanded K and V (q and the output repacked where padded).
    void run_expanded_attention(const mla_prefill_plan::group& pg, const kernels::bf16* q, kernels::bf16* attn,
                                cudaStream_t stream) const;

    model_config c_;
    device_buffer qa_, q_, kv_, q_lat_, o_lat_, attn_, inv_freq_;
    // Expanded prefill: head dims the prefill kernel runs (k_dim_ >= nope + rope, v_dim_ >= v_head_dim); q_pad_ and
    // out_pad_ only when they differ from the model's.
    int32_t k_dim_ = 0, v_dim_ = 0, expand_rows_ = 0;
    int32_t attn_rows_ = kernels::kAttentionRowsPerItem;  // rows per work item (paged_attention_rows_per_item)
    bool expand_direct_ = false;  // K and V by launch_mla_expand_gemm (no kv_up): the kernel takes the model's dims
    // Tensor-core decode: on when the shape is supported; the split count per batch size needs the SM count.
    bool tc_decode_ = false;
    int32_t num_sms_ = 0;
    device_buffer decode_ws_, q_lat_bf16_, o_lat_bf16_;  // [max_seqs, heads, r] BF16 latents of run_decode
    // Stacked BF16 q / kv_a, decode steps beyond the streaming absorb kernels: kv_a's GEMM and the RoPE
    // run on side_ beside q's GEMM and the q absorption, with their own cuBLASLt workspace.
    std::unique_ptr<cuda_side_stream> side_;
    device_buffer side_blas_ws_;
    device_buffer latent_, kv_up_, k_, v_, q_pad_, out_pad_, plan_dev_;
    pinned_buffer plan_host_;
    mla_prefill_plan plan_;
    int64_t bytes_ = 0;
    int32_t max_tokens_ = 0;  // rows of qa_, q_, kv_, attn_ and of the executor's output buffer
};

}  // namespace zmoe::cuda
