#pragma once
// Loads and prefetches for weights that are streamed once (memory-bound GEMVs): past L1, or into L2 ahead of use.

#include <cuda_runtime.h>

#include <cstddef>

namespace zmoe::kernels::detail {

/// A 16-byte load through the non-coherent path that does not allocate in L1 (the data is read once). src must not
/// be written while the kernel runs.
__device__ __forceinline__ uint4 load_stream(const void* src) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(src));
    return v;
}

/// Brings the 128-byte line holding p into L2 with normal priority (moe_decode's down rows prefetched with evict-last
/// priority cost 6% of a batch-one decode step: docs/kernels.md, the one-token kernel).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

/// Prefetches bytes [0, n) from p into L2, the 128-byte lines spread over a warp's lanes. A prefetch into L2, the
/// point of coherence, never returns stale data, so it may precede the wait for an earlier kernel.
__device__ __forceinline__ void prefetch_l2_range(const void* p, size_t n, int lane) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (size_t o = size_t(lane) * 128; o < n; o += 32 * 128) prefetch_l2(c + o);
}

}  // namespace zmoe::kernels::detail
