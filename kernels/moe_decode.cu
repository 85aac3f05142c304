// The routed-expert block of a decode step of a few tokens (at most kMoeDecodeMaxTokens). Up to eight tokens run
// in ONE launch (moe_decode_one_kernel, described where it is defined: grid barriers between router, gate|up and
// down, down and the combine fused). A shape whose one-launch kernel would not fit (x, act and logits over 96 KB of
// shared memory) runs in three launches, with no permuted copies of the activations:
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
/// graph, one call), the one-launch kernel at 1 / 2 / 4 / 8 tokens 0.035-0.039 / 0.080-0.089 / 0.152-0.154 /
/// 0.332-0.338 ms against 0.075 / 0.120 / 0.186 ms on the grouped path (wgmma, 64-row groups) from 2 tokens on.
constexpr int32_t kDecodePathMaxTokens = 1;

/// Scratch layout: [the one-token kernel's barrier counter and blocks done (zero between launches) | num_unique |
/// unique slots [TK] | choices [TK][T] | blocks done (the fused router)].
constexpr int32_t kOneBarrierInts = 2;
struct scratch_view {
    int32_t* num_unique;
    int32_t* slots;
    int32_t* choices;
    int32_t* blocks_done;
    __device__ __host__ scratch_view(int32_t* s0, int32_t T, int32_t K)
        : num_unique(s0 + kOneBarrierInts),
          slots(num_unique + 1),
          choices(num_unique + 1 + T * K),
          blocks_done(num_unique + 1 + T * K + T * K * T) {}
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

// ---------------------------------------------------------------------------------------------------------
// One to eight tokens in one launch. Every block is resident at once (the grid is sized from the occupancy), so two
// grid barriers (a counter in the scratch, left at zero by the last block out) separate the phases instead of
// kernel boundaries:
//   0. with router_w: one warp per expert row (spread over the blocks), logits to router_logits; barrier;
//   1. every block reads the logits and runs the same softmax top-k (one warp per token): the slots and weights are
//      in each block's shared memory without another launch (with more than one token, every block also finds the
//      distinct slots of the step, ascending, and the choice of each token of each); block 0 writes topk_weights,
//      slot_ids and the load counts;
//   2. gate|up: one warp per (distinct slot, FFN column), grid-stride, the gate and up rows' 16-byte loads all in
//      flight and the warp's next item prefetched to L2; act[choice] = bf16(silu(gate) * up) for every token of
//      the slot; each warp then prefetches into L2 the down rows it will read, so the memory keeps streaming
//      through the barrier; barrier;
//   3. down: one warp per hidden row across the distinct slots; one token: act staged in shared memory and the y of
//      every choice rounded to bf16 and summed with its routing weight in top-k order in registers; more tokens:
//      act read through L2 and each (slot, token) sum rounded into shared memory, then summed per token in top-k
//      order. out is written once, no combine step. The same sums in the same order as the three-kernel path, so
//      the results are bit-identical.
// Measured (H200, Qwen3-30B-A3B shapes) it beats the grouped path at one token only: see kDecodePathMaxTokens.

constexpr int kOneThreads = 256;
constexpr int kOneWarps = kOneThreads / 32;
constexpr int kOneUnroll = 8;      // gate|up: 16-byte vectors per lane in flight per row (gate and up each)
constexpr int kOneDownGroup = 4;   // down: choices whose rows are loaded together
constexpr int kOneDownUnroll = 3;  // down: 16-byte vectors per lane per row in flight (768 / 8 / 32 = 3 at Qwen3)
constexpr int kOneMaxTopK = 16;    // one token: its choices' sums in registers
/// Most tokens the one-launch kernel takes (more run the three-kernel path; moe_use_decode_path chooses between
/// this and the grouped path by measurement).
constexpr int kOneMaxTokens = 8;
constexpr size_t kOneMaxSmem = 96u << 10;  // two blocks per multiprocessor

/// Streams a weight vector past L1 (each is read once).
__device__ __forceinline__ uint4 load_stream(const void* src) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(src));
    return v;
}

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }
__device__ __forceinline__ void prefetch_l2_keep(const void* p) {
    asm volatile("prefetch.global.L2::evict_last [%0];\n" ::"l"(p));
}

