#include "workers/sampler.hpp"

#include "kernels/reference/reference.hpp"

namespace zmoe {

int32_t sample_token(const float* logits, int64_t vocab, const sampling_params& params, uint32_t sample_index) {
    return kernels::ref::sample(logits, static_cast<int32_t>(vocab), params.temperature, params.top_p, params.top_k,
                                params.seed, sample_index);
}

}  // namespace zmoe
