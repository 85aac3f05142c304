// Token permutation into expert-contiguous order. Deterministic and exact: a (token, slot) assignment's row is
// its expert's padded start + the number of earlier assignments (in (token, slot) order) to the same expert.
// Decode-sized batches (up to kSmallAssignments assignments) take one block that does all of it in shared memory
// (one launch, no workspace, no memset); larger ones take three kernels (plus the optional gather):
//   1. chunk_count:  per chunk of kChunk assignments, a histogram over experts.
//   2. scan:         per expert, exclusive prefix over chunks (ranges of chunks in parallel); padded group sizes;
//                    prefix over experts.
//   3. assign:       within a chunk, ranks from warp peer masks plus per-warp counts; writes dest_rows/row_token.
//   4. gather:       x_permuted[row] = x[row_token[row]], zero rows for padding.
// Every kernel is launched programmatically dependent (pdl.cuh): its launch overlaps the tail of the one before.

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/grouped_gemm_sm90.hpp"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kChunk = 256;  // assignments per chunk = threads per block of kernels 1 and 3
constexpr int kChunkWarps = kChunk / 32;
constexpr int kMaxExperts = 1024;

int32_t num_chunks(int32_t num_tokens, int32_t top_k) { return (num_tokens * top_k + kChunk - 1) / kChunk; }

/// Bits that hold every expert id below num_experts.
__device__ __forceinline__ int id_bits(int32_t num_experts) {
    return num_experts > 1 ? 32 - __clz(num_experts - 1) : 0;
}

/// The valid lanes of the warp whose id equals this lane's (what __match_any_sync gives, less the invalid lanes), from
/// one ballot per bit of the ids (ids below 2^bits), in place of __match_any_sync (measured: docs/kernels.md,
/// 2026-11-27).
__device__ __forceinline__ unsigned match_peers(int32_t id, bool valid, int bits) {
    unsigned peers = __ballot_sync(detail::kFullMask, valid);
    for (int b = 0; b < bits; ++b) {
        const bool set = (id >> b) & 1;
        const unsigned ones = __ballot_sync(detail::kFullMask, set);
        peers &= set ? ones : ~ones;
    }
    return peers;
}

__global__ void __launch_bounds__(kChunk) chunk_count_kernel(const moe_permute_params p, int32_t* chunk_counts) {
    extern __shared__ int32_t hist[];  // [num_experts] int32
    for (int32_t e = threadIdx.x; e < p.num_experts; e += kChunk) hist[e] = 0;
    detail::pdl_wait();  // the kernel before writes what this one reads
    detail::pdl_launch_dependents();
    __syncthreads();
    const int32_t a = blockIdx.x * kChunk + threadIdx.x;
    if (a < p.num_tokens * p.top_k) atomicAdd(&hist[p.topk_ids[a]], 1);
    __syncthreads();
    for (int32_t e = threadIdx.x; e < p.num_experts; e += kChunk)
        chunk_counts[size_t(blockIdx.x) * p.num_experts + e] = hist[e];
}

