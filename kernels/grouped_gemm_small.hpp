#pragma once
// The grouped GEMM for few rows per expert (kernels/grouped_gemm_small.cu) behind launch_grouped_gemm: the expert
// weights fill the tensor-core M side and the expert's rows (tokens) the N side ("swap A/B"), so a group of a few
// rows costs one pass over its weights and no padding of the weights' side.

#include <cuda_runtime_api.h>

#include "kernels/api.hpp"

namespace zmoe::kernels::detail {

/// True when p's layout suits the kernel: row_align a multiple of 8 (an expert's 8-row tiles never straddle two
/// experts), n and k multiples of 8, a and b 16-byte aligned.
bool grouped_gemm_small_supported(const grouped_gemm_params& p);

/// launch_grouped_gemm's contract with weights x rows tiles: each warp streams 32 weight rows of one expert (with
/// swiglu 16 gate rows and their 16 up rows) through registers with 16-byte loads, and multiplies them on
/// mma.sync m16n8k16 against 8-row tiles of the expert's rows, up to a few tiles at once (more rows: further passes
/// over the same weights). Aborts unless grouped_gemm_small_supported(p).
void launch_grouped_gemm_small(const grouped_gemm_params& p, cudaStream_t stream);

}  // namespace zmoe::kernels::detail
