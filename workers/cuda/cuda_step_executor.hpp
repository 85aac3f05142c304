#pragma once
// The CUDA backend of a worker: the whole forward pass of one rank on one GPU with zmoe's kernels (kernels/api.hpp)
// and cuBLASLt, experts spread over the world's GPUs with NCCL (expert parallelism), BF16 weights and KV cache.
//
// Per step: embed → per layer [RMSNorm → QKV GEMM (+bias) → RoPE + q/k norm + paged KV write → paged attention
// (mixed prefill/decode) → O GEMM → RMSNorm(+residual) → router GEMM (fp32 logits) → top-k → dispatch (rows to the
// ranks holding their expert slots) → grouped expert GEMMs → combine (rows back, weighted sum in top-k order)]
// → final norm → LM head on the sampled positions → sampling. The dispatch plan is made on the host from the
// top-k ids (one device→host copy per MoE layer): correctness first, CUDA graphs and overlap later.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/api.hpp"
#include "workers/cuda/cuda_sampler.hpp"
#include "workers/cuda/cuda_weights.hpp"
#include "workers/cuda/device_buffer.hpp"
#include "workers/cuda/nccl_comm.hpp"
#include "workers/expert_placement.hpp"
#include "workers/step_executor.hpp"

namespace zmoe::cuda {

class cuda_step_executor final : public step_executor {
  public:
    /// Picks GPU rank % device count, uploads this rank's weights, joins the NCCL communicator (world_size > 1,
    /// options.collective_id) and allocates the KV cache: options.num_kv_blocks blocks when > 0, else what
    /// options.gpu_memory_utilization of the device leaves after the weights and an activation reserve.
    /// Throws zmoe::error naming the file/tensor for a bad checkpoint, (unsupported) for shapes the kernels lack,
    /// (out_of_memory) when weights or one KV block do not fit.
    cuda_step_executor(const std::string& model_dir, const executor_options& options,
                       const expert_placement& placement);
    ~cuda_step_executor() override;

    /// As model_runner::execute: placeholders take the token this rank sampled for the request last; a malformed
    /// request throws zmoe::error(invalid_argument) after joining the step's collectives with an empty batch.
    step_result execute(const step_request& request, std::vector<std::vector<float>>* logits_out = nullptr) override;
    /// As model_runner::apply_expert_moves, the weights travelling by NCCL into fresh device buffers.
    uint64_t apply_expert_moves(const std::vector<expert_slot_move>& moves) override;
    int64_t num_kv_blocks() const override { return num_kv_blocks_; }
    const model_config& config() const override { return config_; }

    const expert_placement& placement() const { return placement_; }
    int device() const { return device_; }
    /// Device bytes of the weights and of the KV cache.
    int64_t weight_bytes() const { return weights_.bytes; }
    int64_t kv_cache_bytes() const;

  private:
    struct host_batch;
    host_batch prepare(const step_request& request);
    void forward(const host_batch& b, std::vector<uint32_t>& expert_counts);
    void attention(int64_t layer, const host_batch& b);
    void dense_mlp(const cuda_mlp& m, const kernels::bf16* x, int32_t num_tokens, kernels::bf16* out);
    void moe(int64_t layer, int32_t num_tokens, std::vector<uint32_t>& expert_counts);
    void gemm(const void* x, const void* w, void* y, int32_t m, int32_t n, int32_t k, bool y_fp32 = false);

    model_config config_;
    executor_options options_;
    expert_placement placement_;
    int device_ = 0;
    cudaStream_t stream_ = nullptr;
    cublasLtHandle_t blas_ = nullptr;
    device_buffer blas_workspace_;
    std::unique_ptr<nccl_comm> comm_;  // null for a world of one
    cuda_weights weights_;
    int64_t num_kv_blocks_ = 0;
    std::vector<device_buffer> k_cache_, v_cache_;  // per layer [num_blocks, block_size, kv_heads, head_dim]
    std::unordered_map<uint64_t, int32_t> last_sampled_;
    token_history history_;  // fed tokens of the requests with penalties
    std::unique_ptr<cuda_sampler> sampler_;
    int32_t num_work_items_ = 0;  // attention work items of the current step

    // Per-step scratch, grown on demand (see device_buffer::ensure).
    std::map<std::string, device_buffer> scratch_;
    template <typename T>
    T* scratch(const std::string& name, size_t count) {
        device_buffer& b = scratch_[name];
        b.ensure(count * sizeof(T));
        return b.as<T>();
    }
    template <typename T>
    T* upload(const std::string& name, const std::vector<T>& host) {
        T* d = scratch<T>(name, host.size());
        if (!host.empty())
            check(cudaMemcpyAsync(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream_));
        return d;
    }
    static void check(cudaError_t e);
};

}  // namespace zmoe::cuda
