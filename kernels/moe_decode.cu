// The routed-expert block of a decode step of a few tokens (at most kMoeDecodeMaxTokens), in three launches and
// with no permuted copies of the activations:
//   0. with router_w, the router GEMV is part of launch 1: one warp per expert over num_experts / 8 blocks (x staged
//      in shared memory) writes the fp32 logits, and the last block to finish (a ticket counter in the scratch) goes
//      on with the routing;
//   1. route (one block): softmax top-k per token (one warp per token), the replica slot of each choice, the EPLB
//      load counts, and the distinct slots of the step in ascending order with, for each, the choice of every
//      token that picked it (-1 where a token did not);
//   2. gate|up (one block per distinct slot and four FFN columns, one warp each): every gate and up row is read
//      once, all its 16-byte loads in flight together, and dotted with the x of each token of that slot (x in
//      shared memory); act[choice] = bf16(silu(gate) * up);
//   3. down + combine (one block per kDownRows rows of the hidden size; each warp kDownItems (slot, row) items at
//      once): every down row is read once per slot and dotted with the act of each choice of that slot; y = bf16(.)
//      in shared memory; then out[t] = bf16(sum_j weights[t, j] * y[t, j]) in top-k order.
// The GEMV kernels are instantiated for 1, 2, 4 and 8 tokens, so a one-token step keeps few registers per thread
// and many warps per multiprocessor (the loads of many rows in flight are what streams the weights).
// The three kernels are launched programmatically dependent (pdl.cuh): gate|up's blocks stage x while the routing
// finishes, and down's blocks put their first weight rows' loads in flight before waiting for gate|up's act (the
// slots they read were written by the routing, complete before gate|up's blocks passed their own wait).
// Every dot product is summed in a fixed order (lanes, then a warp reduction), so a token's result does not depend
// on which other tokens share the batch.

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/dispatch.cuh"
#include "kernels/pdl.cuh"
#include "kernels/warp_topk.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;      // the route kernel: one warp per token
constexpr int kGemvThreads = 128;  // the gate|up and down kernels: four warps
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int kDownRows = 2;      // hidden rows per down block
constexpr int kDownItems = 4;     // (slot, row) items per warp at once
constexpr int kGateUpUnroll = 8;  // 16-byte vectors per lane in flight, per row (gate and up each)
// FFN columns per gate|up warp, in turn (2 measured slower at one token on H200: 0.045-0.046 ms against 0.044).
constexpr int kGateUpCols = 1;
constexpr int kDownUnroll = 4;
/// Most tokens moe_use_decode_path sends here: measured on H200 at Qwen3-30B-A3B shapes (the whole layer, CUDA
/// graph), 1 / 2 / 4 / 8 tokens 0.047 / 0.081 / 0.139 / 0.373 ms here against 0.062 / 0.077 / 0.120 / 0.183 ms on
/// the grouped path with the wgmma kernel (64-row groups).
constexpr int32_t kDecodePathMaxTokens = 1;

/// Scratch layout: [num_unique | unique slots [TK] | choices [TK][T] | blocks done (the fused router)].
struct scratch_view {
    int32_t* num_unique;
    int32_t* slots;
    int32_t* choices;
    int32_t* blocks_done;
    __device__ __host__ scratch_view(int32_t* s, int32_t T, int32_t K)
        : num_unique(s), slots(s + 1), choices(s + 1 + T * K), blocks_done(s + 1 + T * K + T * K * T) {}
};

constexpr int kRouterWarps = kThreads / 32;  // the fused router: experts per block, one warp each