/// One block of kMaxExperts threads: kMaxExperts / num_experts threads per expert ("parts"), each over a contiguous
/// range of the chunks, so the loads of the chunk counts run in parallel (a serial pass over the chunks, ~0.1 ms at
/// 16 384 tokens, was most of the plan).
__global__ void __launch_bounds__(kMaxExperts)
    scan_kernel(const moe_permute_params p, int32_t* chunk_counts, int32_t chunks) {
    detail::pdl_wait();  // the kernel before writes what this one reads
    detail::pdl_launch_dependents();
    constexpr int kBatch = 8;                    // chunk counts loaded at once by a thread
    __shared__ int32_t padded[kMaxExperts + 1];  // padded group size of each expert, then its start row
    __shared__ int32_t part_sums[kMaxExperts];   // assignments in each thread's range of chunks
    const int32_t parts = kMaxExperts / p.num_experts;
    const int32_t e = int32_t(threadIdx.x) % p.num_experts, part = int32_t(threadIdx.x) / p.num_experts;
    const bool active = part < parts;
    const int32_t per_part = (chunks + parts - 1) / parts;
    const int32_t c0 = min(chunks, part * per_part), c1 = min(chunks, c0 + per_part);
    int32_t sum = 0;
    if (active) {
#pragma unroll kBatch
        for (int32_t c = c0; c < c1; ++c) sum += chunk_counts[size_t(c) * p.num_experts + e];
    }
    part_sums[threadIdx.x] = sum;
    __syncthreads();
    int32_t before = 0;  // assignments of expert e in the chunks before c0
    if (active) {
        int32_t total = 0;
        for (int32_t q = 0; q < parts; ++q) {
            const int32_t n = part_sums[q * p.num_experts + e];
            before += q < part ? n : 0;
            total += n;
        }
        if (part == 0) padded[e] = (total + p.row_align - 1) / p.row_align * p.row_align;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t total = 0;
        for (int32_t i = 0; i < p.num_experts; ++i) {
            const int32_t n = padded[i];
            padded[i] = total;
            total += n;
        }
        padded[p.num_experts] = total;
        p.expert_offsets[p.num_experts] = total;
    }
    __syncthreads();
    if (!active) return;
    if (part == 0) p.expert_offsets[e] = padded[e];
    // Each chunk's count becomes the chunk's first row for expert e: loads in batches, then the stores.
    int32_t running = padded[e] + before;
    for (int32_t c = c0; c < c1; c += kBatch) {
        int32_t n[kBatch];
#pragma unroll
        for (int i = 0; i < kBatch; ++i) n[i] = c + i < c1 ? chunk_counts[size_t(c + i) * p.num_experts + e] : 0;
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
            if (c + i < c1) chunk_counts[size_t(c + i) * p.num_experts + e] = running;
            running += n[i];
        }
    }
}

__global__ void __launch_bounds__(kChunk) assign_kernel(const moe_permute_params p, const int32_t* chunk_base) {
    extern __shared__ int32_t warp_counts[];  // [kChunkWarps][num_experts] int32: assignments per warp and expert
    for (int32_t i = threadIdx.x; i < kChunkWarps * p.num_experts; i += kChunk) warp_counts[i] = 0;
    detail::pdl_wait();  // the kernel before writes what this one reads
    detail::pdl_launch_dependents();
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t a = blockIdx.x * kChunk + threadIdx.x;
    const bool valid = a < p.num_tokens * p.top_k;
    const int32_t id = valid ? p.topk_ids[a] : -1;
    const unsigned peers = match_peers(id, valid, id_bits(p.num_experts));
    const int32_t rank = __popc(peers & ((1u << lane) - 1));
    if (valid && rank == 0) warp_counts[warp * p.num_experts + id] = __popc(peers);
    __syncthreads();
    if (!valid) return;
    int32_t row = chunk_base[size_t(blockIdx.x) * p.num_experts + id] + rank;
    for (int w = 0; w < warp; ++w) row += warp_counts[w * p.num_experts + id];
    p.dest_rows[a] = row;
    p.row_token[row] = a / p.top_k;
}

__global__ void gather_kernel(const moe_permute_params p) {
    detail::pdl_wait();  // the kernel before writes what this one reads
    detail::pdl_launch_dependents();
    const int32_t row = blockIdx.x;
    if (row >= p.expert_offsets[p.num_experts]) return;
    const int32_t token = p.row_token[row];
    const auto* src = reinterpret_cast<const detail::bf16x8*>(p.x + size_t(token < 0 ? 0 : token) * p.hidden);
    auto* dst = reinterpret_cast<detail::bf16x8*>(p.x_permuted + size_t(row) * p.hidden);
    for (int32_t i = threadIdx.x; i < p.hidden / 8; i += blockDim.x) {
        detail::bf16x8 v{};
        if (token >= 0) v = src[i];
        dst[i] = v;
    }
}

