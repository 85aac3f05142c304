// The softmax top-k router of an MoE layer: the router GEMM, then the softmax top-k with the replica choice fused in
// (launch_router_topk). One launch sequence for launch_moe_layer and the CUDA executor's expert-parallel path, so both
// route a batch identically.
//
// The router GEMM is small (Qwen3-30B-A3B: 128 experts x 2048) and its batches from a few tokens to a few thousand:
//   gemv: launch_gemv_bf16, one streaming pass over the router weights, up to kGemvMaxRows rows;
//   mma:  one block per 16 experts x 16 (or 32) tokens, 8 warps over the hidden size in 32-wide steps, mma.sync
//         m16n8k16 with fragments copied per lane by cp.async into shared memory, a warp's whole batch of steps in
//         flight at once (16 bytes per lane: each lane's 8 consecutive values of a row feed two MMAs, the same
//         relabelling of k for x and the router, so the products summed are exactly x[t, k] * w[e, k]); the warps'
//         partial sums are added in warp order (deterministic, and a token's logits do not depend on the other tokens).
//         Up to 128 experts with the top-k asked for, the top-k is fused in: the blocks of one 16-token tile form a
//         thread-block cluster, and after the GEMM each gathers whole logit rows of its share of the tokens from the
//         others' shared memory and routes them as launch_router_topk does (one launch instead of two). Its launch
//         overlaps the kernel before (pdl.cuh): the block's router rows are prefetched into L2 before it waits;
//   blas: cuBLASLt, then launch_router_topk.
// automatic: the GEMV up to kGemvMaxRows rows, the fused mma kernel up to kFusedMaxTokens (128), cuBLASLt past them.

#include <cooperative_groups.h>

#include <cstdint>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/mma_sm80.cuh"
#include "kernels/pdl.cuh"
#include "kernels/router_softmax_topk.cuh"
#include "kernels/warp_topk.cuh"