/// Prefetches bytes [0, n) from p into L2, 128-byte lines spread over the warp's lanes.
__device__ __forceinline__ void prefetch_row(const void* p, size_t n, int lane, bool keep) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (size_t o = size_t(lane) * 128; o < n; o += 32 * 128) keep ? prefetch_l2_keep(c + o) : prefetch_l2(c + o);
}

/// All blocks of the grid meet (every block is resident): arrivals count up in *counter; the target is
/// gridDim.x times the barrier's ordinal. Writes before it are visible after it.
__device__ __forceinline__ void grid_barrier(uint32_t* counter, uint32_t target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(counter, 1u);
        uint32_t seen;
        int64_t spins = 0;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
            if (++spins > (int64_t(1) << 24)) __trap();  // a block never arrived: fail loudly instead of hanging
        } while (seen < target);
        __threadfence();
    }
    __syncthreads();
}

/// kT >= num_tokens bounds the per-token accumulators (1, 2, 4 or 8).
template <int kT, int kPerLane>
__global__ void __launch_bounds__(kOneThreads, 2) moe_decode_one_kernel(const moe_decode_params p) {
    extern __shared__ __align__(16) unsigned char one_smem[];
    constexpr int kPairs = kT == 1 ? kOneMaxTopK : kMoeDecodeMaxPairs;
    constexpr int kUnroll = kT <= 2 ? kOneUnroll : kOneUnroll / 2;        // fewer loads in flight where more sums are
    constexpr int kGroupT = kT <= 2 ? kOneDownGroup : kOneDownGroup / 2;  // the same in down
    const int32_t T = p.num_tokens, K = p.top_k, H = p.hidden, I = p.inter, E = p.num_experts, TK = T * K;
    bf16* x_s = reinterpret_cast<bf16*>(one_smem);  // [T, hidden]
    bf16* act_s = x_s + size_t(T) * H;              // [top_k, inter], one token only
    float* logits_s = reinterpret_cast<float*>(act_s + (kT == 1 ? size_t(K) * I : 0));  // [T, experts]
    __shared__ int32_t slot_s[kPairs];                                                  // per choice t * top_k + j
    __shared__ float weight_s[kPairs];
    // More than one token: the distinct slots in ascending order, and per slot the choice of each token (-1: none).
    __shared__ int32_t uslot_s[kT == 1 ? 1 : kPairs];
    __shared__ int32_t uchoice_s[kT == 1 ? 1 : kPairs * kT];
    __shared__ int32_t first_s[kT == 1 ? 1 : kPairs];
    __shared__ float y_s[kT == 1 ? 1 : kOneWarps][kT == 1 ? 1 : kPairs];  // down: y per choice of the warp's row
    __shared__ int32_t num_unique_s;
    uint32_t* barrier = reinterpret_cast<uint32_t*>(p.scratch);  // [counter, blocks done]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int32_t G = gridDim.x;
    const int64_t gw = int64_t(warp) * G + blockIdx.x;  // warps numbered across blocks first: rows spread over SMs
    const int64_t W = int64_t(G) * kOneWarps;
    const bool fused_router = p.router_w != nullptr;
    const int32_t hvec = H / 8, ivec = I / 8;

    // The router rows depend on no earlier kernel: towards L2 while that kernel ends; so do the replica tables the
    // top-k reads (a prefetch into L2, the point of coherence, cannot see stale data).
    if (fused_router)
        for (int64_t e = gw; e < E; e += W)
            prefetch_row(p.router_w + size_t(e) * H, size_t(H) * sizeof(bf16), lane, false);
    if (warp == 0) {
        prefetch_row(p.replica_offsets, size_t(E + 1) * sizeof(int32_t), lane, false);
        prefetch_row(p.replica_slots, size_t(E) * sizeof(int32_t), lane, false);
    }
    detail::pdl_wait();  // x (and given logits, num_valid) come from the kernels before
    for (int32_t v = threadIdx.x; v < T * hvec; v += kOneThreads)
        reinterpret_cast<detail::bf16x8*>(x_s)[v] = reinterpret_cast<const detail::bf16x8*>(p.x)[v];
    __syncthreads();

    // 0. Router logits, one warp per expert (lanes over 16-byte vectors, as the batched route kernel sums).
    if (fused_router) {
        for (int64_t e = gw; e < E; e += W) {
            const auto* w = reinterpret_cast<const detail::bf16x8*>(p.router_w + size_t(e) * H);
            float acc[kT] = {};
            for (int32_t v0 = 0; v0 < hvec; v0 += 32 * kOneUnroll) {
                uint4 wv[kOneUnroll];
#pragma unroll
                for (int i = 0; i < kOneUnroll; ++i) {
                    const int32_t v = v0 + i * 32 + lane;
                    if (v < hvec) wv[i] = load_stream(w + v);
                }
#pragma unroll
                for (int i = 0; i < kOneUnroll; ++i) {
                    const int32_t v = v0 + i * 32 + lane;
                    if (v >= hvec) break;
                    float wf[8];
                    detail::load_f32x8(reinterpret_cast<const bf16*>(&wv[i]), wf);
#pragma unroll
                    for (int t = 0; t < kT; ++t) {
                        if (t >= T) break;
                        float xv[8];
                        detail::load_f32x8(x_s + size_t(t) * H + v * 8, xv);
#pragma unroll
                        for (int e8 = 0; e8 < 8; ++e8) acc[t] += wf[e8] * xv[e8];
                    }
                }
            }
#pragma unroll
            for (int t = 0; t < kT; ++t) {
                if (t >= T) break;
                const float y = detail::warp_sum(acc[t]);
                if (lane == 0) p.router_logits[size_t(t) * E + e] = y;
            }
        }
        grid_barrier(barrier, G);
    }

    // 1. Top-k in every block (the same logits, the same order: the same choices everywhere), one warp per token.
    for (int32_t i = threadIdx.x; i < T * E; i += kOneThreads) logits_s[i] = __ldcg(p.router_logits + i);
    if constexpr (kT > 1)
        for (int32_t i = threadIdx.x; i < kPairs * kT; i += kOneThreads) uchoice_s[i] = -1;
    __syncthreads();
    if (warp < T) {
        const int32_t t = warp;
        int32_t my_id;
        float my_weight;
        detail::warp_softmax_topk<kPerLane>(logits_s + size_t(t) * E, E, K, p.renormalize, &my_id, &my_weight);
        if (lane < K) {
            const int32_t a = t * K + lane;
            const int32_t first = p.replica_offsets[my_id], n = p.replica_offsets[my_id + 1] - first;
            const int32_t slot = p.replica_slots[first + t % n];
            slot_s[a] = slot;
            weight_s[a] = my_weight;
            if (blockIdx.x == 0) {
                p.topk_weights[a] = my_weight;
                p.slot_ids[a] = slot;
                const int32_t num_valid = p.num_valid != nullptr ? *p.num_valid : T;
                if (t < num_valid && p.expert_counts != nullptr) atomicAdd(&p.expert_counts[my_id], 1);
            }
        }
    }
    __syncthreads();
    int32_t U = K;  // distinct slots
    if constexpr (kT > 1) {
        // A choice is its slot's first if no earlier choice has the slot; its slot's rank is the number of first
        // choices with a smaller slot (as the three-kernel path's route kernel).
        const int32_t a = threadIdx.x;
        bool first = false;
        if (a < TK) {
            first = true;
            for (int32_t b = 0; b < a; ++b) first = first && slot_s[b] != slot_s[a];
            first_s[a] = first;
        }
        const int32_t n = __syncthreads_count(first);
        if (a < TK) {
            int32_t rank = 0;
            for (int32_t b = 0; b < TK; ++b) rank += first_s[b] && slot_s[b] < slot_s[a];
            if (first) uslot_s[rank] = slot_s[a];
            uchoice_s[rank * T + a / K] = a;
        }
        if (a == 0) num_unique_s = n;
        __syncthreads();
        U = num_unique_s;
    }
    auto slot_of = [&](int32_t u) { return kT == 1 ? slot_s[u] : uslot_s[u]; };
    auto choice_of = [&](int32_t u, int32_t t) { return kT == 1 ? u : uchoice_s[u * T + t]; };

    // 2. gate|up: item = (distinct slot, FFN column), grid-stride; every row read once for all its tokens.
    const int64_t items = int64_t(U) * I;
    auto gate_row = [&](int64_t item) {
        return p.w_gate_up + (size_t(slot_of(int32_t(item / I))) * 2 * I + size_t(item % I)) * H;
    };
    for (int64_t item = gw; item < items; item += W) {
        if (item + W < items) {  // the next item's rows towards L2 while this one's loads are out
            const bf16* g_next = gate_row(item + W);
            prefetch_row(g_next, size_t(H) * sizeof(bf16), lane, false);
            prefetch_row(g_next + size_t(I) * H, size_t(H) * sizeof(bf16), lane, false);
        }
        const int32_t u = int32_t(item / I), c = int32_t(item % I);
        int32_t choice[kT];
#pragma unroll
        for (int t = 0; t < kT; ++t) choice[t] = t < T ? choice_of(u, t) : -1;
        const bf16* g_row = gate_row(item);
        const auto* gr = reinterpret_cast<const detail::bf16x8*>(g_row);
        const auto* ur = reinterpret_cast<const detail::bf16x8*>(g_row + size_t(I) * H);
        float ag[kT] = {}, au[kT] = {};
        for (int32_t v0 = 0; v0 < hvec; v0 += 32 * kUnroll) {
            uint4 gv[kUnroll], uv[kUnroll];
#pragma unroll
            for (int i = 0; i < kUnroll; ++i) {
                const int32_t v = v0 + i * 32 + lane;
                if (v < hvec) gv[i] = load_stream(gr + v), uv[i] = load_stream(ur + v);
            }
#pragma unroll
            for (int i = 0; i < kUnroll; ++i) {
                const int32_t v = v0 + i * 32 + lane;
                if (v >= hvec) break;
                float g[8], up[8];
                detail::load_f32x8(reinterpret_cast<const bf16*>(&gv[i]), g);
                detail::load_f32x8(reinterpret_cast<const bf16*>(&uv[i]), up);
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
            if (lane == 0) p.act[size_t(choice[t]) * I + c] = __float2bfloat16(g / (1.f + __expf(-g)) * up);
        }
    }
    // The down rows this warp reads next, towards L2 (kept there) while the other warps finish gate|up.
    for (int64_t h = gw; h < H; h += W)
        for (int32_t u = 0; u < U; ++u)
            prefetch_row(p.w_down + (size_t(slot_of(u)) * H + h) * I, size_t(I) * sizeof(bf16), lane, true);
    grid_barrier(barrier, fused_router ? 2 * G : G);
    detail::pdl_launch_dependents();  // every block is resident and past its last barrier

    // 3. down + combine: one warp per hidden row across the distinct slots.
    if constexpr (kT == 1) {
        for (int32_t v = threadIdx.x; v < K * ivec; v += kOneThreads)
            reinterpret_cast<uint4*>(act_s)[v] = __ldcg(reinterpret_cast<const uint4*>(p.act) + v);
        __syncthreads();
        for (int64_t h = gw; h < H; h += W) {
            float acc[kOneMaxTopK];
#pragma unroll
            for (int j = 0; j < kOneMaxTopK; ++j) acc[j] = 0.f;
            for (int32_t v0 = 0; v0 < ivec; v0 += 32 * kOneDownUnroll) {
#pragma unroll
                for (int g0 = 0; g0 < kOneMaxTopK; g0 += kOneDownGroup) {
                    if (g0 >= K) break;
                    uint4 wv[kOneDownGroup][kOneDownUnroll];
#pragma unroll
                    for (int jj = 0; jj < kOneDownGroup; ++jj) {
                        const int32_t j = g0 + jj;
                        const bf16* row = p.w_down + (size_t(slot_s[j < K ? j : 0]) * H + h) * I;
#pragma unroll
                        for (int i = 0; i < kOneDownUnroll; ++i) {
                            const int32_t v = v0 + i * 32 + lane;
                            if (j < K && v < ivec) wv[jj][i] = load_stream(reinterpret_cast<const uint4*>(row) + v);
                        }
                    }
#pragma unroll
                    for (int i = 0; i < kOneDownUnroll; ++i) {
                        const int32_t v = v0 + i * 32 + lane;
                        if (v >= ivec) break;
#pragma unroll
                        for (int jj = 0; jj < kOneDownGroup; ++jj) {
                            const int32_t j = g0 + jj;
                            if (j >= K) break;
                            float wf[8], av[8];
                            detail::load_f32x8(reinterpret_cast<const bf16*>(&wv[jj][i]), wf);
                            detail::load_f32x8(act_s + size_t(j) * I + v * 8, av);
#pragma unroll
                            for (int e = 0; e < 8; ++e) acc[g0 + jj] += wf[e] * av[e];
                        }
                    }
                }
            }
            float out = 0.f;
#pragma unroll
            for (int j = 0; j < kOneMaxTopK; ++j) {
                if (j >= K) break;
                const float y = __bfloat162float(__float2bfloat16(detail::warp_sum(acc[j])));
                out += weight_s[j] * y;
            }
            if (lane == 0) p.out[h] = __float2bfloat16(out);
        }
    } else {
        // act (written by other blocks) is read through L2; each (slot, token) sum is rounded into y_s, then lane t
        // sums token t's choices in top-k order.
        const auto* act = reinterpret_cast<const uint4*>(p.act);
        for (int64_t h = gw; h < H; h += W) {
            for (int32_t u0 = 0; u0 < U; u0 += kGroupT) {
                int32_t choice[kGroupT][kT];
#pragma unroll
                for (int jj = 0; jj < kGroupT; ++jj)
#pragma unroll
                    for (int t = 0; t < kT; ++t) choice[jj][t] = u0 + jj < U && t < T ? choice_of(u0 + jj, t) : -1;
                float acc[kGroupT][kT] = {};
                for (int32_t v0 = 0; v0 < ivec; v0 += 32 * kOneDownUnroll) {
                    uint4 wv[kGroupT][kOneDownUnroll];
#pragma unroll
                    for (int jj = 0; jj < kGroupT; ++jj) {
                        const int32_t u = u0 + jj;
                        const bf16* row = p.w_down + (size_t(slot_of(u < U ? u : 0)) * H + h) * I;
#pragma unroll
                        for (int i = 0; i < kOneDownUnroll; ++i) {
                            const int32_t v = v0 + i * 32 + lane;
                            if (u < U && v < ivec) wv[jj][i] = load_stream(reinterpret_cast<const uint4*>(row) + v);
                        }
                    }
#pragma unroll
                    for (int i = 0; i < kOneDownUnroll; ++i) {
                        const int32_t v = v0 + i * 32 + lane;
                        if (v >= ivec) break;
#pragma unroll
                        for (int jj = 0; jj < kGroupT; ++jj) {
                            if (u0 + jj >= U) break;
                            float wf[8];
                            detail::load_f32x8(reinterpret_cast<const bf16*>(&wv[jj][i]), wf);
#pragma unroll
                            for (int t = 0; t < kT; ++t) {
                                if (choice[jj][t] < 0) continue;
                                const uint4 a = __ldcg(act + size_t(choice[jj][t]) * ivec + v);
                                float av[8];
                                detail::load_f32x8(reinterpret_cast<const bf16*>(&a), av);
#pragma unroll
                                for (int e = 0; e < 8; ++e) acc[jj][t] += wf[e] * av[e];
                            }
                        }
                    }
                }
#pragma unroll
                for (int jj = 0; jj < kGroupT; ++jj)
#pragma unroll
                    for (int t = 0; t < kT; ++t) {
                        if (choice[jj][t] < 0) continue;
                        const float y = detail::warp_sum(acc[jj][t]);
                        if (lane == 0) y_s[warp][choice[jj][t]] = __bfloat162float(__float2bfloat16(y));
                    }
            }
            __syncwarp();
            if (lane < T) {
                float out = 0.f;
                for (int32_t j = 0; j < K; ++j) out += weight_s[lane * K + j] * y_s[warp][lane * K + j];
                p.out[size_t(lane) * H + h] = __float2bfloat16(out);
            }
            __syncwarp();
        }
    }

    // The last block out leaves the barrier counter zero for the next launch.
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(barrier + 1, 1u) == uint32_t(G) - 1) {
        barrier[0] = 0;
        barrier[1] = 0;
    }
}

