// The softmax top-k router of an MoE layer: the router GEMM, then the softmax top-k with the replica choice fused in
// (launch_router_topk). One launch sequence for launch_moe_layer and the CUDA executor's expert-parallel path, so both
// route a batch identically.
//
// The router GEMM is small (Qwen3-30B-A3B: 128 experts x 2048) and its batches from a few tokens to a few thousand:
//   gemv: launch_gemv_bf16, one streaming pass over the router weights, up to kGemvMaxRows rows;
//   mma:  one block per 16 experts x 16 (or 32) tokens, 8 warps over the hidden size in 32-wide steps, mma.sync
//         m16n8k16 with fragments loaded straight from global memory (16 bytes per lane: each lane's 8 consecutive
//         values of a row feed two MMAs, the same relabelling of k for x and the router, so the products summed are
//         exactly x[t, k] * w[e, k]); the warps' partial sums are added in warp order (deterministic, and a token's
//         logits do not depend on the other tokens). Its launch overlaps the kernel before (pdl.cuh): the block's
//         router rows are prefetched into L2 before it waits;
//   blas: cuBLASLt, past kMoeRouterMmaMaxTokens (where its large tiles win) and for any shape the others refuse.

#include <cstdint>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kExpertsPerBlock = 16;  // two n8 tiles
constexpr int kStepK = 32;            // hidden values per warp step: 4 lanes x 8
constexpr int kBatch = 4;             // steps whose loads are issued together

__device__ __forceinline__ void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// 8 values of row `row` from column k (zeros past the row count or the hidden size; hidden % 8 == 0).
__device__ __forceinline__ uint4 load8(const bf16* base, int32_t row, int32_t rows, int32_t k, int32_t hidden) {
    if (row >= rows || k >= hidden) return make_uint4(0, 0, 0, 0);
    return __ldg(reinterpret_cast<const uint4*>(base + size_t(row) * hidden + k));
}

/// kMTiles m16 tiles of tokens (blockIdx.y) x kExpertsPerBlock experts (blockIdx.x).
template <int kMTiles>
__global__ void __launch_bounds__(kWarps * 32) router_mma_kernel(const moe_router_params p) {
    constexpr int kTokens = 16 * kMTiles;
    __shared__ float partial[kWarps][kTokens][kExpertsPerBlock];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const int32_t e0 = blockIdx.x * kExpertsPerBlock, t0 = blockIdx.y * kTokens;
    const int32_t H = p.hidden;
    // The block's router rows into L2 while the kernel before finishes (weights: nothing earlier writes them).
    {
        const int32_t row_bytes = H * int32_t(sizeof(bf16));
        const int32_t lines = (row_bytes + 127) / 128;
        for (int32_t i = threadIdx.x; i < kExpertsPerBlock * lines; i += kWarps * 32) {
            const int32_t e = e0 + i / lines;
            if (e < p.num_experts) {
                const char* a = reinterpret_cast<const char*>(p.router_w + size_t(e) * H) + (i % lines) * 128;
                asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
            }
        }
    }
    detail::pdl_wait();  // the kernel before writes x
    detail::pdl_launch_dependents();

    float acc[kMTiles][2][4] = {};
    const int32_t steps = (H + kStepK - 1) / kStepK;
    for (int32_t s0 = warp; s0 < steps; s0 += kWarps * kBatch) {
        uint4 xa[kBatch][kMTiles][2], wb[kBatch][2];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int32_t k = (s0 + b * kWarps) * kStepK + t4 * 8;
#pragma unroll
            for (int m = 0; m < kMTiles; ++m) {
                xa[b][m][0] = load8(p.x, t0 + m * 16 + g, p.num_tokens, k, H);
                xa[b][m][1] = load8(p.x, t0 + m * 16 + g + 8, p.num_tokens, k, H);
            }
#pragma unroll
            for (int n = 0; n < 2; ++n) wb[b][n] = load8(p.router_w, e0 + n * 8 + g, p.num_experts, k, H);
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b)
#pragma unroll
            for (int m = 0; m < kMTiles; ++m)
#pragma unroll
                for (int n = 0; n < 2; ++n) {
                    // Lane (g, t4) holds values 8 t4 .. 8 t4 + 7 of the step: pairs 0, 1 play k = 2 t4 and 2 t4 + 8
                    // of the first MMA, pairs 2, 3 those of the second, for x and the router alike.
                    const uint4 lo = xa[b][m][0], hi = xa[b][m][1], w = wb[b][n];
                    mma_16816(acc[m][n], lo.x, hi.x, lo.y, hi.y, w.x, w.y);
                    mma_16816(acc[m][n], lo.z, hi.z, lo.w, hi.w, w.z, w.w);
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
        const int32_t t = t0 + r, e = e0 + c;
        if (t >= p.num_tokens || e >= p.num_experts) continue;
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum += partial[w][r][c];
        p.router_logits[size_t(t) * p.num_experts + e] = sum;
    }
}

bool aligned16(const void* a) { return reinterpret_cast<uintptr_t>(a) % 16 == 0; }

void mark(const moe_router_params& p, moe_stage stage) {
    if (p.mark != nullptr) p.mark(p.mark_context, stage);
}

moe_router_impl choose(const moe_router_params& p) {
    const bool aligned = aligned16(p.x) && aligned16(p.router_w);
    const bool gemv = aligned && gemv_bf16_supported(p.num_tokens, p.num_experts, p.hidden);
    const bool mma = aligned && p.hidden % 8 == 0 && p.hidden > 0;
    switch (p.impl) {
        case moe_router_impl::gemv:
            return gemv ? moe_router_impl::gemv : moe_router_impl::blas;
        case moe_router_impl::mma:
            return mma ? moe_router_impl::mma : moe_router_impl::blas;
        case moe_router_impl::blas:
            return moe_router_impl::blas;
        case moe_router_impl::automatic:
            break;
    }
    if (gemv) return moe_router_impl::gemv;
    if (mma && p.num_tokens <= kMoeRouterMmaMaxTokens) return moe_router_impl::mma;
    return moe_router_impl::blas;
}

void launch_router_mma(const moe_router_params& p, cudaStream_t stream) {
    const unsigned expert_blocks = unsigned((p.num_experts + kExpertsPerBlock - 1) / kExpertsPerBlock);
    // 16-token tiles while there are few of them (more blocks to stream the router); 32 past that (the router rows
    // read half as often).
    if (p.num_tokens <= 128)
        detail::launch_pdl(router_mma_kernel<1>, dim3(expert_blocks, unsigned((p.num_tokens + 15) / 16)),
                           dim3(kWarps * 32), 0, stream, p);
    else
        detail::launch_pdl(router_mma_kernel<2>, dim3(expert_blocks, unsigned((p.num_tokens + 31) / 32)),
                           dim3(kWarps * 32), 0, stream, p);
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
    launch_router_topk({.logits = p.router_logits,
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
                        .load_counts = p.load_counts},
                       stream);
}

}  // namespace zmoe::kernels
