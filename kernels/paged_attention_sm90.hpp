#pragma once
// The Hopper prefill attention (wgmma, kernels/paged_attention_sm90.cu) behind launch_paged_attention.

#include <cuda_runtime_api.h>

#include "kernels/api.hpp"

namespace zmoe::kernels::detail {

/// True when the current device is compute capability 9.x and head_dim is one the wgmma kernel is built for (64,
/// 128).
bool paged_attention_wgmma_supported(int32_t head_dim);

/// launch_paged_attention's contract on the wgmma kernel (the same work items, of p.rows_per_item = 64 or 128 rows:
/// one or two warpgroups per block). Aborts unless paged_attention_wgmma_supported(p.head_dim).
void launch_paged_attention_wgmma(const paged_attention_params& p, cudaStream_t stream);

}  // namespace zmoe::kernels::detail
