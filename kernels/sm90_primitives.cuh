#pragma once
// Hopper (sm_90) building blocks shared by the wgmma + TMA kernels (kernels/grouped_gemm_sm90.cu, BF16, and
// kernels/grouped_gemm_fp8_sm90.cu, FP8): mbarriers, TMA loads and stores, cp.async, wgmma fences and waits, the
// 128-byte-swizzle matrix descriptor, the device-built expert tile schedule, and the host's tensor-map encoder and
// device query. Included by .cu files only.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda_check.hpp"

namespace zmoe::kernels::sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

/// Waits until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    const uint32_t addr = smem_addr(bar);
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n"
            : "=r"(done)
            : "r"(addr), "r"(parity)
            : "memory");
    } while (!done);
}

/// 2D TMA copy of the box at (c0 = element along K, c1 = row) into shared memory, completing on bar.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int32_t c0, int32_t c1, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::
            "r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
        : "memory");
}

__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

/// 1D bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) into shared memory, completing on bar.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

/// 16-byte cp.async into shared memory; src_bytes 0 fills zeros and reads nothing.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
/// Arrives on bar once this thread's earlier cp.async copies have landed (the arrive counts toward the barrier's
/// expected arrivals); the thread itself goes on at once.
__device__ __forceinline__ void cp_async_arrive_on(uint64_t* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
/// Orders generic-proxy shared-memory accesses (cp.async, st.shared) with the async proxy (wgmma, TMA stores).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/// Matrix descriptor of a K-major tile in shared memory written by TMA with 128-byte swizzle: rows of 128 bytes
/// (64 BF16 or 128 e4m3 along K), 8-row swizzle atoms 1024 bytes apart (the stride byte offset); the leading byte
/// offset is unused for swizzled K-major layouts. Advancing K by 32 bytes (16 BF16, 32 e4m3) adds 2 to the descriptor.
__device__ __forceinline__ uint64_t smem_desc(const void* tile) {
    uint64_t d = (smem_addr(tile) & 0x3FFFFu) >> 4;
    d |= uint64_t(1) << 16;
    d |= uint64_t(1024 >> 4) << 32;
    d |= uint64_t(1) << 62;  // 128-byte swizzle
    return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

/// Keeps the compiler from moving accesses of the accumulators across the asynchronous wgmma (as a use and a
/// definition of each register at this point).
template <int kN>
__device__ __forceinline__ void fence_accumulators(float (&d)[kN]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/// wgmma.wait_group: returns once at most kPending committed groups of this warpgroup's wgmmas are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

/// Barrier over the 128 threads of one warpgroup (named barrier id, 1..15).
__device__ __forceinline__ void warpgroup_sync(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }

/// 2D TMA store of the box at (c0 = column, c1 = row) from shared memory, in this thread's bulk async group; the
/// parts of the box past the matrix are not written.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, uint32_t src, int32_t c0, int32_t c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(src), "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/// Waits until at most kPending of this thread's bulk groups have not yet read their shared-memory sources.
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
/// Waits until this thread's bulk stores are complete.
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

/// The last e in [0, n) with starts[e] <= v: for a non-decreasing starts and v < starts[n], the non-empty entry
/// whose range [starts[e], starts[e + 1]) holds v.
__device__ __forceinline__ int32_t last_start_at_or_below(const int32_t* starts, int32_t n, int32_t v) {
    int32_t lo = 0, hi = n;
    while (hi - lo > 1) {
        const int32_t mid = (lo + hi) / 2;
        if (starts[mid] <= v)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/// The device-built tile schedule: tile_start[e] = the first row tile of expert e, where expert e's group
/// (a multiple of 64 rows) makes ceil(rows / kBM) row tiles, rounded up to a multiple of kRound (a cluster's CTAs
/// then always work on one expert; the extra tiles have no rows); tile_start[num_experts] = all row tiles. One
/// warp scans the group sizes 32 experts at a time.
template <int kBM, int kRound = 1>
__device__ void build_tile_schedule(const int32_t* offsets, int32_t num_experts, int32_t* tile_start) {
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x;
    int32_t carry = 0;
    for (int32_t base = 0; base < num_experts; base += 32) {
        const int32_t e = base + lane;
        int32_t v = e < num_experts ? (offsets[e + 1] - offsets[e] + kBM - 1) / kBM : 0;
        v = (v + kRound - 1) / kRound * kRound;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int32_t up = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += up;
        }
        if (e < num_experts) tile_start[e + 1] = carry + v;
        carry += __shfl_sync(0xffffffffu, v, 31);
    }
    if (lane == 0) tile_start[0] = 0;
}

/// Row tile m of the schedule: its expert, first row and height (kBM, or 64 for the last tile of a group of
/// an odd number of 64-row blocks when kBM == 128; <= 0 for a tile that rounding to kRound added).
struct row_tile {
    int32_t expert, m0, rows;
};

template <int kBM>
__device__ __forceinline__ row_tile locate_row_tile(const int32_t* offsets, const int32_t* tile_start,
                                                    int32_t num_experts, int32_t m) {
    const int32_t e = last_start_at_or_below(tile_start, num_experts, m);
    const int32_t m0 = offsets[e] + (m - tile_start[e]) * kBM;
    return {e, m0, min(kBM, offsets[e + 1] - m0)};
}

using encode_tiled_fn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                     const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                     CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda).
inline encode_tiled_fn encode_tiled() {
    static const encode_tiled_fn fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult found{};
        ZMOE_CUDA_CHECK(
            cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
        ZMOE_KERNEL_REQUIRE(found == cudaDriverEntryPointSuccess && f != nullptr,
                            "grouped_gemm: the driver has no cuTensorMapEncodeTiled");
        return reinterpret_cast<encode_tiled_fn>(f);
    }();
    return fn;
}

struct device_info {
    int major = 0;
    int sms = 0;
};

/// The current device's compute capability major and multiprocessor count (cached per thread and device).
inline const device_info& current_device() {
    static thread_local int cached_device = -1;
    static thread_local device_info info;
    int dev = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev != cached_device) {
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&info.major, cudaDevAttrComputeCapabilityMajor, dev));
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, dev));
        cached_device = dev;
    }
    return info;
}

// ---------------------------------------------------------------------------------------------------------
// Warp-specialised attention (paged_attention_sm90.cu): 3D TMA loads, register reallocation, named barriers.

/// 3D TMA copy of the box at (c0, c1, c2) (innermost first) into shared memory, completing on bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int32_t c0, int32_t c1, int32_t c2,
                                            uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
        "[%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

/// setmaxnreg: this warpgroup's registers per thread raised or lowered to kRegs (every thread of the warpgroup).
template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_alloc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

/// Named barrier id over kThreads threads: wait for all (sync), or count this warp's threads and go on (arrive).
template <int kThreads>
__device__ __forceinline__ void named_barrier_sync(int id) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}
template <int kThreads>
__device__ __forceinline__ void named_barrier_arrive(int id) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

}  // namespace zmoe::kernels::sm90

// The operand lists of the two wgmma shapes: accumulator registers %0..%63 (and %64..%127 for N = 256), and
// "+f" constraints on d[i .. i + 31].
#define ZMOE_WGMMA_D0_63                                                               \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define ZMOE_WGMMA_D64_127                                                                         \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "             \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "             \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define ZMOE_WGMMA_ACC8(i)                                                                                      \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define ZMOE_WGMMA_ACC32(i) ZMOE_WGMMA_ACC8(i), ZMOE_WGMMA_ACC8(i + 8), ZMOE_WGMMA_ACC8(i + 16), ZMOE_WGMMA_ACC8(i + 24)