/// The fused router's part: logits[t, e] = fp32(x[t] . router_w[e]) for the kRouterWarps experts of this block
/// (every warp one expert, its row loaded whole once, lanes over 16-byte vectors), then a ticket: true in the one
/// block that finishes last, which then sees every block's logits.
__device__ bool router_logits_then_last(const moe_decode_params& p) {
    extern __shared__ __align__(16) unsigned char router_smem[];
    bf16* x_s = reinterpret_cast<bf16*>(router_smem);  // [T, hidden]: every warp dots its row with every token
    const int32_t T = p.num_tokens, H = p.hidden;
    for (int32_t v = threadIdx.x; v < T * H / 8; v += kThreads)
        reinterpret_cast<detail::bf16x8*>(x_s)[v] = reinterpret_cast<const detail::bf16x8*>(p.x)[v];
    __syncthreads();
    const int lane = threadIdx.x % 32;
    const int32_t e = blockIdx.x * kRouterWarps + threadIdx.x / 32;
    if (e < p.num_experts) {
        const auto* w = reinterpret_cast<const detail::bf16x8*>(p.router_w + size_t(e) * H);
        float acc[kMoeDecodeMaxTokens] = {};
        const int32_t nvec = H / 8;
        for (int32_t v0 = 0; v0 < nvec; v0 += 32 * kGateUpUnroll) {
            detail::bf16x8 wv[kGateUpUnroll];  // all of this lane's loads of the row in flight together
#pragma unroll
            for (int i = 0; i < kGateUpUnroll; ++i) {
                const int32_t v = v0 + i * 32 + lane;
                if (v < nvec) wv[i] = w[v];
            }
#pragma unroll
            for (int i = 0; i < kGateUpUnroll; ++i) {
                const int32_t v = v0 + i * 32 + lane;
                if (v >= nvec) break;
                float wf[8];
                detail::load_f32x8(reinterpret_cast<const bf16*>(&wv[i]), wf);
#pragma unroll
                for (int t = 0; t < kMoeDecodeMaxTokens; ++t) {
                    if (t >= T) break;
                    float xv[8];
                    detail::load_f32x8(x_s + size_t(t) * H + v * 8, xv);
#pragma unroll
                    for (int e8 = 0; e8 < 8; ++e8) acc[t] += wf[e8] * xv[e8];
                }
            }
        }
#pragma unroll
        for (int t = 0; t < kMoeDecodeMaxTokens; ++t) {
            if (t >= T) break;
            const float y = detail::warp_sum(acc[t]);
            if (lane == 0) p.router_logits[size_t(t) * p.num_experts + e] = y;
        }
    }
    __shared__ bool last;
    __threadfence();  // this block's logits are visible before its ticket is
    __syncthreads();
    const scratch_view sv(p.scratch, T, p.top_k);
    if (threadIdx.x == 0) {
        last = atomicAdd(sv.blocks_done, 1) == int32_t(gridDim.x) - 1;
        if (last) *sv.blocks_done = 0;  // ready for the next launch (the launcher also zeroes it first)
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

template <int kPerLane, bool kFusedRouter>
__global__ void __launch_bounds__(kThreads) moe_decode_route_kernel(const moe_decode_params p) {
    detail::pdl_wait();  // x (and the given logits) come from the kernels before
    detail::pdl_launch_dependents();
    if constexpr (kFusedRouter) {
        if (!router_logits_then_last(p)) return;
    }
    __shared__ int32_t slot_s[kMoeDecodeMaxPairs];
    __shared__ int32_t first_s[kMoeDecodeMaxPairs];
    const int32_t T = p.num_tokens, K = p.top_k, TK = T * K;
    const scratch_view sv(p.scratch, T, K);
    for (int32_t i = threadIdx.x; i < TK * T; i += kThreads) sv.choices[i] = -1;
    const int32_t num_valid = p.num_valid != nullptr ? *p.num_valid : T;

    const int lane = threadIdx.x % 32, t = threadIdx.x / 32;
    if (t < T) {
        int32_t my_id;  // lane j: the j-th choice, as in router_topk_kernel
        float my_weight;
        detail::warp_softmax_topk<kPerLane>(p.router_logits + size_t(t) * p.num_experts, p.num_experts, K,
                                            p.renormalize, &my_id, &my_weight);
        if (lane < K) {
            const int32_t a = t * K + lane;
            const int32_t first = p.replica_offsets[my_id], n = p.replica_offsets[my_id + 1] - first;
            const int32_t slot = p.replica_slots[first + t % n];
            p.topk_weights[a] = my_weight;
            p.slot_ids[a] = slot;
            slot_s[a] = slot;
            if (t < num_valid && p.expert_counts != nullptr) atomicAdd(&p.expert_counts[my_id], 1);
        }
    }
    __syncthreads();
    // Distinct slots, ascending: a choice is its slot's first if no earlier choice has the slot; its slot's rank is
    // the number of first choices with a smaller slot.
    const int32_t a = threadIdx.x;
    bool first = false;
    if (a < TK) {
        first = true;
        for (int32_t b = 0; b < a; ++b) first = first && slot_s[b] != slot_s[a];
        first_s[a] = first;
    }
    const int32_t num_unique = __syncthreads_count(first);
    if (a < TK) {
        int32_t rank = 0;
        for (int32_t b = 0; b < TK; ++b) rank += first_s[b] && slot_s[b] < slot_s[a];
        if (first) sv.slots[rank] = slot_s[a];
        sv.choices[rank * T + a / K] = a;
    }
    if (a == 0) *sv.num_unique = num_unique;
}

/// One warp per FFN column j (kGateUpCols of them in turn) of one distinct slot: the gate and up rows are loaded whole
/// (16-byte vectors, all in
/// flight at once) and dotted with the x of each token of the slot. kT >= num_tokens bounds the accumulators.
template <int kT>
__global__ void __launch_bounds__(kGemvThreads) moe_decode_gate_up_kernel(const moe_decode_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* x_s = reinterpret_cast<bf16*>(smem);  // [T, hidden]
    const int32_t T = p.num_tokens, K = p.top_k, H = p.hidden;
    const scratch_view sv(p.scratch, T, K);
    const int32_t u = blockIdx.x;
    // x is complete before the routing kernel passed its wait: stage it while the routing finishes.
    for (int32_t v = threadIdx.x; v < T * H / 8; v += kGemvThreads)
        reinterpret_cast<detail::bf16x8*>(x_s)[v] = reinterpret_cast<const detail::bf16x8*>(p.x)[v];
    detail::pdl_wait();  // the routing's slots and choices
    detail::pdl_launch_dependents();
    if (u >= *sv.num_unique) return;
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int32_t choice[kT];
#pragma unroll
    for (int t = 0; t < kT; ++t) choice[t] = t < T ? sv.choices[u * T + t] : -1;
    const int32_t nvec = H / 8;
    const bf16* w = p.w_gate_up + size_t(sv.slots[u]) * 2 * p.inter * H;
    // kGateUpCols columns per warp, one after the other (fewer blocks: one wave, room left for down's blocks).
    for (int32_t c = 0; c < kGateUpCols; ++c) {
        const int32_t j = (blockIdx.y * kGateUpCols + c) * kGemvWarps + warp;
        if (j >= p.inter) return;
        const auto* g_row = reinterpret_cast<const detail::bf16x8*>(w + size_t(j) * H);
        const auto* u_row = reinterpret_cast<const detail::bf16x8*>(w + size_t(p.inter + j) * H);
        float ag[kT] = {}, au[kT] = {};
        for (int32_t v0 = 0; v0 < nvec; v0 += 32 * kGateUpUnroll) {
            detail::bf16x8 gv[kGateUpUnroll], uv[kGateUpUnroll];
#pragma unroll
            for (int i = 0; i < kGateUpUnroll; ++i) {
                const int32_t v = v0 + i * 32 + lane;
                if (v < nvec) gv[i] = g_row[v], uv[i] = u_row[v];
            }
#pragma unroll
            for (int i = 0; i < kGateUpUnroll; ++i) {
                const int32_t v = v0 + i * 32 + lane;
                if (v >= nvec) break;
                float g[8], up[8];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 gf = __bfloat1622float2(gv[i].h[e]), uf = __bfloat1622float2(uv[i].h[e]);
                    g[2 * e] = gf.x, g[2 * e + 1] = gf.y, up[2 * e] = uf.x, up[2 * e + 1] = uf.y;
                }
#pragma unroll
                for (int t = 0; t < kT; ++t) {
                    if (choice[t] < 0) continue;
                    float xv[8];
                    detail::load_f32x8(x_s + size_t(t) * H + v * 8, xv);
#pragma unroll
                    for (int e = 0; e < 8; ++e) ag[t] += g[e] * xv[e], au[t] += up[e] * xv[e];
                }
            }
        }
#pragma unroll
        for (int t = 0; t < kT; ++t) {
            if (choice[t] < 0) continue;
            const float g = detail::warp_sum(ag[t]), up = detail::warp_sum(au[t]);
            if (lane == 0) p.act[size_t(choice[t]) * p.inter + j] = __float2bfloat16(g / (1.f + __expf(-g)) * up);
        }
    }
}

/// kDownRows rows of the hidden size per block; each warp takes kDownItems (slot, row) items at once (their down
/// rows' loads all in flight), then the block combines its rows for every token.
template <int kT>
__global__ void __launch_bounds__(kGemvThreads) moe_decode_down_kernel(const moe_decode_params p) {
    __shared__ float y_s[kMoeDecodeMaxPairs][kDownRows];
    const int32_t T = p.num_tokens, K = p.top_k, H = p.hidden, I = p.inter;
    const scratch_view sv(p.scratch, T, K);
    const int32_t num_items = *sv.num_unique * kDownRows;
    const int32_t h0 = blockIdx.x * kDownRows;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int32_t nvec = I / 8;
    for (int32_t base = warp * kDownItems; base < num_items; base += kGemvWarps * kDownItems) {
        int32_t choice[kDownItems][kT];
        const detail::bf16x8* rows[kDownItems];
        bool live[kDownItems];
#pragma unroll
        for (int it = 0; it < kDownItems; ++it) {
            const int32_t item = base + it, u = item / kDownRows, h = h0 + item % kDownRows;
            live[it] = item < num_items && h < H;
            rows[it] = live[it] ? reinterpret_cast<const detail::bf16x8*>(p.w_down + (size_t(sv.slots[u]) * H + h) * I)
                                : nullptr;
#pragma unroll
            for (int t = 0; t < kT; ++t) choice[it][t] = live[it] && t < T ? sv.choices[u * T + t] : -1;
        }
        float acc[kDownItems][kT] = {};
        for (int32_t v0 = 0; v0 < nvec; v0 += 32 * kDownUnroll) {
            detail::bf16x8 wv[kDownItems][kDownUnroll];
#pragma unroll
            for (int it = 0; it < kDownItems; ++it)
#pragma unroll
                for (int i = 0; i < kDownUnroll; ++i) {
                    const int32_t v = v0 + i * 32 + lane;
                    if (live[it] && v < nvec) wv[it][i] = rows[it][v];
                }
            detail::pdl_wait();  // gate|up's act (a no-op after the first); the loads above are in flight
#pragma unroll
            for (int i = 0; i < kDownUnroll; ++i) {
                const int32_t v = v0 + i * 32 + lane;
                if (v >= nvec) break;
#pragma unroll
                for (int it = 0; it < kDownItems; ++it) {
                    if (!live[it]) continue;
                    float wf[8];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float2 f = __bfloat1622float2(wv[it][i].h[e]);
                        wf[2 * e] = f.x, wf[2 * e + 1] = f.y;
                    }
#pragma unroll
                    for (int t = 0; t < kT; ++t) {
                        if (choice[it][t] < 0) continue;
                        float av[8];
                        detail::load_f32x8(p.act + size_t(choice[it][t]) * I + v * 8, av);
#pragma unroll
                        for (int e = 0; e < 8; ++e) acc[it][t] += wf[e] * av[e];
                    }
                }
            }
        }
#pragma unroll
        for (int it = 0; it < kDownItems; ++it)
#pragma unroll
            for (int t = 0; t < kT; ++t) {
                if (choice[it][t] < 0) continue;
                const float y = detail::warp_sum(acc[it][t]);
                if (lane == 0) y_s[choice[it][t]][(base + it) % kDownRows] = __bfloat162float(__float2bfloat16(y));
            }
    }
    detail::pdl_wait();  // on every path (a warp without items)
    detail::pdl_launch_dependents();
    __syncthreads();
    for (int32_t i = threadIdx.x; i < T * kDownRows; i += kGemvThreads) {
        const int32_t t = i / kDownRows, r = i % kDownRows, h = h0 + r;
        if (h >= H) continue;
        float acc = 0.f;
        for (int32_t j = 0; j < K; ++j) acc += p.topk_weights[t * K + j] * y_s[t * K + j][r];
        p.out[size_t(t) * H + h] = __float2bfloat16(acc);
    }
}

