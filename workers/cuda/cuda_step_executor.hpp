#pragma once
// The CUDA backend of a worker: the whole forward pass of one rank on one GPU with zmoe's kernels (kernels/api.hpp)
// and cuBLASLt, experts spread over the world's GPUs with NCCL (expert parallelism), BF16 weights and KV cache.
//
// Per step: embed → per layer [RMSNorm → QKV GEMM (+bias) → RoPE + q/k norm + paged KV write → attention (decode
// steps: launch_decode_attention, split over the KV; others: launch_paged_attention, mixed prefill/decode) → O GEMM
// → RMSNorm(+residual) → router GEMM (fp32 logits) → top-k with the replica choice and load counts fused in
// (DeepSeek's routers: launch_moe_route after) → permute by slot → grouped expert GEMMs → weighted combine; dense
// GEMMs of at most kGemvMaxRows rows run launch_gemv_bf16, larger ones cuBLASLt; steps of at most 8 tokens: router GEMM
// → launch_moe_decode (routing, GEMVs and the combine in three launches)] → final norm → LM head on the sampled
// positions → sampling. One GPU: the whole step is enqueued without a host round trip (one
// copy of the step's inputs in, one copy of the sampled tokens and load counts out), into a fixed workspace
// (cuda_workspace), and pure decode steps replay a CUDA graph captured at start-up for the next bucketed batch
// size (padding rows are computed and dropped). Expert parallelism (world_size > 1): the dispatch and combine live in
// cuda_ep_exchange; this rank's experts run over the rows it received. Every step starts with the ranks agreeing
// (one small all-reduce) on its mode: all decode → every rank replays the graph of the same bucket (fixed-capacity
// exchange, counts on the device); otherwise eager, fixed-capacity when the step fits the fixed buffers, else the
// exact host-planned exchange. A step whose fixed window overflowed on some rank is redone on the exact path by all.
// Dual-batch overlap (step_request::dual_batch): each MoE layer's rows run as two micro-batches, one's transfers on
// a communication stream while the other's experts compute.
// Block-scaled FP8 models (docs/fp8.md; an FP8 checkpoint or --quantization fp8): the FP8 linears run W8A8 through
// fp8_linear_runner (cuda_fp8_linear.hpp) and the routed experts through moe_experts_params::fp8 (decode steps of a
// few tokens: the FP8 few-token kernels); routers, LM head, embeddings, norms and MLA's kv_b stay BF16, so do the
// KV cache and the activations between the linears. Expert parallelism exchanges BF16 rows and quantizes them on
// the receiving rank.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/api.hpp"
#include "messages/expert_placement.hpp"
#include "workers/cuda/cuda_deepseek.hpp"
#include "workers/cuda/cuda_ep_exchange.hpp"
#include "workers/cuda/cuda_expert_moves.hpp"
#include "workers/cuda/cuda_fp8_linear.hpp"
#include "workers/cuda/cuda_weights.hpp"
#include "workers/cuda/cuda_workspace.hpp"
#include "workers/cuda/device_buffer.hpp"
#include "workers/cuda/nccl_comm.hpp"
#include "workers/grammar_masks.hpp"
#include "workers/step_executor.hpp"

namespace zmoe::cuda {

class cuda_step_executor final : public step_executor {
  public:
    /// Picks GPU rank % device count, uploads this rank's weights (or, with options.config.load_format "dummy",
    /// generates them on the device), joins the NCCL communicator (world_size > 1, options.collective_id), allocates
    /// the workspace for options.config.max_num_batched_tokens / max_num_seqs and the KV cache:
    /// options.config.num_kv_blocks blocks when > 0, else what options.config.gpu_memory_utilization of the device
    /// leaves; then (not enforce_eager) captures the decode graphs (a collective with expert parallelism). Throws
    /// zmoe::error naming the file/tensor for a bad checkpoint, (unsupported) for shapes the kernels lack,
    /// (out_of_memory) when weights, workspace or one KV block do not fit.
    cuda_step_executor(const executor_options& options, const expert_placement& placement);
    ~cuda_step_executor() override;

    /// As model_runner::execute: placeholders take the token this rank sampled for the request last; a malformed
    /// request (or one beyond the workspace's limits) throws zmoe::error(invalid_argument) after joining the
    /// step's collectives with an empty batch.
    step_result execute(const step_request& request, std::vector<std::vector<float>>* logits_out = nullptr) override;
    /// As model_runner's: the weights travel into staging beside the steps (cuda_expert_mover, by NCCL between
    /// ranks); the switch installs them with the slots keeping their device addresses (the graphs stay valid), and
    /// the device replica tables follow the new placement.
    void stage_expert_moves(const std::vector<expert_slot_move>& moves) override;
    expert_move_stats switch_expert_moves() override;
    int64_t num_kv_blocks() const override { return num_kv_blocks_; }
    const model_config& config() const override { return config_; }

