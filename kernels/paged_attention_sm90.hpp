#pragma once
// The Hopper prefill attention (wgmma, kernels/paged_attention_sm90.cu) behind launch_paged_attention.

#include <cuda_runtime_api.h>

#include "kernels/api.hpp"

namespace zmoe::kernels::detail {

/// True when the current device is compute capability 9.x and head_dim is one the wgmma kernel is built for (64,
/// 128).
bool paged_attention_wgmma_supported(int32_t head_dim);

/// The wgmma kernel's schedule: the next tile's Q K^T issued before this tile's softmax (Q in registers), with the
/// K/V copies in three stages and two block barriers a tile (overlap), three stages and one barrier
/// (overlap_one_barrier: tile t + 2's copies issued after the barrier that tile t + 1 has landed), or four stages
/// and one barrier (overlap_deep: copies three tiles ahead); or producer_warp (128-row items only): the overlap
/// schedule in two consumer warpgroups (Q from shared memory) fed by a producer warp through full/empty mbarriers,
/// four stages, no block barrier in the loop.
enum class attention_wgmma_variant { overlap, overlap_one_barrier, overlap_deep, producer_warp };

/// The variant launch_paged_attention_wgmma uses for items of rows_per_item rows (64 or 128).
attention_wgmma_variant default_attention_wgmma_variant(int32_t rows_per_item);

/// launch_paged_attention's contract on the wgmma kernel (the same work items, one warpgroup per item), with the
/// default variant. Aborts unless paged_attention_wgmma_supported(p.head_dim).
void launch_paged_attention_wgmma(const paged_attention_params& p, cudaStream_t stream);

/// The same with variant v forced (tests, benchmark).
void launch_paged_attention_wgmma(const paged_attention_params& p, attention_wgmma_variant v, cudaStream_t stream);

}  // namespace zmoe::kernels::detail
