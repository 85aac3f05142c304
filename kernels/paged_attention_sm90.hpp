#pragma once
// The Hopper prefill attention (wgmma, kernels/paged_attention_sm90.cu) behind launch_paged_attention.

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "kernels/api.hpp"

namespace zmoe::kernels::detail {

/// The checks every paged-attention launch makes (aborts otherwise): num_kv_heads divides num_q_heads, a positive
/// block size, (head_dim, v_head_dim) that paged_attention_dims_supported takes, rows_per_item 64 or 128.
void require_paged_attention_params(const paged_attention_params& p);

/// True when the current device is compute capability 9.x and head_dim is one the wgmma kernel is built for (64,
/// 128).
bool paged_attention_wgmma_supported(int32_t head_dim);

/// launch_paged_attention's contract on the wgmma kernel (the same work items, of p.rows_per_item = 64 or 128 rows:
/// one or two warpgroups per block). Aborts unless paged_attention_wgmma_supported(p.head_dim).
void launch_paged_attention_wgmma(const paged_attention_params& p, cudaStream_t stream);

/// The warp-specialised kernel (producer warp with TMA through the block table, two consumer warpgroups in
/// ping-pong, persistent grid) by variant name: "ws" (what automatic runs: K and V rings of 3 stages each, one query
/// buffer the consumers fill, one m64n128 wgmma per 16 keys for P V, TMA boxes of up to 16 keys), "ws_panels" (P V
/// per 64-column panel), "ws_k3" (3 K stages, 2 V stages, two query buffers the producer fills), "ws_2" (2 stages
/// each, two query buffers), "ws_box128" (TMA boxes of up to 128 keys), "ws_stride" (each CTA takes units blockIdx.x
/// + k gridDim.x instead of walking its rounds back and forth), "ws_tail8" (boxes of up to 128 keys, the keys of an
/// item's last tile past them in 8-key boxes, fewer than 8 by cp.async), "ws_split" (two producer warps, one a ring),
/// "ws_split_tail8" (both). Head dim 64 runs the per-panel P V in each;
/// head dims (192, 128) run one kernel (2 K and 2 V stages, one query buffer, the wide P V) with each variant's box
/// size and walk.
const std::vector<std::string>& paged_attention_ws_variants();

/// True when the current device is compute capability 9.x and the warp-specialised kernel is built for (head_dim,
/// v_head_dim): (64, 0 or 64), (128, 0 or 128), or (192, 128) (MLA's expanded form; 2 K and 2 V stages).
bool paged_attention_ws_dims_supported(int32_t head_dim, int32_t v_head_dim);

/// True when launch_paged_attention_ws takes p: paged_attention_ws_dims_supported(p.head_dim, p.v_head_dim),
/// p.rows_per_item 128, p.block_size a multiple of 8.
bool paged_attention_ws_supported(const paged_attention_params& p);

/// launch_paged_attention's contract on the warp-specialised kernel. Aborts unless paged_attention_ws_supported(p)
/// and variant is one of paged_attention_ws_variants().
void launch_paged_attention_ws(const paged_attention_params& p, const std::string& variant, cudaStream_t stream);

}  // namespace zmoe::kernels::detail
