// The peer-to-peer expert-parallel exchange: one warp per row copies it (16-byte vectors) straight into the
// receiving rank's window over NVLink (the FP8 dispatch quantizes it on the way: each 128-channel group's e4m3 codes,
// 4 bytes a lane, then its scale); the grid's last block to finish raises the rank's flag in every window
// (system-scope release after system-scope fences), and the receiver's wait kernel spins on its flags (acquire).

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/fp8_group.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kMaxBlocks = 64;
constexpr size_t kAlign = 256;

size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ void copy_row(uint4* dst, const uint4* src, int32_t vecs, int lane) {
    for (int32_t v = lane; v < vecs; v += 32) dst[v] = src[v];
}

/// Every block: fence its writes system-wide; the last one (the block counter) raises flag `flag_index` in every
/// peer's window: to *epoch, after incrementing it when `bump`.
__device__ void signal_peers(const ep_p2p_params& p, int32_t flag_base, bool bump) {
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x != 0) return;
    const uint32_t ticket = atomicAdd(p.done, 1u);
    if (ticket != gridDim.x - 1) return;
    *p.done = 0;  // ready for the next launch (stream-ordered after this one)
    __threadfence_system();
    uint32_t e = *p.epoch;
    if (bump) *p.epoch = ++e;
    for (int32_t d = 0; d < p.num_ranks; ++d) {
        auto* flags = reinterpret_cast<uint32_t*>(p.windows[d] + p.layout.flags);
        store_release_sys(flags + flag_base + p.rank, e);
    }
}

/// Groups a dispatch warp loads before it quantizes them: the loads of a row's next groups are in flight together.
constexpr int32_t kGroupsInFlight = 4;

/// The FP8 record of `row` (api.hpp's layout) written to `rec` by one warp, kGroupsInFlight groups at a time.
__device__ __forceinline__ void quantize_row(uint8_t* __restrict__ rec, const bf16* __restrict__ row, int32_t hidden,
                                             int lane) {
    const int32_t groups = (hidden + 127) / 128;
    for (int32_t g0 = 0; g0 < groups; g0 += kGroupsInFlight) {
        float v[kGroupsInFlight][4];
#pragma unroll
        for (int32_t j = 0; j < kGroupsInFlight; ++j) fp8_load4(row, (g0 + j) * 128 + lane * 4, hidden, v[j]);
#pragma unroll
        for (int32_t j = 0; j < kGroupsInFlight; ++j) {
            const int32_t g = g0 + j, c = g * 128 + lane * 4;
            if (g >= groups) break;  // warp-uniform
            float scale;
            const uint32_t codes = fp8_quantize_group4(v[j], scale);
            if (c < hidden) *reinterpret_cast<uint32_t*>(rec + c) = codes;
            if (lane == 0) reinterpret_cast<float*>(rec + hidden)[g] = scale;
        }
    }
    const int64_t pad = hidden + 4 * int64_t(groups) + 4 * lane;
    if (lane < 4 && pad < ep_fp8_record_bytes(hidden)) *reinterpret_cast<uint32_t*>(rec + pad) = 0;
}

template <bool kFp8>
__global__ void __launch_bounds__(kThreads)
    ep_p2p_dispatch_kernel(const ep_p2p_params p, const bf16* __restrict__ x, const int32_t* __restrict__ send_token,
                           const int32_t* __restrict__ send_slot) {
    const int lane = threadIdx.x & 31;
    const int32_t rows = p.num_ranks * p.capacity, vecs = p.hidden / 8;
    const int64_t row_bytes = ep_dispatch_row_bytes(p.hidden, kFp8);
    for (int32_t i = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5); i < rows; i += gridDim.x * kWarpsPerBlock) {
        const int32_t d = i / p.capacity, pos = i % p.capacity;
        const int32_t at = p.rank * p.capacity + pos;
        char* w = p.windows[d];
        const int32_t slot = send_slot[i];
        if (lane == 0) reinterpret_cast<int32_t*>(w + p.layout.recv_slot)[at] = slot;
        if (slot >= p.slots_per_rank) continue;  // an unused row (warp-uniform)
        const bf16* src = x + int64_t(send_token[i]) * p.hidden;
        char* dst = w + p.layout.recv_x + at * row_bytes;
        if constexpr (kFp8)
            quantize_row(reinterpret_cast<uint8_t*>(dst), src, p.hidden, lane);
        else
            copy_row(reinterpret_cast<uint4*>(dst), reinterpret_cast<const uint4*>(src), vecs, lane);
    }
    signal_peers(p, 0, true);
}

