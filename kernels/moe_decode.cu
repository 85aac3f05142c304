// The routed-expert block of a decode step of a few tokens (at most kMoeDecodeMaxTokens) in ONE launch, with no
// permuted copies of the activations. Every block of the grid is resident at once (the grid is sized from the
// occupancy; two such launches on concurrent streams could each hold part of the GPU and wait for ever, so callers
// keep them on one stream), so two grid barriers (a counter in the scratch, left at zero by the last block out)
// separate the phases instead of kernel boundaries; a barrier that waits implausibly long traps instead of hanging:
//   0. with router_w: one warp per expert row (spread over the blocks; one token: x loaded beside the row), logits
//      to router_logits, the replica tables copied to shared memory meanwhile; barrier;
//   1. every block reads the logits and runs the same softmax top-k (one warp per token, each choice by two redux
//      instructions, the replica lookups in shared memory): the slots and weights are
//      in each block's shared memory without another launch (with more than one token, every block also finds the
//      distinct slots of the step, ascending, and the choice of each token of each); block 0 writes topk_weights,
//      slot_ids and the load counts;
//   2. gate|up: one warp per (distinct slot, FFN column), the whole rounds of the grid's warps dealt out and the
//      rest taken from a counter, the gate and up rows' 16-byte loads all in flight;
//      act[choice] = bf16(silu(gate) * up) for every token of the slot (one token: then the first choices' vectors
//      of the warp's down row are loaded into registers, to arrive during the barrier); barrier;
//   3. down: one warp per hidden row across the distinct slots; one token: act staged in shared memory and the y of
//      every choice rounded to bf16 and summed with its routing weight in top-k order in registers; more tokens:
//      act read through L2 and each (slot, token) sum rounded into shared memory, then summed per token in top-k
//      order. out is written once: no combine step, no atomics.
// One token with shared experts (shared_inter > 0; DeepSeek's ungated ones): phase 2 deals the shared gate|up
// columns out after the routed (slot, column) items and writes their act after the routed act; phase 3 adds, per
// hidden row, the shared down row's product to the routed sum. The arithmetic is that of the separate launches the
// CUDA executor runs otherwise (launch_gemv_bf16 gate|up, launch_silu_mul, launch_gemv_bf16 down with the routed out
// as its bias), so the result is the same bit for bit:
//   - gate|up: a lane sums its 16-byte vectors lane, lane + 32, ... in ascending order, 8 elements each in order,
//     then detail::warp_sum: the GEMV's order (its lane j reads chunks j, j + 32, ...; the same warp_sum). The gate
//     and up sums are rounded to BF16 (the GEMV's BF16 output), then act = bf16(g / (1 + __expf(-g)) * u) in fp32,
//     launch_silu_mul's expression;
//   - down: the same lane order over the shared row, warp_sum, rounded to BF16 (the GEMV's product before its bias);
//     the routed sum is rounded to BF16 first (the routed out the GEMV reads as its bias), then out =
//     bf16(routed + shared) in fp32 (two terms: the order of the addition does not matter).
// Bits may differ only where nvcc contracts the sums differently in the two kernels (both write acc += w * x, an FMA).
// The kernel is instantiated for 1, 2, 4 and 8 tokens (per-token sums in registers), and for one token with shared
// experts (kShared; without them the one-token kernel is today's). Launched programmatically dependent (pdl.cuh): the
// router rows and replica tables are prefetched before the wait, and the next kernel may launch once every block is
// past the last barrier. Every dot product is summed in a fixed order (lanes, then a warp reduction), so a token's
// result does not depend on which other tokens share the batch.
// Measured (H200, Qwen3-30B-A3B shapes) it beats the grouped path at one token only: see kDecodePathMaxTokens.

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/dispatch.cuh"
#include "kernels/grid_barrier.cuh"
#include "kernels/pdl.cuh"
#include "kernels/stream_load.cuh"
#include "kernels/warp_topk.cuh"