    const expert_placement& placement() const { return placement_; }
    int device() const { return device_; }
    /// Device bytes of the weights, of the KV cache and of the workspace.
    int64_t weight_bytes() const { return weights_.bytes; }
    int64_t kv_cache_bytes() const;
    int64_t workspace_bytes() const { return ws_.bytes(); }
    /// Batch sizes with a captured decode graph, ascending (empty: every step eager), and the capture time.
    std::vector<int32_t> graph_batch_sizes() const;
    double graph_capture_ms() const { return graph_capture_ms_; }
    /// Steps served by a graph replay so far.
    int64_t graph_replays() const { return graph_replays_; }
    /// Expert parallelism: steps run as two micro-batches (dual-batch overlap), and steps redone on the exact
    /// exchange because some rank's fixed window overflowed.
    int64_t dual_batch_steps() const { return dual_batch_steps_; }
    int64_t ep_overflow_steps() const { return ep_overflow_steps_; }
    /// Expert parallelism: whether the fixed exchange writes peer to peer (else NCCL send/recv).
    bool ep_peer_to_peer() const { return ep_ && ep_->peer_to_peer(); }

    /// What the group-limited router (DeepSeek's, uses_grouped_router) saw and chose at one MoE layer of one step.
    struct router_trace_entry {
        int64_t moe_layer = 0;      ///< index among the MoE layers
        int32_t num_tokens = 0;     ///< the step's rows, in step order
        std::vector<float> input;   ///< [num_tokens, hidden]: the router's input (post-attention RMSNorm), BF16 widened
        std::vector<float> logits;  ///< [num_tokens, experts]: its fp32 logits
        std::vector<int32_t> topk_ids;  ///< [num_tokens, top_k]: the experts the router kernel chose
    };
    /// A diagnostic for tests: while set, every step runs eagerly (one GPU: no decode graph replay) and appends one
    /// entry per MoE layer routed by the group-limited router (a copy to the host, synchronising the stream, after the
    /// router kernel); the softmax top-k routers and graph replays under expert parallelism record nothing. nullptr
    /// stops the tracing.
    void set_router_trace(std::vector<router_trace_entry>* trace) { router_trace_ = trace; }

  private:
    /// What the host knows of a staged step: every launch's sizes.
    struct step_shape {
        int32_t num_tokens = 0;
        int32_t num_seqs = 0;
        int32_t num_work_items = 0;
        int32_t num_sampled = 0;
        bool one_token_each = true;     ///< every sequence has exactly one query token (a decode step)
        bool samples_fit_graph = true;  ///< the sampling side arrays fit the workspace's fixed region
    };
    struct decode_graph {
        int32_t batch = 0;
        cudaGraphExec_t exec = nullptr;
    };
    /// How this step's MoE layers exchange (expert parallelism); every rank runs a step with the same mode.
    struct ep_step_mode {
        bool dual = false;             ///< two micro-batches (dual-batch overlap)
        int32_t split = 0;             ///< dual: this rank's first row of micro-batch B
        int32_t capacity[2] = {0, 0};  ///< each micro-batch's fixed window per rank; 0: the exact path
        bool fixed() const { return capacity[0] > 0 && (!dual || capacity[1] > 0); }
    };
    /// The rows and sequences one pass over a layer covers: the whole step, or one micro-batch of a dual-batch step
    /// (rows [first, first + num_tokens); a micro-batch may take the head or the tail of a sequence that the split
    /// cuts). Its sequences' arrays on the device; query_start in rows of the whole step.
    struct batch_view {
        int32_t first = 0;
        int32_t num_tokens = 0;
        int32_t num_seqs = 0;
        int32_t num_work_items = 0;
        bool one_token_each = true;
        const int32_t* query_start = nullptr;   // [num_seqs + 1]
        const int32_t* start_pos = nullptr;     // [num_seqs]
        const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
        const int32_t* work_items = nullptr;    // [num_work_items, 2]
        const int32_t* num_valid = nullptr;     // [1]: the view's real rows (the rest of a graph's batch is padding)
    };
    /// The element-wise maximum over the ranks of what decides a step's mode.
    struct ep_agreement {
        bool all_decode = false;  ///< every rank's step is a pure decode (or empty)
        bool dual = false;
        int32_t max_seqs = 0;
        int32_t max_tokens = 0;
        int32_t max_lane_tokens[2] = {0, 0};
    };