__global__ void __launch_bounds__(kThreads) ep_p2p_combine_kernel(const ep_p2p_params p, const bf16* __restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int32_t rows = p.num_ranks * p.capacity, vecs = p.hidden / 8;
    const int64_t row_bytes = int64_t(p.hidden) * sizeof(bf16);
    const char* own = p.windows[p.rank];
    const auto* recv_slot = reinterpret_cast<const int32_t*>(own + p.layout.recv_slot);
    for (int32_t r = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5); r < rows; r += gridDim.x * kWarpsPerBlock) {
        if (recv_slot[r] >= p.slots_per_rank) continue;  // an unused row
        const int32_t s = r / p.capacity, pos = r % p.capacity;
        const int32_t at = p.rank * p.capacity + pos;
        copy_row(reinterpret_cast<uint4*>(p.windows[s] + p.layout.y_back + at * row_bytes),
                 reinterpret_cast<const uint4*>(y + int64_t(r) * p.hidden), vecs, lane);
    }
    signal_peers(p, p.num_ranks, false);
}

__global__ void ep_p2p_wait_kernel(const ep_p2p_params p, int32_t flag_base) {
    const int32_t s = threadIdx.x;
    if (s >= p.num_ranks) return;
    const auto* flags = reinterpret_cast<const uint32_t*>(p.windows[p.rank] + p.layout.flags) + flag_base;
    const uint32_t e = *p.epoch;
    const uint64_t t0 = global_ns();
    // Wrap-safe: the flag is at most one exchange behind or at e.
    while (static_cast<int32_t>(load_acquire_sys(flags + s) - e) < 0) {
        __nanosleep(64);
        if (global_ns() - t0 > 30ull * 1000 * 1000 * 1000) __trap();  // a peer that never wrote: dead
    }
}

void require(const ep_p2p_params& p) {
    ZMOE_KERNEL_REQUIRE(p.num_ranks >= 1 && p.num_ranks <= kMaxEpRanks, "num_ranks in [1, 32]");
    ZMOE_KERNEL_REQUIRE(p.rank >= 0 && p.rank < p.num_ranks, "rank out of range");
    ZMOE_KERNEL_REQUIRE(p.capacity >= 1 && p.slots_per_rank >= 1, "capacity and slots >= 1");
    ZMOE_KERNEL_REQUIRE(p.hidden % 8 == 0, "hidden a multiple of 8");
    ZMOE_KERNEL_REQUIRE(p.epoch != nullptr && p.done != nullptr, "epoch and block counter required");
    for (int32_t r = 0; r < p.num_ranks; ++r) ZMOE_KERNEL_REQUIRE(p.windows[r] != nullptr, "a rank without a window");
}

int grid_of(const ep_p2p_params& p) {
    const int rows = p.num_ranks * p.capacity;
    const int want = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    return std::max(1, std::min(want, p.blocks > 0 ? p.blocks : kMaxBlocks));
}

}  // namespace

ep_p2p_window_layout ep_p2p_layout(int32_t num_ranks, int32_t max_capacity, int32_t hidden, bool fp8) {
    const size_t rows = size_t(num_ranks) * size_t(max_capacity);
    ep_p2p_window_layout l;
    l.recv_x = 0;
    l.recv_slot = align_up(rows * size_t(ep_dispatch_row_bytes(hidden, fp8)));
    l.y_back = l.recv_slot + align_up(rows * sizeof(int32_t));
    l.flags = l.y_back + align_up(rows * size_t(hidden) * sizeof(bf16));
    l.bytes = l.flags + align_up(2 * size_t(num_ranks) * sizeof(uint32_t));
    return l;
}

void launch_ep_p2p_dispatch(const ep_p2p_params& p, const bf16* x, const int32_t* send_token, const int32_t* send_slot,
                            cudaStream_t stream) {
    require(p);
    if (p.fp8)
        ep_p2p_dispatch_kernel<true><<<grid_of(p), kThreads, 0, stream>>>(p, x, send_token, send_slot);
    else
        ep_p2p_dispatch_kernel<false><<<grid_of(p), kThreads, 0, stream>>>(p, x, send_token, send_slot);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_ep_p2p_combine(const ep_p2p_params& p, const bf16* y, cudaStream_t stream) {
    require(p);
    ep_p2p_combine_kernel<<<grid_of(p), kThreads, 0, stream>>>(p, y);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_ep_p2p_wait(const ep_p2p_params& p, bool combine, cudaStream_t stream) {
    require(p);
    ep_p2p_wait_kernel<<<1, 32, 0, stream>>>(p, combine ? p.num_ranks : 0);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