namespace zmoe::kernels {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 8;
constexpr int kExpertsPerBlock = 16;  // two n8 tiles
constexpr int kStepK = 32;            // hidden values per warp step: 4 lanes x 8
constexpr int kMaxClusterBlocks = 8;  // the portable cluster size: the fused kernel takes up to 128 experts
constexpr int kFusedMaxExperts = kMaxClusterBlocks * kExpertsPerBlock;
constexpr int kFusedBatch = 8;  // steps a warp has in flight: all of a 2048 hidden size

/// What the mma kernels read and write; topk is the fused kernel's top-k (its logits field unused).
struct router_mma_args {
    const bf16* x;
    const bf16* w;
    float* logits;
    int32_t num_tokens, num_experts, hidden;
    router_topk_params topk;
};

/// Shared-memory bytes block_logits stages its loads in: per warp and step of a batch, each lane's 16 bytes of the
/// 2 kMTiles token rows and the 2 router rows it feeds to its MMAs.
template <int kMTiles, int kBatch>
constexpr size_t stage_bytes() {
    return size_t(kWarps) * kBatch * (2 * kMTiles + 2) * 32 * 16;
}

/// cp.async of 8 values of row `row` from column k into dst (zeros past the row count or the hidden size).
__device__ __forceinline__ void load8(uint4* dst, const bf16* base, int32_t row, int32_t rows, int32_t k,
                                      int32_t hidden) {
    const bool ok = row < rows && k < hidden;
    const bf16* src = base + (ok ? size_t(row) * hidden + k : 0);
    const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
}

/// The logits of kMTiles m16 tiles of tokens (blockIdx.y) x kExpertsPerBlock experts (blockIdx.x): into tile (summed
/// over the warps in warp order) and a.logits. kBatch steps of each warp have their loads in flight together. Every
/// thread of the block calls it; it waits for the kernel before (PDL) after prefetching the block's router rows.
template <int kMTiles, int kBatch>
__device__ __forceinline__ void block_logits(const router_mma_args& a, uint4* stage,
                                             float (&partial)[kWarps][16 * kMTiles][16],
                                             float (&tile)[16 * kMTiles][16]) {
    constexpr int kTokens = 16 * kMTiles;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const int32_t e0 = blockIdx.x * kExpertsPerBlock, t0 = blockIdx.y * kTokens;
    const int32_t H = a.hidden;
    {  // the block's router rows towards L2 while the kernel before finishes (nothing earlier writes weights)
        const int32_t lines = (H * int32_t(sizeof(bf16)) + 127) / 128;
        for (int32_t i = threadIdx.x; i < kExpertsPerBlock * lines; i += kWarps * 32) {
            const int32_t e = e0 + i / lines;
            if (e < a.num_experts) {
                const char* addr = reinterpret_cast<const char*>(a.w + size_t(e) * H) + (i % lines) * 128;
                asm volatile("prefetch.global.L2 [%0];" ::"l"(addr));
            }
        }
    }
    detail::pdl_wait();  // the kernel before writes x
    detail::pdl_launch_dependents();

    // A batch's loads all in flight at once: staged through shared memory by cp.async (in registers the compiler
    // would issue them a few at a time, next to their MMAs); each lane reads back only its own 16-byte pieces.
    constexpr int kSlots = 2 * kMTiles + 2;  // x rows g, g + 8 of each m tile, then router rows g, g + 8
    uint4* my_stage = stage + size_t(warp) * kBatch * kSlots * 32 + lane;
    float acc[kMTiles][2][4] = {};
    const int32_t steps = (H + kStepK - 1) / kStepK;
    for (int32_t s0 = warp; s0 < steps; s0 += kWarps * kBatch) {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int32_t k = (s0 + b * kWarps) * kStepK + t4 * 8;
            uint4* slot = my_stage + b * kSlots * 32;
#pragma unroll
            for (int m = 0; m < kMTiles; ++m) {
                load8(slot + (2 * m) * 32, a.x, t0 + m * 16 + g, a.num_tokens, k, H);
                load8(slot + (2 * m + 1) * 32, a.x, t0 + m * 16 + g + 8, a.num_tokens, k, H);
            }
#pragma unroll
            for (int n = 0; n < 2; ++n) load8(slot + (2 * kMTiles + n) * 32, a.w, e0 + n * 8 + g, a.num_experts, k, H);
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const uint4* slot = my_stage + b * kSlots * 32;
            const uint4 w0 = slot[(2 * kMTiles) * 32], w1 = slot[(2 * kMTiles + 1) * 32];
#pragma unroll
            for (int m = 0; m < kMTiles; ++m) {
                // Lane (g, t4) holds values 8 t4 .. 8 t4 + 7 of the step: pairs 0, 1 play k = 2 t4 and 2 t4 + 8
                // of the first MMA, pairs 2, 3 those of the second, for x and the router alike.
                const uint4 lo = slot[(2 * m) * 32], hi = slot[(2 * m + 1) * 32];
                const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y}, a1[4] = {lo.z, hi.z, lo.w, hi.w};
                detail::mma_bf16_16816(acc[m][0], a0, w0.x, w0.y);
                detail::mma_bf16_16816(acc[m][0], a1, w0.z, w0.w);
                detail::mma_bf16_16816(acc[m][1], a0, w1.x, w1.y);
                detail::mma_bf16_16816(acc[m][1], a1, w1.z, w1.w);
            }
        }
    }
    // Accumulator (m, n): rows g and g + 8 of the m tile, columns 2 t4 and 2 t4 + 1 of the n tile.
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) partial[warp][m * 16 + g + (i / 2) * 8][n * 8 + 2 * t4 + i % 2] = acc[m][n][i];
    __syncthreads();
    for (int32_t i = threadIdx.x; i < kTokens * kExpertsPerBlock; i += kWarps * 32) {
        const int32_t r = i / kExpertsPerBlock, c = i % kExpertsPerBlock;
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum += partial[w][r][c];
        tile[r][c] = sum;
        const int32_t t = t0 + r, e = e0 + c;
        if (t < a.num_tokens && e < a.num_experts) a.logits[size_t(t) * a.num_experts + e] = sum;
    }
    __syncthreads();
}

/// The logits alone: kMTiles m16 tiles of tokens x 16 experts a block.
template <int kMTiles, int kBatch>
__global__ void __launch_bounds__(kWarps * 32) router_mma_kernel(const router_mma_args a) {
    __shared__ float partial[kWarps][16 * kMTiles][kExpertsPerBlock];
    __shared__ float tile[16 * kMTiles][kExpertsPerBlock];
    extern __shared__ uint4 stage[];  // stage_bytes<kMTiles, kBatch>()
    block_logits<kMTiles, kBatch>(a, stage, partial, tile);
}

