#pragma once
// Programmatic dependent launch (Hopper): a kernel launched with launch_pdl may start while the kernel before it on
// the stream is still running (its launch and the ramp of its first loads overlap that kernel's tail; inside a CUDA
// graph the edge becomes a programmatic one). Such a kernel must call pdl_wait() before it reads anything an earlier
// kernel writes or writes anything one reads, and on every path, early returns included; only work that depends on
// nothing earlier (prefetching weights) goes before it. pdl_launch_dependents() lets the next PDL-launched kernel
// start; that kernel's pdl_wait() still waits for the whole of this one and sees its writes.

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda_check.hpp"

namespace zmoe::kernels::detail {

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::); }

/// launch_pdl in thread-block clusters of cluster_x CTAs along x (grid.x a multiple of it; 0: no clusters).
template <typename... Params, typename... Args>
void launch_pdl_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, unsigned cluster_x,
                          cudaStream_t stream, Args&&... args) {
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attributes[2]{};
    attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[0].val.programmaticStreamSerializationAllowed = 1;
    attributes[1].id = cudaLaunchAttributeClusterDimension;
    attributes[1].val.clusterDim.x = cluster_x;
    attributes[1].val.clusterDim.y = 1;
    attributes[1].val.clusterDim.z = 1;
    config.attrs = attributes;
    config.numAttrs = cluster_x > 0 ? 2 : 1;
    ZMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

/// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialisation allowed.
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
    launch_pdl_clustered(kernel, grid, block, smem, 0, stream, std::forward<Args>(args)...);
}

}  // namespace zmoe::kernels::detail
