#pragma once
// The CUDA worker's sampling: one encapsulated call in the executor. upload() copies a step's sample_batch (the
// rows' parameters, token histories, logit biases, banned ids) into device buffers before the step's kernels;
// sample() enqueues the sampling kernel alone (no allocation, no host synchronisation: capturable in a CUDA
// graph once the buffers are large enough); results() reads the tokens and logprobs back after the stream is
// synchronised. Buffers grow in upload(), never in sample().

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "messages/step_types.hpp"
#include "workers/cuda/device_buffer.hpp"
#include "workers/sampler.hpp"

namespace zmoe::cuda {

class cuda_sampler {
  public:
    explicit cuda_sampler(int32_t vocab_size) : vocab_(vocab_size) {}

    /// Enqueues on `stream` the copies of `batch` (held until results() is called: the copies are asynchronous).
    void upload(sample_batch batch, cudaStream_t stream);
    /// Enqueues the sampling kernel over logits [rows of the uploaded batch, vocab].
    void sample(const float* logits, cudaStream_t stream);
    /// Enqueues the copies of the results to the host; read them with results() after synchronising `stream`.
    void download(cudaStream_t stream);
    /// Tokens and logprobs of the uploaded rows (request ids as given), valid once `stream` is synchronised.
    std::vector<sampled_token> results(const std::vector<uint64_t>& request_ids) const;

  private:
    template <typename T>
    T* stage(device_buffer& d, const std::vector<T>& host, cudaStream_t stream);

    int32_t vocab_;
    sample_batch batch_;
    device_buffer seqs_, history_, bias_ids_, bias_values_, banned_;
    device_buffer processed_, counts_, tokens_, token_logprobs_, top_ids_, top_logprobs_;
    std::vector<int32_t> h_tokens_, h_top_ids_;
    std::vector<float> h_token_logprobs_, h_top_logprobs_;
};

}  // namespace zmoe::cuda
