#pragma once
// The skinny path of launch_gemm_fp8 (kernels/gemm_fp8.cu) with its launch configuration explicit: for
// bench/kernels/gemm_fp8_bench's sweeps; launch_gemm_fp8 uses gemm_fp8_skinny_choice.

#include <cuda_runtime_api.h>

#include "kernels/api.hpp"

namespace zmoe::kernels::detail {

/// CTAs of a cluster that split k at most (the portable cluster size).
constexpr int kGemmFp8MaxSplits = 8;

/// The skinny kernel's tensor-core instruction: e4m3 MMA (m16n8k32), or the e4m3 values converted to f16 (exact)
/// for f16 MMAs (m16n8k16, twice as many).
enum class gemm_fp8_mma : int32_t { automatic = 0, e4m3 = 1, f16 = 2 };

struct gemm_fp8_skinny_config {
    int32_t splits = 0;  ///< CTAs splitting k over a cluster, 1..kGemmFp8MaxSplits (clamped to the K blocks); 0: auto
    int32_t stages = 0;  ///< cp.async ring depth: 4, 6 or 8 (16-byte copies; narrower copies always 4); 0: auto
    int32_t tokens_per_cta = 0;  ///< rows of a per CTA (8, 16, 32 or 64; more rows: slices of the grid); 0: auto
    gemm_fp8_mma mma = gemm_fp8_mma::automatic;
};

/// launch_gemm_fp8's choice for the skinny kernel (measured on H100 by gemm_fp8_bench --sweep): m rounded up to 8,
/// 16, 32 or 64 rows per CTA (64-row slices beyond), about three CTAs per SM (k split when the CTAs are fewer), a
/// ring of 8 stages at 8 rows per CTA with two CTAs per SM or more, else 4; f16 MMAs at 16 and 64 rows per CTA.
gemm_fp8_skinny_config gemm_fp8_skinny_choice(const gemm_fp8_params& p);

/// The skinny kernel at any m (over 64-row slices past 64), as launch_gemm_fp8 computes it, with `config`.
void launch_gemm_fp8_skinny(const gemm_fp8_params& p, const gemm_fp8_skinny_config& config, cudaStream_t stream);

}  // namespace zmoe::kernels::detail