/// The logits and the top-k in one launch: a cluster of ceil(num_experts / 16) blocks per 16 tokens, each block
/// 16 experts' logits (block_logits); then each block gathers whole logit rows of its share of the 16 tokens from
/// the cluster's shared memory and routes them as launch_router_topk does (one warp per token).
template <int kPerLane>
__global__ void __launch_bounds__(kWarps * 32) router_mma_topk_kernel(const router_mma_args a) {
    __shared__ float partial[kWarps][16][kExpertsPerBlock];
    __shared__ float tile[16][kExpertsPerBlock];
    __shared__ float rows[16][kFusedMaxExperts];
    extern __shared__ uint4 stage[];  // stage_bytes<1, kFusedBatch>()
    block_logits<1, kFusedBatch>(a, stage, partial, tile);
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block's tile is written
    const int32_t E = a.num_experts, nb = int32_t(cluster.num_blocks()), rank = int32_t(cluster.block_rank());
    const int32_t per = (16 + nb - 1) / nb, r0 = min(16, rank * per), r1 = min(16, r0 + per);
    for (int32_t i = threadIdx.x; i < (r1 - r0) * E; i += kWarps * 32) {
        const int32_t r = r0 + i / E, e = i % E;
        const float* peer = cluster.map_shared_rank(&tile[0][0], unsigned(e / kExpertsPerBlock));
        rows[i / E][e] = peer[r * kExpertsPerBlock + e % kExpertsPerBlock];
    }
    cluster.sync();  // no block leaves while another still reads its tile
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int32_t r = r0 + warp; r < r1; r += kWarps) {
        const int32_t t = blockIdx.y * 16 + r;
        if (t >= a.num_tokens) break;
        int32_t id;
        float weight;
        detail::warp_softmax_topk<kPerLane>(rows[r - r0], E, a.topk.top_k, a.topk.renormalize, &id, &weight);
        if (lane < a.topk.top_k) detail::store_router_choice(a.topk, t, lane, id, weight, nullptr, a.topk.load_counts);
    }
}

/// Most tokens automatic gives the fused mma kernel (past them cuBLASLt + launch_router_topk). Measured on H200 at
/// Qwen3-30B-A3B's router (ncu, each kernel alone): fused 10.0-10.3 us from 32 to 128 tokens against 5.7-5.8 +
/// 5.9-6.0 us for cuBLASLt + top-k; at 256 and 512 the clusters (8 blocks of 145 KB shared memory each) take more
/// than one wave, 18.8 and 27.4 us against 11.9 and 12.1.
constexpr int32_t kFusedMaxTokens = 128;

bool aligned16(const void* a) { return reinterpret_cast<uintptr_t>(a) % 16 == 0; }

void mark(const moe_router_params& p, moe_stage stage) {
    if (p.mark != nullptr) p.mark(p.mark_context, stage);
}

bool mma_takes(const moe_router_params& p) {
    return aligned16(p.x) && aligned16(p.router_w) && p.hidden % 8 == 0 && p.hidden > 0;
}

/// The fused GEMM + top-k kernel takes the batch: the top-k is asked for and a cluster holds every expert.
bool fused_takes(const moe_router_params& p) {
    return mma_takes(p) && p.topk_weights != nullptr && p.num_experts <= kFusedMaxExperts;
}

moe_router_impl choose(const moe_router_params& p) {
    const bool gemv =
        aligned16(p.x) && aligned16(p.router_w) && gemv_bf16_supported(p.num_tokens, p.num_experts, p.hidden);
    switch (p.impl) {
        case moe_router_impl::gemv:
            return gemv ? moe_router_impl::gemv : moe_router_impl::cublaslt;
        case moe_router_impl::mma:
            return mma_takes(p) ? moe_router_impl::mma : moe_router_impl::cublaslt;
        case moe_router_impl::cublaslt:
            return moe_router_impl::cublaslt;
        case moe_router_impl::automatic:
            break;
    }
    if (gemv) return moe_router_impl::gemv;
    return fused_takes(p) && p.num_tokens <= kFusedMaxTokens ? moe_router_impl::mma : moe_router_impl::cublaslt;
}

router_topk_params topk_params(const moe_router_params& p) {
    return {.logits = p.router_logits,
            .topk_ids = p.topk_ids,
            .topk_weights = p.topk_weights,
            .expert_counts = nullptr,
            .num_tokens = p.num_tokens,
            .num_experts = p.num_experts,
            .top_k = p.top_k,
            .renormalize = p.renormalize,
            .replica_offsets = p.replica_offsets,
            .replica_slots = p.replica_slots,
            .num_valid = p.num_valid,
            .slot_ids = p.slot_ids,
            .load_counts = p.load_counts};
}

