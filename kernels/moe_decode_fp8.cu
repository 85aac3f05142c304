// The FP8 routed experts for a few tokens (launch_moe_decode_fp8): two launches of one warp per output element,
// reading each e4m3 weight row once per token with 16-byte loads (the rows of all of a warp's choices in flight
// together), the activations quantized per 128-channel group into shared memory by every block (a few KB: cheaper
// than another launch). The grouped path's tiles of 64 rows would multiply 63 padding rows per expert here.
// Both launches are programmatically dependent (pdl.cuh): gate/up waits for the router before anything, then lets
// the down kernel launch; the down kernel prefetches its weight rows into L2 (the slots are the router's, complete
// once gate/up is past its wait) before waiting for gate/up's act.

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/dispatch.cuh"
#include "kernels/grid_barrier.cuh"
#include "kernels/moe_decode_fp8.hpp"
#include "kernels/pdl.cuh"
#include "kernels/sm90_primitives.cuh"
#include "kernels/stream_load.cuh"
#include "kernels/warp_topk.cuh"

namespace zmoe::kernels::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxTopK = 16;
constexpr int kGroup = 8;                 // down: choices whose rows are in flight together
constexpr int kBulkItems = 2;             // gate/up bulk: (pair, column) items per warp
constexpr int32_t kBulkMaxHidden = 4096;  // gate/up bulk: hidden sizes whose rows are staged in shared memory
constexpr size_t kMaxSmem = 96u << 10;

__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t v) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3);
    return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

/// sum_i w[i] * a[i] over 16 e4m3 pairs, in fp32 (every e4m3 value and product is exact in fp32).
__device__ __forceinline__ float dot16(const uint4& w, const uint4& a) {
    const uint32_t wv[4] = {w.x, w.y, w.z, w.w}, av[4] = {a.x, a.y, a.z, a.w};
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const float2 wf = e4m3x2_to_float2(wv[i] >> (16 * half)), af = e4m3x2_to_float2(av[i] >> (16 * half));
            s = fmaf(wf.x, af.x, s);
            s = fmaf(wf.y, af.y, s);
        }
    return s;
}

/// 1D bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) into shared memory, completing on bar.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     sm90::smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(sm90::smem_addr(bar))
                 : "memory");
}

/// Quantizes rows [rows, cols] of fp32 values (get(r, c)) per 128-channel group into q (codes, [rows, cols]) and s
/// ([rows, groups]) in shared memory: one warp per (row, group), as launch_fp8_quantize. A warp loads up to kBatch
/// of its items before reducing any, so their loads are in flight together (the down kernel's 8 choices x 6 groups
/// of act were six dependent L2 round trips per warp one item at a time). Ends with __syncthreads.
template <int kBatch, typename Get>
__device__ __forceinline__ void quantize_to_smem(Get&& get, int32_t rows, int32_t cols, uint8_t* q, float* s) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t groups = (cols + 127) / 128, items = rows * groups;
    for (int32_t w0 = warp; w0 < items; w0 += kWarps * kBatch) {
        float v[kBatch][4];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int32_t w = w0 + b * kWarps, c = (w % groups) * 128 + lane * 4;
            v[b][0] = v[b][1] = v[b][2] = v[b][3] = 0.f;
            if (w < items && c < cols) get(w / groups, c, v[b]);
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int32_t w = w0 + b * kWarps;
            if (w >= items) break;  // the same for the whole warp
            const int32_t r = w / groups, g = w % groups, c = g * 128 + lane * 4;
            float amax = fmaxf(fmaxf(fabsf(v[b][0]), fabsf(v[b][1])), fmaxf(fabsf(v[b][2]), fabsf(v[b][3])));
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            const float scale = amax > 0.f ? amax / 448.f : 1.f;
            uint16_t lo, hi;
            asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(v[b][1] / scale), "f"(v[b][0] / scale));
            asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(v[b][3] / scale), "f"(v[b][2] / scale));
            if (c < cols) *reinterpret_cast<uint32_t*>(q + size_t(r) * cols + c) = uint32_t(lo) | (uint32_t(hi) << 16);
            if (lane == 0) s[r * groups + g] = scale;
        }
    }
    __syncthreads();
}