    step_shape stage(const step_request& request, const std::vector<std::vector<int32_t>>& tokens);
    void pad_decode(step_shape& s, int32_t batch);
    void finish_staging(step_shape& s, int32_t num_valid);
    void upload_inputs(const step_shape& s);
    void forward(const step_shape& s);
    batch_view whole_view(const step_shape& s) const;
    /// The layer up to its MLP over the view's rows: input RMSNorm (+ the last MLP output into the residual),
    /// attention, post-attention RMSNorm into xn.
    void layer_attention(int64_t layer, const batch_view& v);
    /// Whether layer w's attention input projections are FP8: then its input norm quantizes xn in the same kernel
    /// (fp8_linear_runner::rms_norm) and the projections start from those codes.
    bool fp8_normed_input(const cuda_layer& w) const;
    void attention(int64_t layer, const batch_view& v);
    /// out = the MLP `m` (BF16) or `f` (FP8, when not empty) of x's num_tokens rows; out_rows: rows of out the call
    /// may overwrite (writable_rows). add (BF16 and one token only; not aliasing out): a row added to the down
    /// projection's BF16-rounded output, as add_shared adds.
    void dense_mlp(const cuda_mlp& m, const cuda_fp8_mlp& f, const kernels::bf16* x, int32_t num_tokens,
                   kernels::bf16* out, int32_t out_rows, const kernels::bf16* add = nullptr);
    /// Rows of a [max_tokens, *] workspace buffer from the view's first row that its GEMMs may overwrite: up to the
    /// end of the buffer for the whole step, only the view's own rows for a micro-batch (the other one's follow).
    int32_t writable_rows(const batch_view& v) const;
    void moe(int64_t layer, const batch_view& v);
    /// Router GEMM and top-k (with the replica choice) over the view's rows: topk_weights and slot_ids.
    void route(const cuda_layer& w, const batch_view& v);
    /// Appends the router's input, logits and choices of rows [first, first + num_tokens) to router_trace_ (not
    /// while capturing a graph).
    void trace_router(const cuda_layer& w, int64_t first, int32_t num_tokens);
    /// The shared expert over the view's rows into shared_out (+ its gate logits); add_shared adds it to delta.
    void shared_expert(const cuda_layer& w, const batch_view& v);
    void add_shared(const cuda_layer& w, const batch_view& v);
    /// The routed experts of the step's rows on one GPU, combined into out.
    void moe_local(const cuda_layer& w, int32_t num_tokens, kernels::bf16* out);
    void moe_expert_parallel(const cuda_layer& w, int32_t num_tokens);
    // Expert parallelism (cuda_step_executor_ep.cpp).
    ep_agreement ep_agree(const step_shape& s, bool decode, bool dual, int32_t split);
    ep_step_mode ep_graph_mode(int32_t batch, bool dual) const;
    ep_step_mode ep_eager_mode(const ep_agreement& a, int32_t split) const;
    /// max_ctas as run_experts' (an exchange in flight beside them).
    void ep_experts(const cuda_layer& w, int lane, int32_t max_ctas = 0);
    /// The expert GEMMs' grid while an exchange is in flight: the SMs minus executor_options::ep_comm_sms (0, no
    /// bound, when that is 0).
    int32_t ep_overlap_gemm_ctas();
    /// Micro-batch mb's rows [first, first + count) of xn to the ranks of their slots (lane mb, transfers on comm).
    void ep_dispatch(const cuda_layer& w, int mb, int32_t first, int32_t count, cudaStream_t comm);
    ep_combine_params ep_combine_of(int mb, int32_t first, int32_t count) const;
    /// Dual-batch overlap on the fixed exchange (cuda_step_executor_ep.cpp): the two micro-batches' views for the
    /// step just staged (A: rows [0, split), B: the rest), their sequence arrays uploaded on stream_.
    void stage_dual_batch(const step_shape& s, int32_t split, int32_t num_valid);
    /// Whether the step being enqueued runs its layers as two interleaved micro-batches (forward_dual_batch).
    bool dual_batch_layers() const;
    /// Every layer as two micro-batches on the compute stream, each one's exchange on the communication stream
    /// while the other computes: A's attention, A's dispatch | B's attention, B's dispatch | A's experts | A's
    /// combine | B's experts | B's combine | A's next layer, ...
    void forward_dual_batch();
    /// The experts of this rank over num_tokens x top_k routed rows of x (slots [num_tokens, top_k] on the device):
    /// permute by slot, grouped GEMM gate|up with SiLU·up, grouped GEMM down, then
    /// out[t] = sum_j weights[t, j] * y[t, j] in top-k order. permute_slots > w.num_slots (expert parallelism's
    /// fixed exchange: slot w.num_slots marks its unused rows) groups those rows past every expert, uncomputed.
    /// max_ctas > 0 bounds the persistent grouped GEMM's grid (SMs left to an exchange in flight).
    void run_experts(const cuda_layer& w, const int32_t* slots, const kernels::bf16* x, int32_t num_tokens,
                     int32_t top_k, const float* weights, kernels::bf16* out, int32_t permute_slots = 0,
                     int32_t max_ctas = 0);
    /// launch_moe_experts' params for this layer's experts over num_tokens x top_k rows of x into out, on the
    /// workspace's permutation buffers (slots and weights left for the caller).
    kernels::moe_experts_params expert_params(const cuda_layer& w, const kernels::bf16* x, int32_t num_tokens,
                                              int32_t top_k, kernels::bf16* out) const;
    /// The sampling call site: sampled[i] from logits row i with sampling[i], i < s.num_sampled. Launched after the
    /// forward pass (graph or eager), once the step's structured-output masks, computed on the host meanwhile, are
    /// uploaded.
    void sample(const step_shape& s);
    /// y[m, n] = x[m, k] . w[n, k]^T (+ bias[n], BF16 outputs only): launch_gemv_bf16 for a few rows,
    /// launch_skinny_gemm_bf16 for up to 16 rows of at most 4 096 outputs, else cuBLASLt.
    void gemm(const void* x, const void* w, void* y, int32_t m, int32_t n, int32_t k, bool y_fp32 = false,
              const void* bias = nullptr);
    void upload_replica_tables();
    void capture_decode_graphs();
    const decode_graph* graph_for(int32_t num_seqs, bool dual = false) const;

