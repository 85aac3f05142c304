#pragma once
// launch_decode_attention with the pipeline depth named, declared apart from api.hpp: for the benchmark's sweep and
// the tests; the decode step takes launch_decode_attention (the depth decode_attention_stages picks).

#include "kernels/api.hpp"

namespace zmoe::kernels {

/// The K/V tiles in flight per warp launch_decode_attention takes for a shape: 2 or 4 (4 only at head_dim <= 128).
int32_t decode_attention_stages(int32_t head_dim, int32_t num_splits);

/// launch_decode_attention with `stages` K/V tiles in flight per warp (2, or 4 at head_dim <= 128). The depth changes
/// when tiles land, not what a warp computes or in which order: the bits do not depend on it.
void launch_decode_attention_stages(const decode_attention_params& p, int32_t stages, cudaStream_t stream);

}  // namespace zmoe::kernels