/// act[pair, n] = silu(gate) * up for one (pair, n) from its gate and up rows (wg_row, wu_row: in global or shared
/// memory) and the token's quantized x in shared memory; the warp's lanes take 16-byte chunks lane, lane + 32, ...
template <typename Load>
__device__ __forceinline__ void gate_up_item(const moe_decode_fp8_params& p, int32_t pair, int32_t n, int32_t slot,
                                             const uint8_t* xq, const float* xs, Load&& load) {
    const int32_t H = p.hidden, I = p.inter, kbH = (H + 127) / 128, nbI = (I + 127) / 128, t = pair / p.top_k;
    const int lane = threadIdx.x % 32;
    const float* gs = p.fp8.w_gate_up_scales + (size_t(slot) * 2 * nbI + n / 128) * kbH;
    const float* us = p.fp8.w_gate_up_scales + ((size_t(slot) * 2 + 1) * nbI + n / 128) * kbH;
    const uint4* xrow = reinterpret_cast<const uint4*>(xq + size_t(t) * H);
    float ag = 0.f, au = 0.f;
#pragma unroll 4
    for (int32_t c = lane; c < H / 16; c += 32) {
        uint4 wg, wu;
        load(c, wg, wu);
        const uint4 a = xrow[c];
        const int32_t kb = c / 8;
        const float sa = xs[t * kbH + kb];
        ag = fmaf(dot16(wg, a), sa * __ldg(gs + kb), ag);
        au = fmaf(dot16(wu, a), sa * __ldg(us + kb), au);
    }
    ag = warp_sum(ag);
    au = warp_sum(au);
    if (lane == 0) p.act[size_t(pair) * I + n] = __fdividef(ag, 1.f + __expf(-ag)) * au;
}

/// x quantized per token and 128-channel group into xq / xs in shared memory (every block, as launch_fp8_quantize).
__device__ __forceinline__ void quantize_x_to_smem(const moe_decode_fp8_params& p, uint8_t* xq, float* xs) {
    const int32_t H = p.hidden;
    quantize_to_smem<2>(
        [&](int32_t r, int32_t c, float(&v)[4]) {
            const uint2 raw = *reinterpret_cast<const uint2*>(p.x + size_t(r) * H + c);
            const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
            const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
            v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
        },
        p.num_tokens, H, xq, xs);
}

/// (1) act[pair, n] = silu(gate) * up, one warp per (pair, n), its weight rows read with 16-byte loads.
__global__ void __launch_bounds__(kThreads) gate_up_kernel(const moe_decode_fp8_params p) {
    extern __shared__ uint4 smem4[];
    pdl_wait();  // x and the router's slots and weights come from the kernels before
    pdl_launch_dependents();
    uint8_t* xq = reinterpret_cast<uint8_t*>(smem4);
    float* xs = reinterpret_cast<float*>(xq + size_t(p.num_tokens) * p.hidden);
    quantize_x_to_smem(p, xq, xs);
    const int32_t I = p.inter;
    const int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (item >= int64_t(p.num_tokens) * p.top_k * I) return;
    const int32_t pair = int32_t(item / I), n = int32_t(item % I), slot = p.slot_ids[pair];
    const uint4* g_row = reinterpret_cast<const uint4*>(p.fp8.w_gate_up + (size_t(slot) * 2 * I + n) * p.hidden);
    const uint4* u_row = g_row + size_t(I) * p.hidden / 16;
    gate_up_item(p, pair, n, slot, xq, xs, [&](int32_t c, uint4& wg, uint4& wu) {
        wg = __ldg(g_row + c);
        wu = __ldg(u_row + c);
    });
}

