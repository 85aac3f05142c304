#pragma once
// The Hopper path of launch_gemm_fp8 (kernels/gemm_fp8_sm90.cu), behind the build option ZMOE_FP8_SM90_DENSE: a
// wgmma kernel with the weights on the MMA's M side and the tokens on its N side, k split over a thread-block
// cluster. Declared apart for launch_gemm_fp8, the executor's FP8 linears, the tests and bench/kernels/gemm_fp8_bench
// (its launch configuration explicit).

#include <cuda_runtime_api.h>

#include "kernels/api.hpp"

namespace zmoe::kernels::detail {

/// Rows of a the sm_90 kernel takes (launch_gemm_fp8 runs it for m in [1, kGemmFp8Sm90MaxRows] where it is routed).
constexpr int32_t kGemmFp8Sm90MaxRows = 512;

struct gemm_fp8_sm90_config {
    int32_t splits = 0;           ///< CTAs splitting k over a cluster, 1..8 (clamped to the K blocks); 0: auto
    int32_t tokens_per_cta = 0;   ///< rows of a per CTA: 8, 16, 32, 64, 128 (wgmma N) or 256 (two N = 128); 0: auto
    int32_t math_warpgroups = 0;  ///< 1 or 2: 64 or 128 weight rows per CTA; 0: auto
    int32_t overlap = 0;  ///< 1: a K block's wgmmas, then its promotion; 2: the next block's wgmmas in flight; 0: auto
};

/// Whether the sm_90 kernel takes p: compute capability 9.x, 1 <= m <= kGemmFp8Sm90MaxRows, n >= 1, k a positive
/// multiple of 16, a and w 16-byte aligned (their TMA maps), a_scales 16-byte aligned (bulk copies of a tile's
/// activation scales), w_scales 4-byte aligned.
bool gemm_fp8_sm90_applies(const gemm_fp8_params& p);

/// Whether launch_gemm_fp8 runs p on the sm_90 kernel: built with the CMake option ZMOE_FP8_SM90_DENSE (default OFF:
/// the skinny and grouped kernels, until this one is measured on a GPU) and gemm_fp8_sm90_applies(p).
bool gemm_fp8_sm90_routed(const gemm_fp8_params& p);

/// launch_gemm_fp8's configuration for p: the split of k from the shape alone (n, k; never m, so that a row's bits
/// do not depend on the batch): about two 64-row CTAs per SM; tokens_per_cta m rounded up to 8, 16, 32, 64, then 128
/// (more rows: 128-row slices), with two math warpgroups (128 weight rows per CTA) at 128. Neither the tokens per CTA
/// nor the warpgroups change a row's bits (tested).
gemm_fp8_sm90_config gemm_fp8_sm90_choice(const gemm_fp8_params& p);

/// The sm_90 kernel with `config` (zero fields: gemm_fp8_sm90_choice's). Aborts unless gemm_fp8_sm90_applies(p).
void launch_gemm_fp8_sm90(const gemm_fp8_params& p, const gemm_fp8_sm90_config& config, cudaStream_t stream);

}  // namespace zmoe::kernels::detail
