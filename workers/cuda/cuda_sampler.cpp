#include "workers/cuda/cuda_sampler.hpp"

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::cuda {

template <typename T>
T* cuda_sampler::stage(device_buffer& d, const std::vector<T>& host, cudaStream_t stream) {
    d.ensure(std::max<size_t>(host.size(), 1) * sizeof(T));
    if (!host.empty())
        ZMOE_CUDA_CHECK(cudaMemcpyAsync(d.as<T>(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice,
                                        stream));
    return d.as<T>();
}

void cuda_sampler::upload(sample_batch batch, cudaStream_t stream) {
    batch_ = std::move(batch);
    const size_t rows = batch_.seqs.size();
    stage(seqs_, batch_.seqs, stream);
    stage(history_, batch_.history, stream);
    stage(bias_ids_, batch_.bias_ids, stream);
    stage(bias_values_, batch_.bias_values, stream);
    stage(banned_, batch_.banned, stream);
    const size_t cells = std::max<size_t>(rows, 1) * static_cast<size_t>(vocab_);
    const bool processing = std::any_of(batch_.seqs.begin(), batch_.seqs.end(), kernels::has_processing);
    if (processing) {
        processed_.ensure(cells * sizeof(float));
        counts_.ensure(cells * sizeof(uint32_t));
    } else {
        processed_.ensure(sizeof(float));
        counts_.ensure(sizeof(uint32_t));
    }
    tokens_.ensure(std::max<size_t>(rows, 1) * sizeof(int32_t));
    token_logprobs_.ensure(std::max<size_t>(rows, 1) * sizeof(float));
    top_ids_.ensure(std::max<size_t>(rows, 1) * kernels::kMaxLogprobs * sizeof(int32_t));
    top_logprobs_.ensure(std::max<size_t>(rows, 1) * kernels::kMaxLogprobs * sizeof(float));
}

void cuda_sampler::sample(const float* logits, cudaStream_t stream) {
    if (batch_.seqs.empty()) return;
    kernels::launch_sample({.logits = logits,
                            .seqs = seqs_.as<kernels::sample_seq_params>(),
                            .tokens = tokens_.as<int32_t>(),
                            .num_seqs = static_cast<int32_t>(batch_.seqs.size()),
                            .vocab_size = vocab_,
                            .processed = processed_.as<float>(),
                            .counts = counts_.as<uint32_t>(),
                            .history = history_.as<int32_t>(),
                            .bias_ids = bias_ids_.as<int32_t>(),
                            .bias_values = bias_values_.as<float>(),
                            .banned = banned_.as<int32_t>(),
                            .token_logprobs = token_logprobs_.as<float>(),
                            .top_ids = top_ids_.as<int32_t>(),
                            .top_logprobs = top_logprobs_.as<float>()},
                           stream);
}

void cuda_sampler::download(cudaStream_t stream) {
    const size_t rows = batch_.seqs.size();
    h_tokens_.resize(rows);
    if (rows == 0) return;
    ZMOE_CUDA_CHECK(cudaMemcpyAsync(h_tokens_.data(), tokens_.as<int32_t>(), rows * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream));
    if (!batch_.any_logprobs) return;
    h_token_logprobs_.resize(rows);
    h_top_ids_.resize(rows * kernels::kMaxLogprobs);
    h_top_logprobs_.resize(rows * kernels::kMaxLogprobs);
    ZMOE_CUDA_CHECK(cudaMemcpyAsync(h_token_logprobs_.data(), token_logprobs_.as<float>(), rows * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream));
    ZMOE_CUDA_CHECK(cudaMemcpyAsync(h_top_ids_.data(), top_ids_.as<int32_t>(), h_top_ids_.size() * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream));
    ZMOE_CUDA_CHECK(cudaMemcpyAsync(h_top_logprobs_.data(), top_logprobs_.as<float>(),
                                    h_top_logprobs_.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
}

std::vector<sampled_token> cuda_sampler::results(const std::vector<uint64_t>& request_ids) const {
    std::vector<sampled_token> out(batch_.seqs.size());
    for (size_t r = 0; r < out.size(); ++r) {
        out[r].request_id = request_ids.at(r);
        out[r].token_id = h_tokens_.at(r);
        const int32_t k = std::min({batch_.seqs[r].num_logprobs, kernels::kMaxLogprobs, vocab_});
        if (batch_.seqs[r].num_logprobs < 0) continue;
        token_logprobs lp;
        lp.logprob = h_token_logprobs_.at(r);
        const size_t at = r * kernels::kMaxLogprobs;
        lp.top_ids.assign(h_top_ids_.begin() + at, h_top_ids_.begin() + at + k);
        lp.top_logprobs.assign(h_top_logprobs_.begin() + at, h_top_logprobs_.begin() + at + k);
        out[r].logprobs = std::move(lp);
    }
    return out;
}

}  // namespace zmoe::cuda