/// (1) with the weight rows staged in shared memory: one warp per kBulkItems (pair, n) items, whose gate and up rows
/// its lane 0 copies with cp.async.bulk right after the wait, before the block quantizes x (their DRAM latency
/// overlaps x's), completing on the warp's mbarrier. Three blocks of 16 items fit an SM (64 KB of rows each at
/// hidden 2048): Qwen3-30B-A3B's 6 144 items are one wave, with ~190 KB per SM in flight (the register kernel's 768
/// blocks of 8 items are 1.5 waves at 4 blocks per SM, and measured 45% of the DRAM bandwidth).
__global__ void __launch_bounds__(kThreads, 3) gate_up_bulk_kernel(const moe_decode_fp8_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ uint4 smem4[];
    const int32_t H = p.hidden, I = p.inter;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint8_t* rows = reinterpret_cast<uint8_t*>(smem4) + size_t(warp) * kBulkItems * 2 * H;  // [2 items][gate, up][H]
    uint64_t* bar =
        reinterpret_cast<uint64_t*>(reinterpret_cast<uint8_t*>(smem4) + size_t(kWarps) * kBulkItems * 2 * H) + warp;
    uint8_t* xq = reinterpret_cast<uint8_t*>(bar - warp + kWarps);
    float* xs = reinterpret_cast<float*>(xq + size_t(p.num_tokens) * H);
    if (lane == 0) {
        sm90::mbar_init(bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncwarp();
    pdl_wait();  // x and the router's slots and weights come from the kernels before
    pdl_launch_dependents();
    const int64_t items = int64_t(p.num_tokens) * p.top_k * I;
    const int64_t item0 = (int64_t(blockIdx.x) * kWarps + warp) * kBulkItems;
    int32_t pair[kBulkItems], n[kBulkItems], slot[kBulkItems];
    int active = 0;
#pragma unroll
    for (int i = 0; i < kBulkItems; ++i) {
        const int64_t item = item0 + i;
        pair[i] = item < items ? int32_t(item / I) : 0;
        n[i] = item < items ? int32_t(item % I) : 0;
        slot[i] = item < items ? p.slot_ids[pair[i]] : 0;
        active += item < items ? 1 : 0;
    }
    if (lane == 0 && active > 0) {
        sm90::mbar_arrive_expect_tx(bar, uint32_t(active) * 2 * uint32_t(H));
#pragma unroll
        for (int i = 0; i < kBulkItems; ++i) {
            if (i >= active) break;
            const uint8_t* g_row = p.fp8.w_gate_up + (size_t(slot[i]) * 2 * I + n[i]) * H;
            bulk_copy(rows + size_t(2 * i) * H, g_row, uint32_t(H), bar);
            bulk_copy(rows + size_t(2 * i + 1) * H, g_row + size_t(I) * H, uint32_t(H), bar);
        }
    }
    quantize_x_to_smem(p, xq, xs);
    if (active == 0) return;
    sm90::mbar_wait(bar, 0);
#pragma unroll
    for (int i = 0; i < kBulkItems; ++i) {
        if (i >= active) break;
        const uint4* g = reinterpret_cast<const uint4*>(rows + size_t(2 * i) * H);
        const uint4* u = reinterpret_cast<const uint4*>(rows + size_t(2 * i + 1) * H);
        gate_up_item(p, pair[i], n[i], slot[i], xq, xs, [&](int32_t c, uint4& wg, uint4& wu) {
            wg = g[c];
            wu = u[c];
        });
    }
#endif
}

/// (2) out[t, h] = bf16(sum_j weight_j * bf16(act_q[t, j] . down[slot_j, h])), one warp per (t, h).
__global__ void __launch_bounds__(kThreads) down_kernel(const moe_decode_fp8_params p) {
    extern __shared__ uint4 smem4[];
    const int32_t H = p.hidden, I = p.inter, kbI = (I + 127) / 128, nbH = (H + 127) / 128, K = p.top_k;
    const int32_t pairs = p.num_tokens * K;
    {
        // Before the wait: this warp's down rows into L2 (128-byte lines), the slots being complete already.
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        const int64_t item = int64_t(blockIdx.x) * kWarps + warp;
        if (item < int64_t(p.num_tokens) * H) {
            const int32_t t = int32_t(item / H), h = int32_t(item % H), lines = (I + 127) / 128;
            for (int32_t i = lane; i < K * lines; i += 32) {
                const int32_t slot = p.slot_ids[t * K + i / lines];
                const uint8_t* line = p.fp8.w_down + (size_t(slot) * H + h) * I + (i % lines) * 128;
                asm volatile("prefetch.global.L2 [%0];\n" ::"l"(line));
            }
        }
    }
    pdl_wait();  // act comes from the gate/up kernel
    uint8_t* aq = reinterpret_cast<uint8_t*>(smem4);
    float* as = reinterpret_cast<float*>(aq + size_t(pairs) * I);
    quantize_to_smem<8>(
        [&](int32_t r, int32_t c, float(&v)[4]) {
            const float4 a = *reinterpret_cast<const float4*>(p.act + size_t(r) * I + c);
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        },
        pairs, I, aq, as);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t item = int64_t(blockIdx.x) * kWarps + warp;
    if (item >= int64_t(p.num_tokens) * H) return;
    const int32_t t = int32_t(item / H), h = int32_t(item % H);
    const moe_fp8_experts& f = p.fp8;
    // The choices in groups of kGroup, each group's rows loaded together; the weighted sum in top-k order.
    float s = 0.f;
    for (int32_t j0 = 0; j0 < K; j0 += kGroup) {
        const uint8_t* rows[kGroup];
        const float* ws[kGroup];
        float y[kGroup];
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
            const int32_t slot = j0 + j < K ? p.slot_ids[t * K + j0 + j] : 0;
            rows[j] = f.w_down + (size_t(slot) * H + h) * I;
            ws[j] = f.w_down_scales + (size_t(slot) * nbH + h / 128) * kbI;
            y[j] = 0.f;
        }
        for (int32_t c = lane; c < I / 16; c += 32) {
            uint4 w[kGroup];
#pragma unroll
            for (int j = 0; j < kGroup; ++j)
                if (j0 + j < K) w[j] = __ldg(reinterpret_cast<const uint4*>(rows[j]) + c);
            const int32_t kb = c / 8;
#pragma unroll
            for (int j = 0; j < kGroup; ++j)
                if (j0 + j < K) {
                    const int32_t pair = t * K + j0 + j;
                    const uint4 a = reinterpret_cast<const uint4*>(aq + size_t(pair) * I)[c];
                    y[j] = fmaf(dot16(w[j], a), as[pair * kbI + kb] * __ldg(ws[j] + kb), y[j]);
                }
        }
#pragma unroll
        for (int j = 0; j < kGroup; ++j)
            if (j0 + j < K) {
                const float yj = __bfloat162float(__float2bfloat16_rn(warp_sum(y[j])));
                s = fmaf(p.topk_weights[t * K + j0 + j], yj, s);
            }
    }
    if (lane == 0) p.out[size_t(t) * H + h] = __float2bfloat16_rn(s);
}

// ---------------------------------------------------------------------------------------------------------
// One token in one launch (launch_moe_decode_fp8_one): the router and the two kernels above as phases of one grid of
// resident blocks (two per multiprocessor), as moe_decode.cu does for BF16:
//   0. before the programmatic wait, the router rows and replica tables towards L2; then the router GEMV, one warp
//      per expert (launch_gemv_bf16's lanes and order), logits to global memory; every block quantizes x into shared
//      memory and copies the replica tables meanwhile; grid barrier;
//   1. every block runs the same softmax top-k over the logits (one warp): the slots and weights in its shared
//      memory, no launch between; block 0 writes them out and counts the choices;
//   2. gate/up: one warp per (choice, FFN column), dealt round-robin over the grid's warps (numbered across blocks
//      first, so a round covers every multiprocessor), each item's gate and up rows in flight together; act in fp32
//      to global memory; then each warp loads its first down rows into registers, to arrive during the barrier;
//   3. after the barrier every block quantizes act into shared memory (launch_moe_decode_fp8's second kernel), and
//      one warp per hidden row sums the token's choices (bf16 per choice, weighted in top-k order) into out.
// Measured against the router + two launches on the layer: see docs/kernels.md.

constexpr int kOneBlocksPerSm = 2;
constexpr int kOneMaxExperts = 512;
constexpr int kOneSmemSlots = 1024;  // replica tables up to this many slots are copied to shared memory
constexpr int kOneRouterUnroll = 8;  // router: 16-byte vectors per lane in flight (a 2048-wide row in one trip)
constexpr int kOneGateUpUnroll = 4;  // gate/up: 16-byte chunks per lane and row in flight (hidden 2048: the row)
constexpr int kOneDownChunks = 1;    // down: 16-byte chunks per lane and row in flight (2: registers spill)
constexpr int kOneStageChunks = 2;   // down: chunks per lane and row of the first rows staged (inter 1024: the row)
constexpr int kOneActBatch = 6;      // act's quantization: items per warp loaded together (Qwen3: 48 over 8 warps)

/// Dynamic shared memory of the one-launch kernel: x's codes [hidden] and act's [top_k, inter] (16-byte aligned
/// each), x's scales [hidden / 128], act's [top_k, inter / 128], the logits [num_experts] fp32 (padded to 16 bytes),
/// then per warp its first down rows' staged chunks [kGroup][min(inter / 16, 32 * kOneStageChunks)] x 16 bytes, then
/// per warp their block scales [kGroup][kOneStageChunks][32] fp32.
size_t one_smem(int32_t top_k, int32_t num_experts, int32_t hidden, int32_t inter) {
    const auto up16 = [](size_t n) { return (n + 15) / 16 * 16; };
    const size_t pre_chunks = std::min<size_t>(size_t(inter) / 16, 32 * kOneStageChunks);
    return up16(size_t(hidden)) + up16(size_t(top_k) * inter) +
           up16((size_t((hidden + 127) / 128) + size_t(top_k) * ((inter + 127) / 128) + size_t(num_experts)) *
                sizeof(float)) +
           size_t(kWarps) * kGroup * (pre_chunks * 16 + kOneStageChunks * 32 * sizeof(float));
}

template <int kPerLane>
__global__ void __launch_bounds__(kThreads, kOneBlocksPerSm)
    moe_decode_fp8_one_kernel(const moe_decode_fp8_one_params p) {
    extern __shared__ uint4 smem4[];
    const int32_t K = p.top_k, H = p.hidden, I = p.inter, E = p.num_experts;
    const int32_t kbH = (H + 127) / 128, kbI = (I + 127) / 128, hvec = H / 8, hchunks = H / 16, ichunks = I / 16;
    uint8_t* xq = reinterpret_cast<uint8_t*>(smem4);                            // [H]
    uint8_t* aq = xq + (size_t(H) + 15) / 16 * 16;                              // [K, I]
    float* xs = reinterpret_cast<float*>(aq + (size_t(K) * I + 15) / 16 * 16);  // [kbH]
    float* as = xs + kbH;                                                       // [K, kbI]
    float* logits_s = as + size_t(K) * kbI;                                     // [E]
    __shared__ int32_t slot_s[kMaxTopK];
    __shared__ float weight_s[kMaxTopK];
    __shared__ int32_t offsets_s[kOneMaxExperts + 1];
    __shared__ int32_t rslots_s[kOneSmemSlots];
    uint32_t* barrier = reinterpret_cast<uint32_t*>(p.scratch);  // [arrivals, blocks done]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int32_t G = gridDim.x;
    const int64_t gw = int64_t(warp) * G + blockIdx.x;  // warps numbered across blocks first: rows spread over SMs
    const int64_t W = int64_t(G) * kWarps;
    const bool fused_router = p.router_w != nullptr;

    // Nothing earlier writes the router rows or the replica tables: towards L2 while the kernel before ends.
    if (fused_router)
        for (int64_t e = gw; e < E; e += W)
            prefetch_l2_range(p.router_w + size_t(e) * H, size_t(H) * sizeof(bf16), lane);
    if (warp == 0) {
        prefetch_l2_range(p.replica_offsets, size_t(E + 1) * sizeof(int32_t), lane);
        prefetch_l2_range(p.replica_slots, size_t(E) * sizeof(int32_t), lane);
    }
    pdl_wait();  // x (and given logits, num_valid) come from the kernels before

    // 0. The router GEMV: lane l sums 16-byte vectors l, l + 32, ... in order, then the warp reduction
    //    (launch_gemv_bf16's arithmetic, so the logits are the two-launch path's bit for bit).
    if (fused_router) {
        const auto* xv = reinterpret_cast<const uint4*>(p.x);
        for (int64_t e = gw; e < E; e += W) {
            const auto* w = reinterpret_cast<const uint4*>(p.router_w + size_t(e) * H);
            float acc = 0.f;
            for (int32_t v0 = lane; v0 < hvec; v0 += 32 * kOneRouterUnroll) {
                uint4 wv[kOneRouterUnroll], xr[kOneRouterUnroll];
#pragma unroll
                for (int i = 0; i < kOneRouterUnroll; ++i) {
                    const int32_t v = v0 + 32 * i;
                    if (v < hvec) wv[i] = load_stream(w + v), xr[i] = xv[v];
                }
#pragma unroll
                for (int i = 0; i < kOneRouterUnroll; ++i) {
                    if (v0 + 32 * i >= hvec) break;
                    float wf[8], xf[8];
                    load_f32x8(reinterpret_cast<const bf16*>(&wv[i]), wf);
                    load_f32x8(reinterpret_cast<const bf16*>(&xr[i]), xf);
#pragma unroll
                    for (int k = 0; k < 8; ++k) acc += wf[k] * xf[k];
                }
            }
            acc = warp_sum(acc);
            if (lane == 0) p.router_logits[e] = acc;
        }
    }
    for (int32_t e = threadIdx.x; e <= E; e += kThreads) offsets_s[e] = p.replica_offsets[e];
    // x quantized per 128-channel group (launch_moe_decode_fp8's first kernel does the same); ends with a block sync.
    quantize_to_smem<2>(
        [&](int32_t, int32_t c, float(&v)[4]) {
            const uint2 raw = *reinterpret_cast<const uint2*>(p.x + c);
            const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
            const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
            v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
        },
        1, H, xq, xs);
    const int32_t num_slots = offsets_s[E];
    const bool slots_in_smem = num_slots <= kOneSmemSlots;
    if (slots_in_smem)
        for (int32_t i = threadIdx.x; i < num_slots; i += kThreads) rslots_s[i] = p.replica_slots[i];
    if (fused_router)
        grid_barrier(barrier, G);  // the logits are complete; also syncs the block (the slots table)
    else
        __syncthreads();

    // 1. The softmax top-k in every block (the same logits and order: the same choices everywhere).
    for (int32_t e = threadIdx.x; e < E; e += kThreads) logits_s[e] = __ldcg(p.router_logits + e);
    __syncthreads();
    if (warp == 0) {
        int32_t my_id;
        float my_weight;
        warp_softmax_topk<kPerLane, true>(logits_s, E, K, p.renormalize, &my_id, &my_weight);
        if (lane < K) {
            // launch_moe_route's rule: token t takes replica t % (the expert's replicas); t = 0 here.
            const int32_t first = offsets_s[my_id];
            const int32_t slot = slots_in_smem ? rslots_s[first] : p.replica_slots[first];
            slot_s[lane] = slot;
            weight_s[lane] = my_weight;
            if (blockIdx.x == 0) {
                p.topk_weights[lane] = my_weight;
                p.slot_ids[lane] = slot;
                const bool valid = p.num_valid == nullptr || *p.num_valid > 0;
                if (valid && p.expert_counts != nullptr) atomicAdd(&p.expert_counts[my_id], 1);
            }
        }
    }
    __syncthreads();

    // 2. gate/up: item (choice j, column n); each lane's chunks c = lane, lane + 32, ... as gate_up_item sums them.
    const int64_t items = int64_t(K) * I;
    for (int64_t item = gw; item < items; item += W) {
        const int32_t j = int32_t(item / I), n = int32_t(item % I), slot = slot_s[j];
        const auto* g_row = reinterpret_cast<const uint4*>(p.fp8.w_gate_up + (size_t(slot) * 2 * I + n) * H);
        const uint4* u_row = g_row + size_t(I) * H / 16;
        const float* gs = p.fp8.w_gate_up_scales + (size_t(slot) * 2 * kbI + n / 128) * kbH;
        const float* us = p.fp8.w_gate_up_scales + ((size_t(slot) * 2 + 1) * kbI + n / 128) * kbH;
        float ag = 0.f, au = 0.f;
        for (int32_t c0 = lane; c0 < hchunks; c0 += 32 * kOneGateUpUnroll) {
            uint4 wg[kOneGateUpUnroll], wu[kOneGateUpUnroll];
            float sg[kOneGateUpUnroll], su[kOneGateUpUnroll];
#pragma unroll
            for (int i = 0; i < kOneGateUpUnroll; ++i) {
                const int32_t c = c0 + 32 * i;
                if (c < hchunks) {
                    wg[i] = load_stream(g_row + c);
                    wu[i] = load_stream(u_row + c);
                    sg[i] = __ldg(gs + c / 8);
                    su[i] = __ldg(us + c / 8);
                }
            }
#pragma unroll
            for (int i = 0; i < kOneGateUpUnroll; ++i) {
                const int32_t c = c0 + 32 * i;
                if (c >= hchunks) break;
                const uint4 a = reinterpret_cast<const uint4*>(xq)[c];
                const float sa = xs[c / 8];
                ag = fmaf(dot16(wg[i], a), sa * sg[i], ag);
                au = fmaf(dot16(wu[i], a), sa * su[i], au);
            }
        }
        ag = warp_sum(ag);
        au = warp_sum(au);
        if (lane == 0) p.act[size_t(j) * I + n] = __fdividef(ag, 1.f + __expf(-ag)) * au;
    }

    // This warp's first hidden row: the first kGroup choices' first chunks and their block scales copied into
    // shared memory now (cp.async: no registers held), the slots being known, to arrive during the barrier. Each
    // lane copies exactly the chunks it multiplies first.
    const moe_fp8_experts& f = p.fp8;
    const int32_t pre_chunks = min(ichunks, 32 * kOneStageChunks);
    uint4* const stage_base = smem4 + (size_t(H) + 15) / 16 + (size_t(K) * I + 15) / 16 +
                              ((size_t(kbH) + size_t(K) * kbI + E) * sizeof(float) + 15) / 16;
    uint4* stage = stage_base + size_t(warp) * kGroup * pre_chunks;  // [kGroup][pre_chunks]
    float* stage_scales = reinterpret_cast<float*>(stage_base + size_t(kWarps) * kGroup * pre_chunks) +
                          warp * kGroup * kOneStageChunks * 32;  // [kGroup][kOneStageChunks][32]
    const bool staged = gw < H;                                  // holds (h = gw, j0 = 0, chunks below pre_chunks)
    if (staged) {
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
            if (j >= K) break;
            const size_t slot = size_t(slot_s[j]);
            const uint4* row = reinterpret_cast<const uint4*>(f.w_down + (slot * H + gw) * I);
            const float* scales = f.w_down_scales + (slot * kbH + gw / 128) * kbI;
#pragma unroll
            for (int i = 0; i < kOneStageChunks; ++i) {
                const int32_t c = lane + 32 * i;
                if (c < ichunks) {
                    sm90::cp_async_16(stage + j * pre_chunks + c, row + c, true);
                    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(
                                     sm90::smem_addr(stage_scales + (j * kOneStageChunks + i) * 32 + lane)),
                                 "l"(scales + c / 8)
                                 : "memory");
                }
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    grid_barrier(barrier, fused_router ? 2 * G : G);
    pdl_launch_dependents();  // every block is resident and past its last barrier

    // 3. act quantized per choice and 128-channel group (launch_moe_decode_fp8's second kernel does the same; act
    //    was written by other blocks: read through L2), then down with the weighted sum.
    quantize_to_smem<kOneActBatch>(
        [&](int32_t r, int32_t c, float(&v)[4]) {
            const float4 a = __ldcg(reinterpret_cast<const float4*>(p.act + size_t(r) * I + c));
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        },
        K, I, aq, as);
    if (staged) asm volatile("cp.async.wait_all;\n" ::: "memory");  // this lane's own copies
    uint4 wv[kGroup][kOneDownChunks];
    float sc[kGroup][kOneDownChunks];
    const auto load_down = [&](int32_t j0, int64_t h, int32_t c0, bool from_stage) {
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
            const size_t slot = size_t(j0 + j < K ? slot_s[j0 + j] : 0);
            const uint4* row = reinterpret_cast<const uint4*>(f.w_down + (slot * H + h) * I);
            const float* scales = f.w_down_scales + (slot * kbH + h / 128) * kbI;
#pragma unroll
            for (int i = 0; i < kOneDownChunks; ++i) {
                const int32_t c = c0 + 32 * i;
                if (j0 + j >= K || c >= ichunks) continue;
                if (from_stage) {  // chunk c of the staged row: stage chunk (c - lane) / 32 of this lane
                    wv[j][i] = stage[j * pre_chunks + c];
                    sc[j][i] = stage_scales[(j * kOneStageChunks + (c - lane) / 32) * 32 + lane];
                } else {
                    wv[j][i] = load_stream(row + c);
                    sc[j][i] = __ldg(scales + c / 8);
                }
            }
        }
    };
    for (int64_t h = gw; h < H; h += W) {
        float s = 0.f;
        for (int32_t j0 = 0; j0 < K; j0 += kGroup) {
            float y[kGroup];
#pragma unroll
            for (int j = 0; j < kGroup; ++j) y[j] = 0.f;
            for (int32_t c0 = lane; c0 < ichunks; c0 += 32 * kOneDownChunks) {
                load_down(j0, h, c0, staged && h == gw && j0 == 0 && c0 < pre_chunks);
#pragma unroll
                for (int i = 0; i < kOneDownChunks; ++i) {
                    const int32_t c = c0 + 32 * i;
                    if (c >= ichunks) break;
#pragma unroll
                    for (int j = 0; j < kGroup; ++j)
                        if (j0 + j < K) {
                            const uint4 a = reinterpret_cast<const uint4*>(aq + size_t(j0 + j) * I)[c];
                            y[j] = fmaf(dot16(wv[j][i], a), as[(j0 + j) * kbI + c / 8] * sc[j][i], y[j]);
                        }
                }
            }
#pragma unroll
            for (int j = 0; j < kGroup; ++j)
                if (j0 + j < K) {
                    const float yj = __bfloat162float(__float2bfloat16_rn(warp_sum(y[j])));
                    s = fmaf(weight_s[j0 + j], yj, s);
                }
        }
        if (lane == 0) p.out[h] = __float2bfloat16_rn(s);
    }

    // The last block out leaves the barrier counters zero for the next launch.
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(barrier + 1, 1u) == uint32_t(G) - 1) {
        barrier[0] = 0;
        barrier[1] = 0;
    }
}

