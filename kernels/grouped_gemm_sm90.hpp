#pragma once
// The Hopper grouped GEMM (wgmma + TMA, kernels/grouped_gemm_sm90.cu) behind launch_grouped_gemm.

#include <cuda_runtime_api.h>

#include "kernels/api.hpp"

namespace zmoe::kernels::detail {

/// The most experts the wgmma kernel's tile schedule (in shared memory) has room for.
constexpr int32_t kMaxWgmmaExperts = 256;

/// True when the current device is compute capability 9.x (Hopper: wgmma and TMA).
bool device_has_wgmma();

/// True when the current device is compute capability 9.x and p's layout suits the kernel (row_align a multiple
/// of 64, n and k multiples of 8, at most kMaxWgmmaExperts experts, a, b and c 16-byte aligned as TMA needs).
bool grouped_gemm_wgmma_supported(const grouped_gemm_params& p);

/// The cooperative kernel's epilogue: two output buffers per math warpgroup reused box after box (two barriers per
/// box), or one per output box (all of a tile's boxes written between two barriers); SiLU in the gate/up epilogue
/// with IEEE division (`g / (1 + e^-g)`), the approximate division, or tanh.approx.
enum class coop_variant { two_buffers, all_boxes, all_boxes_fast_div, all_boxes_tanh };

/// The variant launch_grouped_gemm_wgmma uses: all_boxes_tanh for the gate/up (swiglu) GEMM and two_buffers for
/// the down GEMM (the fastest measured: docs/kernels.md). The other variants stay reachable through the overload
/// below, for the tests.
coop_variant cooperative_variant(bool swiglu);

/// Launches the cooperative wgmma kernel with variant v (launch_grouped_gemm_wgmma with v forced: tests).
void launch_grouped_gemm_wgmma(const grouped_gemm_params& p, coop_variant v, cudaStream_t stream);

/// launch_grouped_gemm's contract on the wgmma kernel: 128-row tiles when row_align % 128 == 0, else 64-row tiles.
/// Aborts unless grouped_gemm_wgmma_supported(p).
void launch_grouped_gemm_wgmma(const grouped_gemm_params& p, cudaStream_t stream);

}  // namespace zmoe::kernels::detail