template <int kT>
void launch_gemvs(const moe_decode_params& p, cudaStream_t stream) {
    const int32_t tk = p.num_tokens * p.top_k;
    const size_t x_bytes = size_t(p.num_tokens) * p.hidden * sizeof(bf16);
    if (x_bytes > 48 * 1024)
        ZMOE_CUDA_CHECK(cudaFuncSetAttribute(moe_decode_gate_up_kernel<kT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(x_bytes)));
    constexpr int kColsPerBlock = kGemvWarps * kGateUpCols;
    detail::launch_pdl(moe_decode_gate_up_kernel<kT>, dim3(tk, (p.inter + kColsPerBlock - 1) / kColsPerBlock),
                       dim3(kGemvThreads), x_bytes, stream, p);
    detail::launch_pdl(moe_decode_down_kernel<kT>, dim3((p.hidden + kDownRows - 1) / kDownRows), dim3(kGemvThreads), 0,
                       stream, p);
}

}  // namespace

bool moe_decode_supported(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t hidden, int32_t inter) {
    return num_tokens >= 1 && num_tokens <= kMoeDecodeMaxTokens && top_k >= 1 && top_k <= 16 &&
           num_tokens * top_k <= kMoeDecodeMaxPairs && num_experts >= top_k && num_experts <= 512 && hidden % 8 == 0 &&
           inter % 8 == 0 && hidden > 0 && inter > 0;
}

