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
    /// merge through distributed shared memory, then the last cluster to arrive merges the clusters' states (arrival
    /// counters of the module, per device: fused launches on one device must not overlap in time, as one stream's
    /// never do). Only where decode_attention_fusable. The bits differ from the unfused launch's (another merge
    /// order) but not from run to run.
    bool fused = false;
};

/// The K/V tiles in flight per warp launch_decode_attention takes for a shape: 2 or 4 (4 only at head_dim <= 128).
int32_t decode_attention_stages(int32_t head_dim, int32_t num_splits);

/// True when a launch of this shape may take the fused combine: num_splits a positive multiple of
/// kDecodeAttentionCluster and at most 512 (sequence, KV head) pairs.
bool decode_attention_fusable(int32_t num_seqs, int32_t num_kv_heads, int32_t num_splits);

/// launch_decode_attention as variant v. The pipeline depth changes when tiles land, not what a warp computes or in
/// which order: the bits do not depend on it.
void launch_decode_attention_variant(const decode_attention_params& p, const decode_attention_variant& v,
                                     cudaStream_t stream);

}  // namespace zmoe::kernels
