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
/// the down GEMM (the fastest measured, bench/kernels/NOTES.md), unless the environment sets ZMOE_GG_COOP_GATE_UP /
/// ZMOE_GG_COOP_DOWN (or ZMOE_GG_COOP for both) to k64 (two_buffers), k64all, k64allf or k64allt (a measuring
/// switch).
coop_variant cooperative_variant(bool swiglu);

/// Launches the cooperative wgmma kernel with variant v (launch_grouped_gemm_wgmma with v forced: tests).
void launch_grouped_gemm_wgmma(const grouped_gemm_params& p, coop_variant v, cudaStream_t stream);

/// launch_grouped_gemm's contract on the wgmma kernel: 128-row tiles when row_align % 128 == 0, else 64-row tiles.
/// Aborts unless grouped_gemm_wgmma_supported(p).
void launch_grouped_gemm_wgmma(const grouped_gemm_params& p, cudaStream_t stream);

/// The ping-pong tile height launch_grouped_gemm uses: 64, or 128 when the environment sets
/// ZMOE_GG_PINGPONG_ROWS=128 (a measuring switch while the two shapes are compared).
int pingpong_tile_rows();

/// launch_grouped_gemm's contract on the wgmma kernel with the ping-pong schedule: the two math warpgroups take
/// turns on different output tiles, one's epilogue under the other's wgmmas. tile_rows 64: 64 x 256 tiles (rows of
/// b); 128: 128 x 128 tiles. Aborts unless grouped_gemm_wgmma_supported(p) and tile_rows is 64 or 128.
void launch_grouped_gemm_wgmma_pingpong(const grouped_gemm_params& p, int tile_rows, cudaStream_t stream);

}  // namespace zmoe::kernels::detail