/// Dynamic shared memory of the one-launch kernel: x [T, hidden] bf16, act [top_k, inter] bf16 (one token only),
/// logits [T, experts] fp32.
size_t one_launch_smem(const moe_decode_params& p) {
    return size_t(p.num_tokens) * p.hidden * sizeof(bf16) +
           (p.num_tokens == 1 ? size_t(p.top_k) * p.inter * sizeof(bf16) : 0) +
           size_t(p.num_tokens) * p.num_experts * sizeof(float);
}

bool one_launch_supported(const moe_decode_params& p) {
    return p.num_tokens <= kOneMaxTokens && (p.num_tokens > 1 || p.top_k <= kOneMaxTopK) &&
           one_launch_smem(p) <= kOneMaxSmem;
}

template <int kT>
void launch_one_launch(const moe_decode_params& p, cudaStream_t stream) {
    const size_t smem = one_launch_smem(p);
    DISPATCH_EXPERTS_PER_LANE(p.num_experts, kPerLane, {
        const auto kernel = moe_decode_one_kernel<kT, kPerLane>;
        ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kOneMaxSmem)));
        int device = 0, sms = 0, per_sm = 0;
        ZMOE_CUDA_CHECK(cudaGetDevice(&device));
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        ZMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kOneThreads, smem));
        ZMOE_KERNEL_REQUIRE(per_sm >= 1, "moe_decode: the one-launch kernel does not fit a multiprocessor");
        // Enough warps for the widest phase, never more blocks than fit at once (the grid barriers need them all).
        const int64_t tk = int64_t(p.num_tokens) * p.top_k;
        const int64_t rows = std::max<int64_t>({int64_t(p.num_experts), tk * p.inter, p.hidden});
        const int64_t blocks = std::min<int64_t>((rows + kOneWarps - 1) / kOneWarps, int64_t(per_sm) * sms);
        detail::launch_pdl(kernel, dim3(uint32_t(blocks)), dim3(kOneThreads), smem, stream, p);
    });
}

void launch_one(const moe_decode_params& p, cudaStream_t stream) {
    if (p.num_tokens == 1)
        launch_one_launch<1>(p, stream);
    else if (p.num_tokens == 2)
        launch_one_launch<2>(p, stream);
    else if (p.num_tokens <= 4)
        launch_one_launch<4>(p, stream);
    else
        launch_one_launch<8>(p, stream);
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
    return kOneBarrierInts + 1 + tk + tk * num_tokens + 1;
}

void launch_moe_decode(const moe_decode_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(moe_decode_supported(p.num_tokens, p.top_k, p.num_experts, p.hidden, p.inter),
                        "moe_decode: 1..8 tokens, tokens x top_k <= 64, top_k <= 16, <= 512 experts, hidden and "
                        "inter multiples of 8");
    if (one_launch_supported(p)) {
        launch_one(p, stream);
        return;
    }
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
