#pragma once
// A barrier across all blocks of a grid whose blocks are all resident at once (the one-launch decode kernels size
// their grids from the occupancy): the few-token MoE kernels' phases meet here instead of at kernel boundaries.

#include <cuda_runtime.h>

#include <cstdint>

namespace zmoe::kernels::detail {

/// All blocks of the grid meet (every block is resident): one arrival per block, a release add to *counter after
/// the block's threads have met, then acquire loads until the count reaches target (gridDim.x times the barrier's
/// ordinal). Writes before it are visible after it. A block that never arrives (a grid larger than fits) traps
/// instead of hanging.
__device__ __forceinline__ void grid_barrier(uint32_t* counter, uint32_t target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(counter) : "memory");
        uint32_t seen;
        int64_t spins = 0;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
            if (++spins > (int64_t(1) << 24)) __trap();  // a block never arrived: fail loudly instead of hanging
        } while (seen < target);
    }
    __syncthreads();
}

}  // namespace zmoe::kernels::detail
