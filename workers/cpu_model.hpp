#pragma once
// The forward pass of every supported architecture on the CPU, fp32, for one rank's flattened batch.

#include <cstdint>
#include <memory>
#include <vector>

#include "messages/expert_placement.hpp"
#include "workers/comm_stream.hpp"
#include "workers/cpu_kernels.hpp"
#include "workers/expert_comm.hpp"
#include "workers/kv_cache.hpp"
#include "workers/model_weights.hpp"
#include "workers/paged_attention.hpp"
#include "workers/thread_pool.hpp"

namespace zmoe {

/// One step's tokens on this rank, flattened in sequence order.
struct forward_batch {
    std::vector<int32_t> tokens;      ///< [num_rows], resolved (no placeholders), each in [0, vocab)
    std::vector<int64_t> positions;   ///< [num_rows]
    std::vector<attention_seq> seqs;  ///< rows of each sequence, with its block table
    std::vector<int64_t> logit_rows;  ///< rows whose next-token logits are wanted
    /// Dual-batch overlap: the first row of micro-batch B (workers/micro_batch.hpp), or -1 to run one batch. Every
    /// rank of a step must agree on whether it is -1 (the exchanges are collectives).
    int64_t micro_batch_split = -1;
};

class cpu_model {
  public:
    /// All references must outlive the model. `rounding`: fp32 activations (the reference) or BF16 where the CUDA
    /// executor stores BF16.
    cpu_model(const model_weights& weights, const expert_placement& placement, expert_comm& comm, thread_pool& pool,
              activation_rounding rounding = {});

    /// Runs `batch` through the model, storing its K/V in `cache`. logits: resized to [logit_rows, vocab].
    /// expert_counts: [num_moe_layers * num_experts], incremented for this rank's routed tokens. With an empty
    /// batch it still joins every MoE layer's exchanges. With batch.micro_batch_split >= 0 each MoE layer runs as two
    /// micro-batches whose exchanges overlap the other's compute, giving the same logits bitwise.
    void forward(const forward_batch& batch, kv_cache& cache, std::vector<float>& logits,
                 std::vector<uint32_t>& expert_counts);

  private:
    void attention(int64_t layer, const forward_batch& batch, kv_cache& cache, const float* x, float* out);

    const model_weights& weights_;
    const model_config& config_;
    const expert_placement& placement_;
    expert_comm& comm_;
    thread_pool& pool_;
    activation_rounding round_;
    std::unique_ptr<comm_stream> stream_;     // created by the first dual-batch step
    std::vector<float> rope_inv_freq_;        // MLA: model_config::rope_inv_freq()
    std::vector<float> rope_cos_, rope_sin_;  // [num_rows, rotated dims / 2] of the current batch
};

}  // namespace zmoe