bool moe_use_decode_path(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t hidden, int32_t inter) {
    return num_tokens <= kDecodePathMaxTokens && moe_decode_supported(num_tokens, top_k, num_experts, hidden, inter);
}

size_t moe_decode_scratch_ints(int32_t num_tokens, int32_t top_k) {
    const size_t tk = size_t(num_tokens) * top_k;
    return 1 + tk + tk * num_tokens + 1;
}

void launch_moe_decode(const moe_decode_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(moe_decode_supported(p.num_tokens, p.top_k, p.num_experts, p.hidden, p.inter),
                        "moe_decode: 1..8 tokens, tokens x top_k <= 64, top_k <= 16, <= 512 experts, hidden and "
                        "inter multiples of 8");
    if (p.router_w != nullptr) {
        // The router GEMV fused in: one warp per expert over as many blocks, the last block to finish routes.
        const scratch_view sv(p.scratch, p.num_tokens, p.top_k);
        ZMOE_CUDA_CHECK(cudaMemsetAsync(sv.blocks_done, 0, sizeof(int32_t), stream));
        const int32_t blocks = (p.num_experts + kRouterWarps - 1) / kRouterWarps;
        const size_t x_bytes = size_t(p.num_tokens) * p.hidden * sizeof(bf16);
        DISPATCH_EXPERTS_PER_LANE(p.num_experts, kPerLane, {
            if (x_bytes > 48 * 1024)
                ZMOE_CUDA_CHECK(cudaFuncSetAttribute(moe_decode_route_kernel<kPerLane, true>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(x_bytes)));
            detail::launch_pdl(moe_decode_route_kernel<kPerLane, true>, dim3(blocks), dim3(kThreads), x_bytes, stream,
                               p);
        });
    } else {
        DISPATCH_EXPERTS_PER_LANE(
            p.num_experts, kPerLane,
            detail::launch_pdl(moe_decode_route_kernel<kPerLane, false>, dim3(1), dim3(kThreads), 0, stream, p));
    }
    if (p.num_tokens == 1)
        launch_gemvs<1>(p, stream);
    else if (p.num_tokens == 2)
        launch_gemvs<2>(p, stream);
    else if (p.num_tokens <= 4)
        launch_gemvs<4>(p, stream);
    else
        launch_gemvs<8>(p, stream);
}

}  // namespace zmoe::kernels
