#pragma once
// The Hopper prefill attention (wgmma, kernels/paged_attention_sm90.cu) behind launch_paged_attention.

#include <cuda_runtime_api.h>

#include "kernels/api.hpp"

namespace zmoe::kernels::detail {

/// True when the current device is compute capability 9.x and head_dim is one the wgmma kernel is built for (64,
/// 128).
bool paged_attention_wgmma_supported(int32_t head_dim);

/// The wgmma kernel's schedule within a tile: Q K^T from the query in shared memory (serial_q_smem) or in registers
/// (serial), each tile's products and softmax one after the other (two K/V stages); or overlap: the next tile's
/// Q K^T issued before this tile's softmax (Q in registers, three K/V stages).
enum class attention_wgmma_variant { serial_q_smem, serial, overlap };

/// The variant launch_paged_attention_wgmma uses.
attention_wgmma_variant default_attention_wgmma_variant();

/// launch_paged_attention's contract on the wgmma kernel (the same work items, one warpgroup per item), with the
/// default variant. Aborts unless paged_attention_wgmma_supported(p.head_dim).
void launch_paged_attention_wgmma(const paged_attention_params& p, cudaStream_t stream);

/// The same with variant v forced (tests, benchmark).
void launch_paged_attention_wgmma(const paged_attention_params& p, attention_wgmma_variant v, cudaStream_t stream);

}  // namespace zmoe::kernels::detail