size_t gate_up_smem(int32_t tokens, int32_t hidden) {
    return size_t(tokens) * hidden + size_t(tokens) * ((hidden + 127) / 128) * sizeof(float);
}
/// The bulk kernel's: the staged rows, the warps' barriers, then gate_up_smem's.
size_t gate_up_bulk_smem(int32_t tokens, int32_t hidden) {
    return size_t(kWarps) * kBulkItems * 2 * hidden + kWarps * sizeof(uint64_t) + gate_up_smem(tokens, hidden);
}
size_t down_smem(int32_t pairs, int32_t inter) {
    return size_t(pairs) * inter + size_t(pairs) * ((inter + 127) / 128) * sizeof(float);
}

}  // namespace

bool moe_decode_fp8_supported(int32_t num_tokens, int32_t top_k, int32_t hidden, int32_t inter) {
    return num_tokens >= 1 && num_tokens <= kMoeDecodeFp8MaxTokens && top_k >= 1 && top_k <= kMaxTopK &&
           num_tokens * top_k <= kMoeDecodeFp8MaxPairs && hidden % 16 == 0 && inter % 16 == 0 && hidden > 0 &&
           inter > 0 && gate_up_smem(num_tokens, hidden) <= kMaxSmem &&
           down_smem(num_tokens * top_k, inter) <= kMaxSmem;
}