    model_config config_;
    executor_options options_;
    expert_placement placement_;
    int device_ = 0;
    cudaStream_t stream_ = nullptr;
    cublasLtHandle_t blas_ = nullptr;
    device_buffer blas_workspace_;
    std::unique_ptr<nccl_comm> comm_;  // null for a world of one
    cuda_weights weights_;
    cuda_workspace ws_;
    std::unique_ptr<cuda_ep_exchange> ep_;      // the MoE dispatch/combine over comm_; null for a world of one
    std::unique_ptr<cuda_expert_mover> mover_;  // EPLB moves (cuda_expert_moves.hpp); made with --enable-eplb
    int64_t num_kv_blocks_ = 0;
    std::vector<device_buffer> k_cache_, v_cache_;  // per layer [num_blocks, block_size, kv_heads, head_dim]; MLA:
                                                    // k_cache_ [num_blocks, block_size, r + dr], v_cache_ empty
    std::unique_ptr<mla_attention_runner> mla_;     // DeepSeek (cuda_deepseek.hpp); null otherwise
    std::unordered_map<uint64_t, int32_t> last_sampled_;
    token_history history_;                 // fed tokens of the requests with penalties
    std::vector<decode_graph> graphs_;      // ascending batch
    std::vector<decode_graph> dbo_graphs_;  // expert parallelism: the same batches as two micro-batches
    cudaStream_t comm_stream_ = nullptr;    // expert parallelism: the dual-batch exchanges
    ep_step_mode ep_mode_;                  // of the step being enqueued or captured
    // Dual-batch overlap: the micro-batches' views, their sequence arrays ([num_valid A, B | query_start A, B |
    // start_pos A, B | work items A, B], mirrored), and the persistent expert GEMMs' grid while an exchange is in
    // flight when executor_options::ep_comm_sms keeps SMs for the exchange kernels.
    batch_view dbo_views_[2];
    device_buffer dbo_side_;
    pinned_buffer dbo_side_host_;
    int32_t dbo_gemm_ctas_ = 0;
    int64_t dual_batch_steps_ = 0;
    int64_t ep_overflow_steps_ = 0;
    double graph_capture_ms_ = 0;
    int64_t graph_replays_ = 0;
    grammar_masks masks_;         // structured outputs: matchers and token masks
    device_buffer masks_device_;  // [sampled rows, mask words] uint32: the step's token masks
    // FP8 models: the dense projections' scratch (empty for BF16) and, per MoE layer, its FP8 experts with the
    // workspace scratch (launch_moe_experts' moe_experts_params::fp8).
    fp8_linear_runner fp8_;
    std::vector<kernels::moe_fp8_experts> fp8_moe_;
    std::vector<router_trace_entry>* router_trace_ = nullptr;  // set_router_trace
    static void check(cudaError_t e);
};

/// The decode batch sizes graphs are captured for: 1, 2, 4, 8, then steps of 8 up to 64, of 16 up to 256 and of
/// 32 beyond, always ending with max_num_seqs.
std::vector<int32_t> decode_graph_batch_sizes(int32_t max_num_seqs);

}  // namespace zmoe::cuda