constexpr int kSmallThreads = 1024;
constexpr int32_t kSmallAssignments = 4096;
constexpr size_t kSmallSmem = 64u << 10;

size_t small_smem_bytes(int32_t num_tokens, int32_t top_k, int32_t num_experts) {
    return size_t((num_tokens * top_k + 31) / 32) * num_experts * sizeof(int32_t);
}

/// The whole plan in one block. A warp pass takes 32 assignments (a "chunk"); ranks within a chunk come from peer
/// masks (match_peers), and counts[chunk][expert] turns, by a scan over the chunks per expert and one over the experts,
/// into each chunk's first row for each expert.
__global__ void __launch_bounds__(kSmallThreads) permute_one_block_kernel(const moe_permute_params p) {
    extern __shared__ int32_t counts[];         // [chunks][num_experts] int32: count, then the chunk's first row
    __shared__ int32_t start[kMaxExperts + 1];  // padded group size of each expert, then its first row
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, num_warps = kSmallThreads / 32;
    const int32_t n = p.num_tokens * p.top_k, chunks = (n + 31) / 32, E = p.num_experts;
    const int bits = id_bits(E);
    for (int32_t i = threadIdx.x; i < chunks * E; i += kSmallThreads) counts[i] = 0;
    detail::pdl_wait();  // the kernel before writes what this one reads
    detail::pdl_launch_dependents();
    for (int32_t i = threadIdx.x; i < p.max_rows; i += kSmallThreads) p.row_token[i] = -1;
    __syncthreads();
    for (int32_t c = warp; c < chunks; c += num_warps) {
        const int32_t a = c * 32 + lane;
        const int32_t id = a < n ? p.topk_ids[a] : -1;
        const unsigned peers = match_peers(id, a < n, bits);
        if (a < n && __popc(peers & ((1u << lane) - 1)) == 0) counts[c * E + id] = __popc(peers);
    }
    __syncthreads();
    for (int32_t e = threadIdx.x; e < E; e += kSmallThreads) {
        int32_t running = 0;
        for (int32_t c = 0; c < chunks; ++c) {
            const int32_t v = counts[c * E + e];
            counts[c * E + e] = running;
            running += v;
        }
        start[e] = (running + p.row_align - 1) / p.row_align * p.row_align;
    }
    __syncthreads();
    if (warp == 0) {  // exclusive scan of the padded sizes over the experts, 32 at a time
        int32_t carry = 0;
        for (int32_t base = 0; base < E; base += 32) {
            const int32_t e = base + lane;
            const int32_t v = e < E ? start[e] : 0;
            int32_t incl = v;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int32_t up = __shfl_up_sync(detail::kFullMask, incl, o);
                if (lane >= o) incl += up;
            }
            if (e < E) start[e] = carry + incl - v;
            carry += __shfl_sync(detail::kFullMask, incl, 31);
        }
        if (lane == 0) start[E] = carry;
    }
    __syncthreads();
    for (int32_t e = threadIdx.x; e <= E; e += kSmallThreads) p.expert_offsets[e] = start[e];
    for (int32_t c = warp; c < chunks; c += num_warps) {
        const int32_t a = c * 32 + lane;
        const int32_t id = a < n ? p.topk_ids[a] : -1;
        const unsigned peers = match_peers(id, a < n, bits);
        if (a >= n) continue;
        const int32_t row = start[id] + counts[c * E + id] + __popc(peers & ((1u << lane) - 1));
        p.dest_rows[a] = row;
        p.row_token[row] = a / p.top_k;
    }
}