router_mma_args mma_args(const moe_router_params& p) {
    return {.x = p.x,
            .w = p.router_w,
            .logits = p.router_logits,
            .num_tokens = p.num_tokens,
            .num_experts = p.num_experts,
            .hidden = p.hidden,
            .topk = topk_params(p)};
}

void launch_router_mma(const moe_router_params& p, cudaStream_t stream) {
    const unsigned expert_blocks = unsigned((p.num_experts + kExpertsPerBlock - 1) / kExpertsPerBlock);
    // 16-token tiles while there are few of them (more blocks to stream the router); 32 past that (the router rows
    // read half as often).
    if (p.num_tokens <= 128) {
        constexpr size_t smem = stage_bytes<1, 8>();
        ZMOE_CUDA_CHECK(
            cudaFuncSetAttribute(router_mma_kernel<1, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        detail::launch_pdl(router_mma_kernel<1, 8>, dim3(expert_blocks, unsigned((p.num_tokens + 15) / 16)),
                           dim3(kWarps * 32), smem, stream, mma_args(p));
    } else {
        constexpr size_t smem = stage_bytes<2, 4>();
        ZMOE_CUDA_CHECK(
            cudaFuncSetAttribute(router_mma_kernel<2, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        detail::launch_pdl(router_mma_kernel<2, 4>, dim3(expert_blocks, unsigned((p.num_tokens + 31) / 32)),
                           dim3(kWarps * 32), smem, stream, mma_args(p));
    }
}

/// router_mma_topk_kernel: clusters of ceil(num_experts / 16) blocks, launched programmatically dependent.
void launch_router_mma_topk(const moe_router_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.top_k >= 1 && p.top_k <= 16 && p.top_k <= p.num_experts,
                        "router: top_k must be in [1, min(16, num_experts)]");
    ZMOE_KERNEL_REQUIRE(p.replica_offsets == nullptr || (p.replica_slots != nullptr && p.slot_ids != nullptr),
                        "router: the fused replica choice needs replica_slots and slot_ids");
    const unsigned blocks = unsigned((p.num_experts + kExpertsPerBlock - 1) / kExpertsPerBlock);
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(blocks, unsigned((p.num_tokens + 15) / 16));
    config.blockDim = dim3(kWarps * 32);
    config.dynamicSmemBytes = stage_bytes<1, kFusedBatch>();
    config.stream = stream;
    cudaLaunchAttribute attributes[2]{};
    attributes[0].id = cudaLaunchAttributeClusterDimension;
    attributes[0].val.clusterDim.x = blocks;
    attributes[0].val.clusterDim.y = 1;
    attributes[0].val.clusterDim.z = 1;
    attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[1].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attributes;
    config.numAttrs = 2;
    const router_mma_args a = mma_args(p);
    const auto launch = [&](auto kernel) {
        ZMOE_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(config.dynamicSmemBytes)));
        ZMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, a));
    };
    if (p.num_experts <= 32)
        launch(router_mma_topk_kernel<1>);
    else if (p.num_experts <= 64)
        launch(router_mma_topk_kernel<2>);
    else
        launch(router_mma_topk_kernel<4>);
}

}  // namespace

void launch_moe_router(const moe_router_params& p, cudaStream_t stream) {
    if (p.num_tokens == 0) return;
    mark(p, moe_stage::router_gemm);
    switch (choose(p)) {
        case moe_router_impl::gemv:
            launch_gemv_bf16({.x = p.x,
                              .w = p.router_w,
                              .y = p.router_logits,
                              .m = p.num_tokens,
                              .n = p.num_experts,
                              .k = p.hidden,
                              .y_fp32 = true},
                             stream);
            break;
        case moe_router_impl::mma:
            if (fused_takes(p)) {  // the top-k inside: its stage is empty
                launch_router_mma_topk(p, stream);
                mark(p, moe_stage::router_topk);
                return;
            }
            launch_router_mma(p, stream);
            break;
        default:
            launch_gemm_bf16({.handle = p.blas,
                              .workspace = p.blas_workspace,
                              .workspace_bytes = p.blas_workspace_bytes,
                              .x = p.x,
                              .w = p.router_w,
                              .y = p.router_logits,
                              .m = p.num_tokens,
                              .n = p.num_experts,
                              .k = p.hidden,
                              .y_fp32 = true},
                             stream);
    }
    if (p.topk_weights == nullptr) return;
    mark(p, moe_stage::router_topk);
    launch_router_topk(topk_params(p), stream);
}

}  // namespace zmoe::kernels