namespace zmoe::kernels {
namespace {

/// Most tokens moe_use_decode_path sends here: measured on H200 at Qwen3-30B-A3B shapes (the whole layer, CUDA
/// graph, one call), the one-launch kernel at 1 / 2 / 4 / 8 tokens 0.035-0.039 / 0.080-0.089 / 0.152-0.154 /
/// 0.332-0.338 ms against 0.075 / 0.120 / 0.186 ms on the grouped path (wgmma, 64-row groups) from 2 tokens on.
constexpr int32_t kDecodePathMaxTokens = 1;

/// Scratch: the grid barrier's arrival counter, the blocks done, and (in its own 128-byte line) the gate|up tail's
/// next item; all zero between launches.
constexpr int32_t kOneScratchInts = 64;
constexpr int32_t kTailCounter = 32;

constexpr int kOneThreads = 256;
constexpr int kOneWarps = kOneThreads / 32;
constexpr int kOneUnroll = 8;        // gate|up: 16-byte vectors per lane in flight per row (gate and up each)
constexpr int kOneDownGroup = 4;     // down: choices whose rows are loaded together
constexpr int kOneDownUnroll = 3;    // down: 16-byte vectors per lane per row in flight (768 / 8 / 32 = 3 at Qwen3)
constexpr int kOneMaxTopK = 16;      // one token: its choices' sums in registers
constexpr int kOneSharedUnroll = 4;  // down: 16-byte vectors per lane of the shared row in flight (ptxas, sm_90a:
                                     // 6 spills 16 bytes, 12 spills 180; 4 none)
constexpr size_t kOneMaxSmem = 96u << 10;  // two blocks per multiprocessor
constexpr int kMaxExperts = 512;           // moe_decode_supported's bound
constexpr int kSmemSlots = 1024;           // replica tables up to this many slots are copied to shared memory

/// Dynamic shared memory of the kernel: x [T, hidden] bf16, act [top_k * inter + shared_inter] bf16 (one token only),
/// logits [T, experts] fp32.
size_t one_launch_smem(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t hidden, int32_t inter,
                       int32_t shared_inter = 0) {
    return size_t(num_tokens) * hidden * sizeof(bf16) +
           (num_tokens == 1 ? (size_t(top_k) * inter + size_t(shared_inter)) * sizeof(bf16) : 0) +
           size_t(num_tokens) * num_experts * sizeof(float);
}

/// kT >= num_tokens bounds the per-token accumulators (1, 2, 4 or 8).
/// This lane's kOneDownUnroll 16-byte vectors (from vector v0 on) of down row h of the distinct slots u0 .. u0 + kG - 1
/// that are below U, all loads in flight together.
template <int kG, typename SlotOf>
__device__ __forceinline__ void load_down_rows(uint4 (&wv)[kG][kOneDownUnroll], const moe_decode_params& p,
                                               const SlotOf& slot_of, int32_t u0, int32_t U, int64_t h, int32_t v0,
                                               int lane) {
    const int32_t ivec = p.inter / 8;
#pragma unroll
    for (int jj = 0; jj < kG; ++jj) {
        const int32_t u = u0 + jj;
        const auto* row =
            reinterpret_cast<const uint4*>(p.w_down + (size_t(slot_of(u < U ? u : 0)) * p.hidden + h) * p.inter);
#pragma unroll
        for (int i = 0; i < kOneDownUnroll; ++i) {
            const int32_t v = v0 + i * 32 + lane;
            if (u < U && v < ivec) wv[jj][i] = detail::load_stream(row + v);
        }
    }
}

/// One token, down: adds this lane's part of row (choice g0 + jj) . act[choice] for the loaded vectors to acc.
__device__ __forceinline__ void accumulate_down(float (&acc)[kOneMaxTopK],
                                                const uint4 (&wv)[kOneDownGroup][kOneDownUnroll], const bf16* act_s,
                                                const moe_decode_params& p, int32_t K, int g0, int32_t v0, int lane) {
    const int32_t ivec = p.inter / 8;
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
            detail::load_f32x8(act_s + size_t(j) * p.inter + v * 8, av);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[g0 + jj] += wf[e] * av[e];
        }
    }
}

/// One token with shared experts, down: the shared down row h . the shared act (act_s from top_k * inter on), summed
/// over the whole warp and rounded to bf16 (launch_gemv_bf16's order: this lane's vectors lane, lane + 32, ...
/// ascending, kOneSharedUnroll of them in flight).
__device__ __forceinline__ float shared_down_row(const moe_decode_params& p, const bf16* act_s, int32_t K, int64_t h,
                                                 int lane) {
    const int32_t svec = p.shared_inter / 8;
    const auto* row = reinterpret_cast<const uint4*>(p.shared_down + size_t(h) * p.shared_inter);
    const bf16* act = act_s + size_t(K) * p.inter;
    float acc = 0.f;
    for (int32_t v0 = 0; v0 < svec; v0 += 32 * kOneSharedUnroll) {
        uint4 wv[kOneSharedUnroll];
#pragma unroll
        for (int i = 0; i < kOneSharedUnroll; ++i) {
            const int32_t v = v0 + i * 32 + lane;
            if (v < svec) wv[i] = detail::load_stream(row + v);
        }
#pragma unroll
        for (int i = 0; i < kOneSharedUnroll; ++i) {
            const int32_t v = v0 + i * 32 + lane;
            if (v >= svec) break;
            float wf[8], av[8];
            detail::load_f32x8(reinterpret_cast<const bf16*>(&wv[i]), wf);
            detail::load_f32x8(act + v * 8, av);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc += wf[e] * av[e];
        }
    }
    return __bfloat162float(__float2bfloat16(detail::warp_sum(acc)));
}