/// The three-kernel plan for batches beyond one block (the gather is the caller's).
void launch_chunked(const moe_permute_params& p, cudaStream_t stream) {
    auto* chunk_counts = static_cast<int32_t*>(p.workspace);
    const int32_t chunks = num_chunks(p.num_tokens, p.top_k);
    ZMOE_CUDA_CHECK(cudaMemsetAsync(p.row_token, 0xff, size_t(p.max_rows) * sizeof(int32_t), stream));
    const size_t hist_bytes = size_t(p.num_experts) * sizeof(int32_t);
    if (chunks > 0) {
        detail::launch_pdl(chunk_count_kernel, dim3(chunks), dim3(kChunk), hist_bytes, stream, p, chunk_counts);
    }
    detail::launch_pdl(scan_kernel, dim3(1), dim3(kMaxExperts), 0, stream, p, chunk_counts, chunks);
    if (chunks > 0) {
        detail::launch_pdl(assign_kernel, dim3(chunks), dim3(kChunk), hist_bytes * kChunkWarps, stream, p,
                           static_cast<const int32_t*>(chunk_counts));
    }
}

}  // namespace

int32_t moe_row_align_for(int32_t num_tokens, int32_t top_k, int32_t num_experts) {
    // Small batches are bound by streaming expert weights: pad little, and keep an expert's rows in one tile so
    // its weights are read once (16 rows up to 8 per expert on average, 32 up to 32). Larger ones fill 64-row
    // tensor-core tiles, and from about 256 rows per expert on, 128-row tiles (padding then costs at most a
    // quarter).
    const int64_t rows = int64_t(num_tokens) * top_k;
    // On Hopper the wgmma grouped GEMM takes every batch: 64-row groups (its tile schedule runs 128-row tiles over
    // them once they average 128 rows). Measured on H200 at Qwen3-30B-A3B shapes (the whole layer, CUDA graph): 1 / 2
    // / 4 tokens 0.062 / 0.077 / 0.120 ms against 0.083 / 0.090 / 0.132 with 16-row groups on the mma.sync kernel,
    // and from 8 to 256 tokens 0.18-0.35 ms against 0.24-0.60 with 8-row groups on the small-group kernel.
    if (detail::device_has_wgmma()) return 64;
    if (rows <= 8 * int64_t(num_experts)) return 16;
    if (rows <= 32 * int64_t(num_experts)) return 32;
    return rows >= 256 * int64_t(num_experts) ? 128 : 64;
}

size_t moe_permute_workspace_bytes(int32_t num_tokens, int32_t top_k, int32_t num_experts) {
    return size_t(std::max(num_chunks(num_tokens, top_k), 1)) * num_experts * sizeof(int32_t);
}

void launch_moe_permute(const moe_permute_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.num_experts >= 1 && p.num_experts <= kMaxExperts, "moe_permute: num_experts in [1, 1024]");
    ZMOE_KERNEL_REQUIRE(
        p.row_align == 8 || p.row_align == 16 || p.row_align == 32 || (p.row_align > 0 && p.row_align % 64 == 0),
        "moe_permute: row_align must be 8, 16, 32 or a multiple of 64");
    ZMOE_KERNEL_REQUIRE(p.max_rows >= moe_permuted_rows_bound(p.num_tokens, p.top_k, p.num_experts, p.row_align),
                        "moe_permute: max_rows below moe_permuted_rows_bound");
    ZMOE_KERNEL_REQUIRE(p.x == nullptr || p.hidden % 8 == 0, "moe_permute: hidden must be a multiple of 8");
    const size_t small_smem = small_smem_bytes(p.num_tokens, p.top_k, p.num_experts);
    if (p.num_tokens * p.top_k <= kSmallAssignments && small_smem <= kSmallSmem) {
        ZMOE_CUDA_CHECK(cudaFuncSetAttribute(permute_one_block_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(kSmallSmem)));
        detail::launch_pdl(permute_one_block_kernel, dim3(1), dim3(kSmallThreads), small_smem, stream, p);
    } else {
        launch_chunked(p, stream);
    }
    if (p.x != nullptr && p.x_permuted != nullptr && p.max_rows > 0) {
        detail::launch_pdl(gather_kernel, dim3(p.max_rows), dim3(128), 0, stream, p);
    }
}

}  // namespace zmoe::kernels
