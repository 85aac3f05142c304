#pragma once
// The k-split GEMMs' reduction over a thread-block cluster (gemm_fp8.cu, gemm_fp8_sm90.cu, skinny_gemm.cu).

#include <cooperative_groups.h>

namespace zmoe::kernels::detail {

/// partial[at .. at + 4) summed over the shared memory of cluster ranks 0 .. splits - 1 (splits <= kMaxSplits), in
/// rank order, every remote load issued before the first sum: the bits depend on the split alone, not on the rank
/// that sums.
template <int kMaxSplits>
__device__ __forceinline__ float4 cluster_rank_sum4(const cooperative_groups::cluster_group& cluster, float* partial,
                                                    int splits, int at) {
    float4 parts[kMaxSplits];
#pragma unroll
    for (int r = 0; r < kMaxSplits; ++r)
        if (r < splits) parts[r] = *reinterpret_cast<const float4*>(cluster.map_shared_rank(partial, r) + at);
    float4 v = parts[0];
#pragma unroll
    for (int r = 1; r < kMaxSplits; ++r)
        if (r < splits) {
            v.x += parts[r].x;
            v.y += parts[r].y;
            v.z += parts[r].z;
            v.w += parts[r].w;
        }
    return v;
}

}  // namespace zmoe::kernels::detail
