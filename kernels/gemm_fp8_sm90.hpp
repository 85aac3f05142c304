#pragma once
// The Hopper path of launch_gemm_fp8 (kernels/gemm_fp8_sm90.cu) up to kGemmFp8Sm90MaxRoutedRows rows: a wgmma
// kernel with the weights on the MMA's M side and the tokens on its N side, k
// split over a thread-block cluster. Declared apart for launch_gemm_fp8, the executor's FP8 linears, the tests and
// bench/kernels/gemm_fp8_bench (its launch configuration explicit).

#include <cuda_runtime_api.h>

#include "kernels/api.hpp"

namespace zmoe::kernels::detail {

/// Rows of a the sm_90 kernel takes.
constexpr int32_t kGemmFp8Sm90MaxRows = 512;
/// The rows launch_gemm_fp8 gives it on sm_90: 1 to 128 (gemm_fp8_bench, H100, 2026-11-28: from 16 to 128 rows it
/// ran Qwen3-30B-A3B's q/k/v and o projections in 7.0-10.4 and 6.1-9.5 us against 8.4-12.4 and 8.3-17.4 on the
/// skinny and grouped kernels, at one row 6.5 and 5.6 against 7.5 and 7.2; at 256 rows, with the split of k that
/// suits 16-128 rows, it was slower than the grouped kernel). One kernel over the whole range: a row's bits do not
/// change with the decode batch up to 128 rows.
constexpr int32_t kGemmFp8Sm90MaxRoutedRows = 128;

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

/// Whether launch_gemm_fp8 runs p on the sm_90 kernel: gemm_fp8_sm90_applies(p) and m <= kGemmFp8Sm90MaxRoutedRows.
bool gemm_fp8_sm90_routed(const gemm_fp8_params& p);

/// launch_gemm_fp8's configuration for p: the split of k from the shape alone (n, k; never m, so that a row's bits
/// do not depend on the batch): about one 64-row CTA per SM (two ran 1.3-1.8x slower at 16-128 rows); tokens_per_cta m
/// rounded up to 8, 16, 32, 64, then 128 (more rows: 128-row slices), with two math warpgroups (128 weight rows per
/// CTA) at 128. Neither the tokens per CTA nor the warpgroups change a row's bits (tested).
gemm_fp8_sm90_config gemm_fp8_sm90_choice(const gemm_fp8_params& p);

/// The sm_90 kernel with `config` (zero fields: gemm_fp8_sm90_choice's). Aborts unless gemm_fp8_sm90_applies(p).
void launch_gemm_fp8_sm90(const gemm_fp8_params& p, const gemm_fp8_sm90_config& config, cudaStream_t stream);

}  // namespace zmoe::kernels::detail
