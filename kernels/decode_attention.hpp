#pragma once
// launch_decode_attention's variants, declared apart from api.hpp: the pipeline depth and the fused combine, for the
// benchmark's sweep, the tests and the executor's choice.

#include "kernels/api.hpp"

namespace zmoe::kernels {

/// Chunks per thread-block cluster of the fused combine.
constexpr int32_t kDecodeAttentionCluster = 8;

struct decode_attention_variant {
    int32_t stages = 2;  ///< K/V tiles in flight per warp: 2, or 4 at head_dim <= 128
    /// The chunks merged in the chunk pass, no combine launch: clusters of kDecodeAttentionCluster consecutive chunks
    /// merge through distributed shared memory, then the last cluster to arrive merges the clusters' states (counters
    /// in the workspace, which must be zero before the first launch: launches leave them zero). num_splits must be a
    /// multiple of kDecodeAttentionCluster. The bits differ from the unfused launch's (another merge order).
    bool fused = false;
};

/// The K/V tiles in flight per warp launch_decode_attention takes for a shape: 2 or 4 (4 only at head_dim <= 128).
int32_t decode_attention_stages(int32_t head_dim, int32_t num_splits);

/// The bytes at the end of a decode_attention_workspace_bytes workspace that hold the fused combine's counters.
size_t decode_attention_counter_bytes(int32_t num_seqs, int32_t num_q_heads, int32_t num_splits);

/// launch_decode_attention as variant v. The pipeline depth changes when tiles land, not what a warp computes or in
/// which order: the bits do not depend on it.
void launch_decode_attention_variant(const decode_attention_params& p, const decode_attention_variant& v,
                                     cudaStream_t stream);

}  // namespace zmoe::kernels