/// One token, down: out[h] = the choices' sums, each rounded to bf16, weighted and added in top-k order; with shared
/// experts (kShared) that sum rounded to bf16, then shared (already bf16) added and the whole rounded again.
template <bool kShared>
__device__ __forceinline__ void store_down_row(const float (&acc)[kOneMaxTopK], const float* weight_s,
                                               const moe_decode_params& p, int32_t K, int64_t h, int lane,
                                               float shared) {
    float out = 0.f;
#pragma unroll
    for (int j = 0; j < kOneMaxTopK; ++j) {
        if (j >= K) break;
        const float y = __bfloat162float(__float2bfloat16(detail::warp_sum(acc[j])));
        out += weight_s[j] * y;
    }
    if constexpr (kShared) out = __bfloat162float(__float2bfloat16(out)) + shared;
    if (lane == 0) p.out[h] = __float2bfloat16(out);
}

template <int kT, int kPerLane, bool kShared>
__global__ void __launch_bounds__(kOneThreads, 2) moe_decode_one_kernel(const moe_decode_params p) {
    static_assert(!kShared || kT == 1, "shared experts in the one-token kernel only");
    extern __shared__ __align__(16) unsigned char one_smem[];
    constexpr int kPairs = kT == 1 ? kOneMaxTopK : kMoeDecodeMaxPairs;
    constexpr int kUnroll = kT <= 2 ? kOneUnroll : kOneUnroll / 2;        // fewer loads in flight where more sums are
    constexpr int kGroupT = kT <= 2 ? kOneDownGroup : kOneDownGroup / 2;  // the same in down
    const int32_t T = p.num_tokens, K = p.top_k, H = p.hidden, I = p.inter, E = p.num_experts, TK = T * K;
    bf16* x_s = reinterpret_cast<bf16*>(one_smem);   // [T, hidden]
    bf16* act_s = x_s + size_t(T) * H;               // [top_k * inter + shared_inter], one token only
    const int32_t S = kShared ? p.shared_inter : 0;  // shared experts' columns
    float* logits_s = reinterpret_cast<float*>(act_s + (kT == 1 ? size_t(K) * I + S : 0));  // [T, experts]
    __shared__ int32_t slot_s[kPairs];                                                      // per choice t * top_k + j
    __shared__ float weight_s[kPairs];
    // More than one token: the distinct slots in ascending order, and per slot the choice of each token (-1: none).
    __shared__ int32_t uslot_s[kT == 1 ? 1 : kPairs];
    __shared__ int32_t uchoice_s[kT == 1 ? 1 : kPairs * kT];
    __shared__ int32_t first_s[kT == 1 ? 1 : kPairs];
    __shared__ float y_s[kT == 1 ? 1 : kOneWarps][kT == 1 ? 1 : kPairs];  // down: y per choice of the warp's row
    __shared__ int32_t num_unique_s;
    // The replica tables, read in the router phase so that the top-k's lookups are in shared memory (the slots only
    // up to kSmemSlots of them; beyond, from global memory).
    __shared__ int32_t offsets_s[kMaxExperts + 1];
    __shared__ int32_t rslots_s[kSmemSlots];
    uint32_t* barrier = reinterpret_cast<uint32_t*>(p.scratch);  // [counter, blocks done, ..., tail counter]
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
            detail::prefetch_l2_range(p.router_w + size_t(e) * H, size_t(H) * sizeof(bf16), lane);
    if (warp == 0) {
        detail::prefetch_l2_range(p.replica_offsets, size_t(E + 1) * sizeof(int32_t), lane);
        detail::prefetch_l2_range(p.replica_slots, size_t(E) * sizeof(int32_t), lane);
    }
    detail::pdl_wait();  // x (and given logits, num_valid) come from the kernels before
    for (int32_t v = threadIdx.x; v < T * hvec; v += kOneThreads)
        reinterpret_cast<detail::bf16x8*>(x_s)[v] = reinterpret_cast<const detail::bf16x8*>(p.x)[v];
    for (int32_t e = threadIdx.x; e <= E; e += kOneThreads) offsets_s[e] = p.replica_offsets[e];
    __syncthreads();
    const int32_t num_slots = offsets_s[E];
    const bool slots_in_smem = num_slots <= kSmemSlots;
    // The last warp copies the slots table while the router rows are summed (the top-k's second lookup).
    if (warp == kOneWarps - 1 && slots_in_smem)
        for (int32_t i = lane; i < num_slots; i += 32) rslots_s[i] = p.replica_slots[i];

    // 0. Router logits, one warp per expert (lanes over 16-byte vectors, as the batched route kernel sums).
    if (fused_router) {
        for (int64_t e = gw; e < E; e += W) {
            const auto* w = reinterpret_cast<const detail::bf16x8*>(p.router_w + size_t(e) * H);
            float acc[kT] = {};
            for (int32_t v0 = 0; v0 < hvec; v0 += 32 * kOneUnroll) {
                // One token: its x vectors loaded from global memory beside the weights (one round trip, not two).
                constexpr bool kXr = kT == 1;
                uint4 wv[kOneUnroll], xr[kXr ? kOneUnroll : 1];
#pragma unroll
                for (int i = 0; i < kOneUnroll; ++i) {
                    const int32_t v = v0 + i * 32 + lane;
                    if (v < hvec) {
                        wv[i] = detail::load_stream(w + v);
                        if constexpr (kXr) xr[i] = reinterpret_cast<const uint4*>(p.x)[v];
                    }
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
                        detail::load_f32x8(kXr ? reinterpret_cast<const bf16*>(&xr[i]) : x_s + size_t(t) * H + v * 8,
                                           xv);
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
        detail::grid_barrier(barrier, G);
    } else {
        __syncthreads();  // the slots table
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
        detail::warp_softmax_topk<kPerLane, true>(logits_s + size_t(t) * E, E, K, p.renormalize, &my_id, &my_weight);
        if (lane < K) {
            const int32_t a = t * K + lane;
            const int32_t first = offsets_s[my_id], n = offsets_s[my_id + 1] - first;
            const int32_t slot = slots_in_smem ? rslots_s[first + t % n] : p.replica_slots[first + t % n];
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

    // 2. gate|up: item = (distinct slot, FFN column), grid-stride; every row read once for all its tokens. With shared
    // experts, items from U * I on are the shared columns (after the routed ones: the tail takes them).
    const int64_t routed_items = int64_t(U) * I;
    const int64_t items = routed_items + S;
    auto gate_row = [&](int64_t item) {
        return p.w_gate_up + (size_t(slot_of(int32_t(item / I))) * 2 * I + size_t(item % I)) * H;
    };
    // No L2 prefetch of the warp's next item: in the decode step (other weights in every layer) it costs 1.0-1.5%
    // of the step, though replaying one layer (its rows partly still in L2) it looked a gain (docs/kernels.md, the
    // one-token kernel). The whole rounds of W items are dealt out (item gw + r W); the rest, the tail, from a counter:
    // a warp asks for its next tail item (one atomic by lane 0) before it starts on the current one, so the answer
    // arrives while it computes. Multiprocessors do not stream equally fast (cold, one token: the first block done ~9
    // us before the last with every item dealt out), so the faster ones take more of the tail.
    const int64_t dealt = items <= W ? items : items / W * W;  // items below this are dealt out
    const bool has_tail = dealt < items;
    auto ask_tail = [&]() -> uint32_t { return lane == 0 && has_tail ? atomicAdd(barrier + kTailCounter, 1u) : 0u; };
    // The tail item of lane 0's answer (items, the end, where there is no tail: dealt == items).
    auto tail_item = [&](uint32_t answer) { return dealt + __shfl_sync(detail::kFullMask, answer, 0); };
    uint32_t asked = 0;  // lane 0: the counter's answer for the warp's next item
    int64_t item = gw < dealt ? gw : tail_item(ask_tail());
    while (item < items) {
        const bool next_dealt = item + W < dealt;
        if (!next_dealt) asked = ask_tail();                  // answered while this item is computed
        const bool shared = kShared && item >= routed_items;  // a shared column: item - routed_items
        const int32_t u = int32_t(item / I), c = int32_t(item % I);
        int32_t choice[kT];
#pragma unroll
        for (int t = 0; t < kT; ++t) choice[t] = t < T ? choice_of(u, t) : -1;
        const bf16* g_row =
            shared ? p.shared_gate_up + size_t(item - routed_items) * H : gate_row(item);  // shared: [2 S, H]
        const auto* gr = reinterpret_cast<const detail::bf16x8*>(g_row);
        const auto* ur = reinterpret_cast<const detail::bf16x8*>(g_row + size_t(shared ? S : I) * H);
        float ag[kT] = {}, au[kT] = {};
        for (int32_t v0 = 0; v0 < hvec; v0 += 32 * kUnroll) {
            uint4 gv[kUnroll], uv[kUnroll];
#pragma unroll
            for (int i = 0; i < kUnroll; ++i) {
                const int32_t v = v0 + i * 32 + lane;
                if (v < hvec) gv[i] = detail::load_stream(gr + v), uv[i] = detail::load_stream(ur + v);
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
            if constexpr (kShared) {
                if (shared) {  // the GEMV's BF16 gate|up, then launch_silu_mul's expression, after the routed act
                    const float gs = __bfloat162float(__float2bfloat16(g));
                    const float us = __bfloat162float(__float2bfloat16(up));
                    if (lane == 0)
                        p.act[size_t(K) * I + size_t(item - routed_items)] =
                            __float2bfloat16(gs / (1.f + __expf(-gs)) * us);
                    continue;
                }
            }
            if (lane == 0) p.act[size_t(choice[t]) * I + c] = __float2bfloat16(g / (1.f + __expf(-g)) * up);
        }
        item = next_dealt ? item + W : tail_item(asked);
    }
    // No L2 prefetch of the down rows here: in the decode step, prefetching them (evict-last or normal priority, here
    // or at the top-k) costs 4-9% of the step (docs/kernels.md, the one-token kernel).
    // One token: the first kOneDownGroup choices' first vectors of this warp's first down row are loaded into
    // registers now and arrive during the barrier.
    // (One pass: the warp has at most one row and each row one block of vectors per lane.)
    const bool one_pass = kT == 1 && gw + W >= H && ivec <= 32 * kOneDownUnroll;
    uint4 down_first[kOneDownGroup][kOneDownUnroll];
    if (one_pass && gw < H) load_down_rows(down_first, p, slot_of, 0, K, gw, 0, lane);
    detail::grid_barrier(barrier, fused_router ? 2 * G : G);
    detail::pdl_launch_dependents();  // every block is resident and past its last barrier

    // 3. down + combine: one warp per hidden row across the distinct slots.
    if constexpr (kT == 1) {
        for (int32_t v = threadIdx.x; v < K * ivec + S / 8; v += kOneThreads)
            reinterpret_cast<uint4*>(act_s)[v] = __ldcg(reinterpret_cast<const uint4*>(p.act) + v);
        __syncthreads();
        if (one_pass) {
            if (gw < H) {  // the first group arrived during the barrier; the others are loaded now
                float acc[kOneMaxTopK];
#pragma unroll
                for (int j = 0; j < kOneMaxTopK; ++j) acc[j] = 0.f;
                accumulate_down(acc, down_first, act_s, p, K, 0, 0, lane);
#pragma unroll
                for (int g0 = kOneDownGroup; g0 < kOneMaxTopK; g0 += kOneDownGroup) {
                    if (g0 >= K) break;
                    uint4 wv[kOneDownGroup][kOneDownUnroll];
                    load_down_rows(wv, p, slot_of, g0, K, gw, 0, lane);
                    accumulate_down(acc, wv, act_s, p, K, g0, 0, lane);
                }
                const float shared = kShared ? shared_down_row(p, act_s, K, gw, lane) : 0.f;
                store_down_row<kShared>(acc, weight_s, p, K, gw, lane, shared);
            }
        } else {
            for (int64_t h = gw; h < H; h += W) {
                float acc[kOneMaxTopK];
#pragma unroll
                for (int j = 0; j < kOneMaxTopK; ++j) acc[j] = 0.f;
                for (int32_t v0 = 0; v0 < ivec; v0 += 32 * kOneDownUnroll) {
#pragma unroll
                    for (int g0 = 0; g0 < kOneMaxTopK; g0 += kOneDownGroup) {
                        if (g0 >= K) break;
                        uint4 wv[kOneDownGroup][kOneDownUnroll];
                        load_down_rows(wv, p, slot_of, g0, K, h, v0, lane);
                        accumulate_down(acc, wv, act_s, p, K, g0, v0, lane);
                    }
                }
                const float shared = kShared ? shared_down_row(p, act_s, K, h, lane) : 0.f;
                store_down_row<kShared>(acc, weight_s, p, K, h, lane, shared);
            }
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
                    load_down_rows(wv, p, slot_of, u0, U, h, v0, lane);
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
        barrier[kTailCounter] = 0;
    }
}

template <int kT, bool kShared = false>
void launch_one_launch(const moe_decode_params& p, cudaStream_t stream) {
    const int32_t S = kShared ? p.shared_inter : 0;
    const size_t smem = one_launch_smem(p.num_tokens, p.top_k, p.num_experts, p.hidden, p.inter, S);
    DISPATCH_EXPERTS_PER_LANE(p.num_experts, kPerLane, {
        const auto kernel = moe_decode_one_kernel<kT, kPerLane, kShared>;
        ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kOneMaxSmem)));
        int device = 0, sms = 0, per_sm = 0;
        ZMOE_CUDA_CHECK(cudaGetDevice(&device));
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        ZMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kOneThreads, smem));
        ZMOE_KERNEL_REQUIRE(per_sm >= 1, "moe_decode: the one-launch kernel does not fit a multiprocessor");
        // Enough warps for the widest phase, never more blocks than fit at once (the grid barriers need them all).
        const int64_t tk = int64_t(p.num_tokens) * p.top_k;
        const int64_t rows = std::max<int64_t>({int64_t(p.num_experts), tk * p.inter + S, p.hidden});
        const int64_t blocks = std::min<int64_t>((rows + kOneWarps - 1) / kOneWarps, int64_t(per_sm) * sms);
        detail::launch_pdl(kernel, dim3(uint32_t(blocks)), dim3(kOneThreads), smem, stream, p);
    });
}

}  // namespace

bool moe_decode_supported(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t hidden, int32_t inter) {
    return num_tokens >= 1 && num_tokens <= kMoeDecodeMaxTokens && top_k >= 1 && top_k <= kOneMaxTopK &&
           num_tokens * top_k <= kMoeDecodeMaxPairs && num_experts >= top_k && num_experts <= 512 && hidden % 8 == 0 &&
           inter % 8 == 0 && hidden > 0 && inter > 0 &&
           one_launch_smem(num_tokens, top_k, num_experts, hidden, inter) <= kOneMaxSmem;
}

bool moe_use_decode_path(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t hidden, int32_t inter) {
    return num_tokens <= kDecodePathMaxTokens && moe_decode_supported(num_tokens, top_k, num_experts, hidden, inter);
}

bool moe_decode_shared_supported(int32_t top_k, int32_t num_experts, int32_t hidden, int32_t inter,
                                 int32_t shared_inter) {
    return moe_decode_supported(1, top_k, num_experts, hidden, inter) && shared_inter > 0 && shared_inter % 8 == 0 &&
           one_launch_smem(1, top_k, num_experts, hidden, inter, shared_inter) <= kOneMaxSmem;
}

size_t moe_decode_scratch_ints(int32_t /*num_tokens*/, int32_t /*top_k*/) { return kOneScratchInts; }

void launch_moe_decode(const moe_decode_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(moe_decode_supported(p.num_tokens, p.top_k, p.num_experts, p.hidden, p.inter),
                        "moe_decode: 1..8 tokens, tokens x top_k <= 64, top_k <= 16, <= 512 experts, hidden and "
                        "inter multiples of 8, x + act + logits within 96 KB of shared memory");
    if (p.shared_inter != 0) {
        ZMOE_KERNEL_REQUIRE(p.num_tokens == 1 && p.shared_gate_up != nullptr && p.shared_down != nullptr &&
                                moe_decode_shared_supported(p.top_k, p.num_experts, p.hidden, p.inter, p.shared_inter),
                            "moe_decode: shared experts with one token only, both weights given, shared_inter a "
                            "positive multiple of 8, x + act (routed and shared) + logits within 96 KB");
        launch_one_launch<1, true>(p, stream);
    } else if (p.num_tokens == 1)
        launch_one_launch<1>(p, stream);
    else if (p.num_tokens == 2)
        launch_one_launch<2>(p, stream);
    else if (p.num_tokens <= 4)
        launch_one_launch<4>(p, stream);
    else
        launch_one_launch<8>(p, stream);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
