#pragma once
// What a CPU worker runs each step: resolve placeholders, check the request, run the forward pass over the
// paged KV cache, sample, and report tokens and per-expert counts.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "messages/expert_placement.hpp"
#include "messages/step_types.hpp"
#include "messages/worker_protocol.hpp"
#include "model/model_config.hpp"
#include "workers/cpu_model.hpp"
#include "workers/expert_comm.hpp"
#include "workers/grammar_masks.hpp"
#include "workers/kv_cache.hpp"
#include "workers/model_weights.hpp"
#include "workers/sampler.hpp"
#include "workers/step_executor.hpp"
#include "workers/thread_pool.hpp"

namespace zmoe {

struct runner_options {
    int64_t num_kv_blocks = 256;
    int64_t block_size = 16;
    int rank = 0;
    int world_size = 1;
    /// The expert-parallel collective; null means a local_expert_comm (world_size must be 1). Not owned.
    expert_comm* comm = nullptr;
    /// Expert placement; null means expert_placement::initial over world_size ranks without redundant slots. Copied.
    const expert_placement* placement = nullptr;
    /// Threads of the CPU kernels; 0 = all cores.
    int num_threads = 0;
    /// "auto": the checkpoint's weights; "dummy": generated from config.json (dummy_checkpoint).
    std::string load_format = "auto";
    /// tokenizer.json (or its directory) of structured outputs' grammars; empty: the model directory.
    std::string grammar_tokenizer;
    double dummy_router_skew = 0;  ///< with "dummy": hot experts (dummy_checkpoint)
    /// `--quantization`: "" = the checkpoint's own format; "fp8": quantize at load
    /// (model_config::apply_quantization_flag).
    std::string quantization;
    /// Round the activations to BF16 where the CUDA executor stores them in BF16 (activation_rounding in
    /// workers/cpu_kernels.hpp): the CUDA path's arithmetic on the CPU, what the CUDA FP8 tests compare with.
    /// Off (fp32 activations) in serving: the CPU backend is the fp32 reference.
    bool bf16_activations = false;
};

class model_runner final : public step_executor {
  public:
    /// Loads config and weights from `model_dir` (throws zmoe::error naming the file/tensor/field at fault) and
    /// allocates the KV cache.
    model_runner(const std::string& model_dir, const runner_options& options);
    /// The same with config.json already parsed (a worker reads it once).
    model_runner(const model_config& config, const std::string& model_dir, const runner_options& options);

    /// Runs one step. Throws zmoe::error(invalid_argument) for a malformed request (token out of the vocabulary,
    /// block table too short or out of range, unknown placeholder, duplicate request, bad sampling params) —
    /// after still joining the step's expert exchanges with an empty batch, so the other ranks do not hang.
    /// logits_out, if given, receives the last-position logits of every do_sample sequence in step order.
    step_result execute(const step_request& request, std::vector<std::vector<float>>* logits_out = nullptr) override;

    /// Stages an EPLB rebalance, a collective: every rank calls it with the same moves (each a physical slot, global
    /// index, that receives logical expert `logical_expert`'s weights from (src_rank, src_slot)) at the same point
    /// of its steps. The weights travel through the runner's expert_comm now, into owned staging buffers; steps keep
    /// the current placement until switch_expert_moves.
    void stage_expert_moves(const std::vector<expert_slot_move>& moves) override;
    /// Swaps the staged weights in; afterwards tokens route by the new placement.
    expert_move_stats switch_expert_moves() override;
    const model_config& config() const override { return config_; }
    const expert_placement& placement() const { return placement_; }
    int64_t num_kv_blocks() const override { return cache_.num_blocks(); }
    int64_t block_size() const { return cache_.block_size(); }

  private:
    forward_batch prepare(const step_request& request, sample_batch& samples, std::vector<uint64_t>& sample_ids);

    model_config config_;
    runner_options options_;
    expert_placement placement_;
    std::unique_ptr<expert_comm> own_comm_;
    expert_comm* comm_;
    model_weights weights_;
    thread_pool pool_;
    kv_cache cache_;
    cpu_model model_;
    std::unordered_map<uint64_t, int32_t> last_sampled_;  // request id -> token sampled for it last
    token_history history_;                               // fed tokens of the requests with penalties
    grammar_masks masks_;                                 // structured outputs: matchers and token masks
    std::map<std::pair<int64_t, int64_t>, std::unique_ptr<std::byte[]>> moved_experts_;  // (layer, slot) -> weights
    struct staged_expert {
        uint32_t layer;
        int64_t local_slot;
        std::unique_ptr<std::byte[]> bytes;
        mlp_weights view;
    };
    std::optional<std::vector<expert_slot_move>> staged_moves_;  // a staged rebalance, until its switch
    std::vector<staged_expert> staged_experts_;
    expert_move_stats staged_stats_;
};

/// How many KV blocks of `block_size` fit in `budget_bytes` for `config` (fp32 K and V, all layers; MLA: the
/// latent and rope key).
int64_t kv_blocks_for_budget(const model_config& config, int64_t block_size, int64_t budget_bytes);

}  // namespace zmoe