void launch_moe_decode_fp8(const moe_decode_fp8_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(moe_decode_fp8_supported(p.num_tokens, p.top_k, p.hidden, p.inter),
                        "moe_decode_fp8: unsupported shape (moe_decode_fp8_supported)");
    const int32_t pairs = p.num_tokens * p.top_k;
    const size_t s2 = down_smem(pairs, p.inter);
    const bool bulk = p.bulk_weights && p.hidden <= kBulkMaxHidden;
    const int64_t items1 = int64_t(pairs) * p.inter, items2 = int64_t(p.num_tokens) * p.hidden;
    if (bulk) {
        const size_t s1 = gate_up_bulk_smem(p.num_tokens, p.hidden);
        ZMOE_CUDA_CHECK(
            cudaFuncSetAttribute(gate_up_bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(s1)));
        const int64_t per_block = int64_t(kWarps) * kBulkItems;
        launch_pdl(gate_up_bulk_kernel, dim3(unsigned((items1 + per_block - 1) / per_block)), dim3(kThreads), s1,
                   stream, p);
    } else {
        ZMOE_CUDA_CHECK(
            cudaFuncSetAttribute(gate_up_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
        launch_pdl(gate_up_kernel, dim3(unsigned((items1 + kWarps - 1) / kWarps)), dim3(kThreads),
                   gate_up_smem(p.num_tokens, p.hidden), stream, p);
    }
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(down_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
    launch_pdl(down_kernel, dim3(unsigned((items2 + kWarps - 1) / kWarps)), dim3(kThreads), s2, stream, p);
}

bool moe_decode_fp8_one_supported(int32_t top_k, int32_t num_experts, int32_t hidden, int32_t inter) {
    return top_k >= 1 && top_k <= kMaxTopK && num_experts >= top_k && num_experts <= kOneMaxExperts &&
           hidden % 16 == 0 && inter % 16 == 0 && hidden > 0 && inter > 0 &&
           one_smem(top_k, num_experts, hidden, inter) <= kMaxSmem;
}

void launch_moe_decode_fp8_one(const moe_decode_fp8_one_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(moe_decode_fp8_one_supported(p.top_k, p.num_experts, p.hidden, p.inter),
                        "moe_decode_fp8_one: unsupported shape (moe_decode_fp8_one_supported)");
    ZMOE_KERNEL_REQUIRE(p.scratch != nullptr && p.act != nullptr && p.router_logits != nullptr,
                        "moe_decode_fp8_one: scratch, act and router_logits are required");
    ZMOE_KERNEL_REQUIRE(p.router_w == nullptr || (reinterpret_cast<uintptr_t>(p.router_w) % 16 == 0 &&
                                                  reinterpret_cast<uintptr_t>(p.x) % 16 == 0),
                        "moe_decode_fp8_one: router_w and x must be 16-byte aligned");
    const size_t smem = one_smem(p.top_k, p.num_experts, p.hidden, p.inter);
    DISPATCH_EXPERTS_PER_LANE(p.num_experts, kPerLane, {
        const auto kernel = moe_decode_fp8_one_kernel<kPerLane>;
        ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
        int device = 0, sms = 0, per_sm = 0;
        ZMOE_CUDA_CHECK(cudaGetDevice(&device));
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        ZMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
        ZMOE_KERNEL_REQUIRE(per_sm >= 1, "moe_decode_fp8_one: the kernel does not fit a multiprocessor");
        // Enough warps for the widest phase, never more blocks than fit at once (the grid barriers need them all).
        const int64_t rows = std::max<int64_t>({int64_t(p.num_experts), int64_t(p.top_k) * p.inter, p.hidden});
        const int64_t blocks = std::min<int64_t>((rows + kWarps - 1) / kWarps, int64_t(per_sm) * sms);
        launch_pdl(kernel, dim3(uint32_t(blocks)), dim3(kThreads), smem, stream, p);
    });
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels::detail
