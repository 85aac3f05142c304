// The routed experts of a few tokens with their router in ONE launch (launch_moe_decode_one_launch), BF16 or
// block-scaled FP8 weights: the router launch and the experts' launches as phases of one grid of resident blocks
// (two per multiprocessor where they fit, the grid sized from the occupancy), meeting at grid barriers:
//   0. before the programmatic wait, the router rows and the replica tables towards L2; then the router GEMV, one warp
//      per expert (launch_gemv_bf16's lanes and order), the logits to global memory; every block stages x in shared
//      memory (FP8: quantized per token and 128-channel group) and copies the replica tables meanwhile; grid barrier;
//   1. every block runs the same softmax top-k over the logits (one warp per token): the slots and weights in its
//      shared memory, no launch between; block 0 writes them out and counts the valid tokens' choices;
//   2. gate/up: one warp per (FFN column, choice), columns outermost so that the choices of one expert read its rows
//      at the same time (the second read an L2 hit), dealt round-robin over the grid's warps (numbered across blocks
//      first, so a round covers every multiprocessor), each item's gate and up rows in flight together; act (FP8:
//      fp32, BF16: bf16) to global memory; then each warp copies its first down rows into shared memory (cp.async:
//      no registers held over the barrier), to arrive during it;
//   3. each block serves one token (block b token b % num_tokens: a block needs only its token's act, which it
//      stages in shared memory, FP8 quantized as launch_moe_decode_fp8's second kernel does), one warp per hidden row
//      of that token: the token's choices summed in fp32, each rounded to bf16 and weighted in top-k order into out.
// FP8 sums have launch_moe_decode_fp8's lanes and order (moe_decode_fp8_common.cuh), the router launch_gemv_bf16's,
// the top-k launch_router_topk's: for the same logits the outputs are those of the three launches bit for bit.

#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/dispatch.cuh"
#include "kernels/grid_barrier.cuh"
#include "kernels/moe_decode_fp8_common.cuh"
#include "kernels/moe_decode_one_launch.hpp"
#include "kernels/pdl.cuh"
#include "kernels/sm90_primitives.cuh"
#include "kernels/stream_load.cuh"
#include "kernels/warp_topk.cuh"

namespace zmoe::kernels::detail {
namespace {

using namespace fp8_decode;

constexpr int kBlocksPerSm = 2;
constexpr int kMaxExperts = 512;
constexpr int kSmemSlots = 1024;         // replica tables up to this many slots are copied to shared memory
constexpr int kRouterUnroll = 8;         // router: 16-byte vectors per lane in flight (a 2048-wide row in one trip)
constexpr int kMaxStageChunks = 2;       // down: 16-byte chunks per lane and row of the first rows staged, at most
constexpr int kActBatch = 6;             // FP8 act's quantization: items per warp loaded together (Qwen3: 48 / 8 warps)
constexpr size_t kMaxSmem = 200u << 10;  // dynamic shared memory (two blocks per multiprocessor need < 113 KB each)
constexpr size_t kTwoBlocksSmem = 100u << 10;  // the staging shrinks to one chunk per lane where two would not fit

/// Dynamic shared memory, in order: x [T, hidden] (FP8: codes; BF16: bf16), this block's token's act [top_k, inter]
/// (the same types), each padded to 16 bytes; FP8 only: x's scales [T, hidden / 128] and act's [top_k, inter / 128]
/// fp32 (padded to 16 bytes); then the staging area: per warp its first down rows' chunks [kGroup][pre_chunks] x 16
/// bytes, then (FP8) per warp their block scales [kGroup][stage_chunks][32] fp32. The logits [T, num_experts] fp32
/// alias the staging area (read in the top-k only, before anything is staged); it is at least their size.
struct smem_layout {
    size_t act, scales, stage, stage_scales, total;
    int32_t stage_chunks, pre_chunks;
};
__host__ __device__ inline smem_layout layout_of(int32_t T, int32_t K, int32_t E, int32_t H, int32_t I, bool fp8) {
    const auto up16 = [](size_t n) { return (n + 15) / 16 * 16; };
    const size_t elt = fp8 ? 1 : 2, ichunks = size_t(I) * elt / 16;
    smem_layout l{};
    l.act = up16(size_t(T) * H * elt);
    l.scales = l.act + up16(size_t(K) * I * elt);
    l.stage = l.scales + (fp8 ? up16((size_t(T) * ((H + 127) / 128) + size_t(K) * ((I + 127) / 128)) * 4) : 0);
    const size_t logits = up16(size_t(T) * E * sizeof(float));
    for (l.stage_chunks = kMaxStageChunks; l.stage_chunks >= 1; --l.stage_chunks) {
        l.pre_chunks = int32_t(ichunks < size_t(32 * l.stage_chunks) ? ichunks : size_t(32 * l.stage_chunks));
        l.stage_scales = l.stage + size_t(kWarps) * kGroup * l.pre_chunks * 16;
        const size_t staging = l.stage_scales - l.stage + (fp8 ? size_t(kWarps) * kGroup * l.stage_chunks * 32 * 4 : 0);
        l.total = l.stage + (staging > logits ? staging : logits);
        if (l.total <= kTwoBlocksSmem) break;
        if (l.stage_chunks == 1) break;
    }
    return l;
}

/// BF16: sum_e w[e] * x[e] over 8 bf16 pairs added to acc (moe_decode's per-vector order).
__device__ __forceinline__ float dot8_bf16(const uint4& w, const uint4& x, float acc) {
    float wf[8], xf[8];
    load_f32x8(reinterpret_cast<const bf16*>(&w), wf);
    load_f32x8(reinterpret_cast<const bf16*>(&x), xf);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc += wf[e] * xf[e];
    return acc;
}

/// The kernel's argument: the launch's parameters with the FP8 weights' pointers copied in (params.fp8 is a host
/// pointer).
struct one_launch_args {
    moe_decode_one_launch_params p;
    moe_fp8_experts fp8;
};

template <int kT, int kPerLane, bool kFp8>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) moe_decode_one_launch_kernel(const one_launch_args args) {
    const moe_decode_one_launch_params& p = args.p;
    const moe_fp8_experts& f8 = args.fp8;
    // 16-byte chunks per lane and row in flight in gate/up (hidden 2048: the whole row).
    constexpr int kGateUpUnroll = kFp8 ? 4 : 8;
    extern __shared__ uint4 smem4[];
    const int32_t T = p.num_tokens, K = p.top_k, H = p.hidden, I = p.inter, E = p.num_experts, TK = T * K;
    const int32_t kbH = (H + 127) / 128, kbI = (I + 127) / 128, hvec = H / 8;
    const int32_t hchunks = kFp8 ? H / 16 : H / 8, ichunks = kFp8 ? I / 16 : I / 8;  // 16-byte chunks of a row
    const smem_layout L = layout_of(T, K, E, H, I, kFp8);
    unsigned char* const base = reinterpret_cast<unsigned char*>(smem4);
    const uint4* x_s = reinterpret_cast<const uint4*>(base);            // [T, hchunks]: FP8 codes or bf16
    const uint4* act_s = reinterpret_cast<const uint4*>(base + L.act);  // [K, ichunks]: this block's token
    float* xs = reinterpret_cast<float*>(base + L.scales);              // FP8: [T, kbH]
    float* as = xs + size_t(T) * kbH;                                   // FP8: [K, kbI]
    float* logits_s = reinterpret_cast<float*>(base + L.stage);         // [T, E], the top-k only
    __shared__ int32_t slot_s[kT * kMaxTopK];                           // per choice t * top_k + j
    __shared__ float weight_s[kT * kMaxTopK];
    __shared__ int32_t offsets_s[kMaxExperts + 1];
    __shared__ int32_t rslots_s[kSmemSlots];
    uint32_t* barrier = reinterpret_cast<uint32_t*>(p.scratch);  // [arrivals, blocks done]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int32_t G = gridDim.x;
    const int64_t gw = int64_t(warp) * G + blockIdx.x;  // warps numbered across blocks first: rows spread over SMs
    const int64_t W = int64_t(G) * kWarps;
    const bool fused_router = p.router_w != nullptr;
    const uint8_t* w_gate_up = kFp8 ? f8.w_gate_up : reinterpret_cast<const uint8_t*>(p.w_gate_up);
    const uint8_t* w_down = kFp8 ? f8.w_down : reinterpret_cast<const uint8_t*>(p.w_down);
    constexpr size_t kElt = kFp8 ? 1 : 2;

    // Nothing earlier writes the router rows or the replica tables: towards L2 while the kernel before ends.
    if (fused_router)
        for (int64_t e = gw; e < E; e += W)
            prefetch_l2_range(p.router_w + size_t(e) * H, size_t(H) * sizeof(bf16), lane);
    if (warp == 0) {
        prefetch_l2_range(p.replica_offsets, size_t(E + 1) * sizeof(int32_t), lane);
        prefetch_l2_range(p.replica_slots, size_t(E) * sizeof(int32_t), lane);
    }
    pdl_wait();  // x (and given logits, num_valid) come from the kernels before

    // 0. The router GEMV: lane l sums 16-byte vectors l, l + 32, ... in order, then the warp reduction, per token
    //    (launch_gemv_bf16's arithmetic).
    const auto* xv = reinterpret_cast<const uint4*>(p.x);
    if (fused_router) {
        for (int64_t e = gw; e < E; e += W) {
            const auto* w = reinterpret_cast<const uint4*>(p.router_w + size_t(e) * H);
            float acc[kT];
#pragma unroll
            for (int t = 0; t < kT; ++t) acc[t] = 0.f;
            for (int32_t v0 = lane; v0 < hvec; v0 += 32 * kRouterUnroll) {
                constexpr bool kXr = kT == 1;  // one token: its x vectors loaded beside the weights
                uint4 wv[kRouterUnroll], xr[kXr ? kRouterUnroll : 1];
#pragma unroll
                for (int i = 0; i < kRouterUnroll; ++i) {
                    const int32_t v = v0 + 32 * i;
                    if (v < hvec) {
                        wv[i] = load_stream(w + v);
                        if constexpr (kXr) xr[i] = xv[v];
                    }
                }
#pragma unroll
                for (int i = 0; i < kRouterUnroll; ++i) {
                    const int32_t v = v0 + 32 * i;
                    if (v >= hvec) break;
#pragma unroll
                    for (int t = 0; t < kT; ++t) {
                        if (t >= T) break;
                        acc[t] = dot8_bf16(wv[i], kXr ? xr[i] : __ldg(xv + size_t(t) * hvec + v), acc[t]);
                    }
                }
            }
#pragma unroll
            for (int t = 0; t < kT; ++t) {
                if (t >= T) break;
                const float y = warp_sum(acc[t]);
                if (lane == 0) p.router_logits[size_t(t) * E + e] = y;
            }
        }
    }
    for (int32_t e = threadIdx.x; e <= E; e += kThreads) offsets_s[e] = p.replica_offsets[e];
    if constexpr (kFp8) {
        // x quantized per token and 128-channel group (launch_moe_decode_fp8's first kernel does the same); ends
        // with a block sync.
        quantize_to_smem<2>(
            [&](int32_t r, int32_t c, float(&v)[4]) {
                const uint2 raw = *reinterpret_cast<const uint2*>(p.x + size_t(r) * H + c);
                const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
                const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
                v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
            },
            T, H, reinterpret_cast<uint8_t*>(base), xs);
    } else {
        for (int32_t i = threadIdx.x; i < T * hvec; i += kThreads) reinterpret_cast<uint4*>(base)[i] = xv[i];
        __syncthreads();
    }
    const int32_t num_slots = offsets_s[E];
    const bool slots_in_smem = num_slots <= kSmemSlots;
    if (slots_in_smem)
        for (int32_t i = threadIdx.x; i < num_slots; i += kThreads) rslots_s[i] = p.replica_slots[i];
    if (fused_router)
        grid_barrier(barrier, G);  // the logits are complete; also syncs the block (the slots table)
    else
        __syncthreads();

    // 1. The softmax top-k in every block (the same logits and order: the same choices everywhere).
    for (int32_t i = threadIdx.x; i < T * E; i += kThreads) logits_s[i] = __ldcg(p.router_logits + i);
    __syncthreads();
    const int32_t num_valid = p.num_valid != nullptr ? *p.num_valid : T;
    for (int32_t t = warp; t < T; t += kWarps) {
        int32_t my_id;
        float my_weight;
        warp_softmax_topk<kPerLane, true>(logits_s + size_t(t) * E, E, K, p.renormalize, &my_id, &my_weight);
        if (lane < K) {
            // launch_moe_route's rule: token t takes replica t % (the expert's replicas).
            const int32_t first = offsets_s[my_id], n = offsets_s[my_id + 1] - first;
            const int32_t slot = slots_in_smem ? rslots_s[first + t % n] : p.replica_slots[first + t % n];
            const int32_t a = t * K + lane;
            slot_s[a] = slot;
            weight_s[a] = my_weight;
            if (blockIdx.x == 0) {
                p.topk_weights[a] = my_weight;
                p.slot_ids[a] = slot;
                if (t < num_valid && p.expert_counts != nullptr) atomicAdd(&p.expert_counts[my_id], 1);
            }
        }
    }
    __syncthreads();  // also: the logits (aliasing the staging area) are read

    // 2. gate/up: item (column n, choice a); each lane's chunks c = lane, lane + 32, ... (launch_moe_decode_fp8's and
    //    moe_decode's order).
    const int64_t items = int64_t(TK) * I;
    for (int64_t item = gw; item < items; item += W) {
        const int32_t n = int32_t(item / TK), a = int32_t(item % TK), t = a / K, slot = slot_s[a];
        const auto* g_row = reinterpret_cast<const uint4*>(w_gate_up + (size_t(slot) * 2 * I + n) * H * kElt);
        const uint4* u_row = g_row + size_t(I) * hchunks;
        const float* gs = kFp8 ? f8.w_gate_up_scales + (size_t(slot) * 2 * kbI + n / 128) * kbH : nullptr;
        const float* us = kFp8 ? f8.w_gate_up_scales + ((size_t(slot) * 2 + 1) * kbI + n / 128) * kbH : nullptr;
        const uint4* xrow = x_s + size_t(t) * hchunks;
        float ag = 0.f, au = 0.f;
        for (int32_t c0 = lane; c0 < hchunks; c0 += 32 * kGateUpUnroll) {
            uint4 wg[kGateUpUnroll], wu[kGateUpUnroll];
            float sg[kGateUpUnroll], su[kGateUpUnroll];
#pragma unroll
            for (int i = 0; i < kGateUpUnroll; ++i) {
                const int32_t c = c0 + 32 * i;
                if (c < hchunks) {
                    wg[i] = load_stream(g_row + c);
                    wu[i] = load_stream(u_row + c);
                    if constexpr (kFp8) sg[i] = __ldg(gs + c / 8), su[i] = __ldg(us + c / 8);
                }
            }
#pragma unroll
            for (int i = 0; i < kGateUpUnroll; ++i) {
                const int32_t c = c0 + 32 * i;
                if (c >= hchunks) break;
                const uint4 x = xrow[c];
                if constexpr (kFp8) {
                    const float sa = xs[t * kbH + c / 8];
                    ag = fmaf(dot16(wg[i], x), sa * sg[i], ag);
                    au = fmaf(dot16(wu[i], x), sa * su[i], au);
                } else {
                    ag = dot8_bf16(wg[i], x, ag);
                    au = dot8_bf16(wu[i], x, au);
                }
            }
        }
        ag = warp_sum(ag);
        au = warp_sum(au);
        if (lane == 0) {
            if constexpr (kFp8)
                static_cast<float*>(p.act)[size_t(a) * I + n] = __fdividef(ag, 1.f + __expf(-ag)) * au;
            else
                static_cast<bf16*>(p.act)[size_t(a) * I + n] = __float2bfloat16(ag / (1.f + __expf(-ag)) * au);
        }
    }

    // 3's assignment: block b serves token tb = b % T with the token's Gt blocks (bt its index among them) and Wt
    // warps.
    const int32_t tb = int32_t(blockIdx.x % T), Gt = (G - tb + T - 1) / T, bt = int32_t(blockIdx.x / T);
    const int64_t gwt = int64_t(warp) * Gt + bt, Wt = int64_t(Gt) * kWarps;
    const int32_t* tslot = slot_s + tb * K;
    const float* tweight = weight_s + tb * K;
    // This warp's first hidden row: the first kGroup choices' first chunks (and FP8 block scales) copied into shared
    // memory now (the slots are known), to arrive during the barrier. Each lane copies exactly the chunks it
    // multiplies first.
    const int32_t stage_chunks = L.stage_chunks, pre_chunks = L.pre_chunks;
    uint4* stage = reinterpret_cast<uint4*>(base + L.stage) + size_t(warp) * kGroup * pre_chunks;  // [kGroup][pre]
    float* stage_scales = reinterpret_cast<float*>(base + L.stage_scales) +
                          warp * kGroup * stage_chunks * 32;  // FP8: [kGroup][stage_chunks][32]
    const bool staged = gwt < H;  // holds (h = gwt, the first kGroup choices, chunks below pre_chunks)
    if (staged) {
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
            if (j >= K) break;
            const size_t slot = size_t(tslot[j]);
            const uint4* row = reinterpret_cast<const uint4*>(w_down + (slot * H + gwt) * I * kElt);
#pragma unroll
            for (int i = 0; i < kMaxStageChunks; ++i) {
                const int32_t c = lane + 32 * i;
                if (i < stage_chunks && c < ichunks) {
                    sm90::cp_async_16(stage + j * pre_chunks + c, row + c, true);
                    if constexpr (kFp8) {
                        const float* scales = f8.w_down_scales + (slot * kbH + gwt / 128) * kbI;
                        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(
                                         sm90::smem_addr(stage_scales + (j * stage_chunks + i) * 32 + lane)),
                                     "l"(scales + c / 8)
                                     : "memory");
                    }
                }
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    grid_barrier(barrier, fused_router ? 2 * G : G);
    pdl_launch_dependents();  // every block is resident and past its last barrier

    // 3. The token's act into shared memory (written by other blocks: read through L2), FP8 quantized per choice and
    //    128-channel group as launch_moe_decode_fp8's second kernel does; then down with the weighted sum.
    if constexpr (kFp8) {
        quantize_to_smem<kActBatch>(
            [&](int32_t r, int32_t c, float(&v)[4]) {
                const float4 x = __ldcg(
                    reinterpret_cast<const float4*>(static_cast<const float*>(p.act) + (size_t(tb) * K + r) * I + c));
                v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
            },
            K, I, reinterpret_cast<uint8_t*>(base + L.act), as);
    } else {
        const uint4* act = reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.act) + size_t(tb) * K * I);
        for (int32_t i = threadIdx.x; i < K * ichunks; i += kThreads)
            reinterpret_cast<uint4*>(base + L.act)[i] = __ldcg(act + i);
        __syncthreads();
    }
    if (staged) asm volatile("cp.async.wait_all;\n" ::: "memory");  // this lane's own copies
    uint4 wv[kGroup];
    float sc[kGroup];
    for (int64_t h = gwt; h < H; h += Wt) {
        float s = 0.f;
        for (int32_t j0 = 0; j0 < K; j0 += kGroup) {
            float y[kGroup];
#pragma unroll
            for (int j = 0; j < kGroup; ++j) y[j] = 0.f;
            for (int32_t c = lane; c < ichunks; c += 32) {
                const bool from_stage = staged && h == gwt && j0 == 0 && c < pre_chunks;
#pragma unroll
                for (int j = 0; j < kGroup; ++j) {
                    if (j0 + j >= K) continue;
                    if (from_stage) {  // chunk c is this lane's staged chunk (c - lane) / 32
                        wv[j] = stage[j * pre_chunks + c];
                        if constexpr (kFp8) sc[j] = stage_scales[(j * stage_chunks + (c - lane) / 32) * 32 + lane];
                    } else {
                        const size_t slot = size_t(tslot[j0 + j]);
                        wv[j] = load_stream(reinterpret_cast<const uint4*>(w_down + (slot * H + h) * I * kElt) + c);
                        if constexpr (kFp8) sc[j] = __ldg(f8.w_down_scales + (slot * kbH + h / 128) * kbI + c / 8);
                    }
                }
#pragma unroll
                for (int j = 0; j < kGroup; ++j)
                    if (j0 + j < K) {
                        const uint4 x = act_s[size_t(j0 + j) * ichunks + c];
                        if constexpr (kFp8)
                            y[j] = fmaf(dot16(wv[j], x), as[(j0 + j) * kbI + c / 8] * sc[j], y[j]);
                        else
                            y[j] = dot8_bf16(wv[j], x, y[j]);
                    }
            }
#pragma unroll
            for (int j = 0; j < kGroup; ++j)
                if (j0 + j < K) {
                    const float yj = __bfloat162float(__float2bfloat16_rn(warp_sum(y[j])));
                    s = fmaf(tweight[j0 + j], yj, s);
                }
        }
        if (lane == 0) p.out[size_t(tb) * H + h] = __float2bfloat16_rn(s);
    }

    // The last block out leaves the barrier counters zero for the next launch.
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(barrier + 1, 1u) == uint32_t(G) - 1) {
        barrier[0] = 0;
        barrier[1] = 0;
    }
}

template <int kT, bool kFp8>
void launch_tokens(const moe_decode_one_launch_params& p, cudaStream_t stream) {
    const size_t smem = layout_of(p.num_tokens, p.top_k, p.num_experts, p.hidden, p.inter, kFp8).total;
    DISPATCH_EXPERTS_PER_LANE(p.num_experts, kPerLane, {
        const auto kernel = moe_decode_one_launch_kernel<kT, kPerLane, kFp8>;
        ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
        int device = 0, sms = 0, per_sm = 0;
        ZMOE_CUDA_CHECK(cudaGetDevice(&device));
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        ZMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
        ZMOE_KERNEL_REQUIRE(per_sm >= 1, "moe_decode_one_launch: the kernel does not fit a multiprocessor");
        // Enough warps for the widest phase, never more blocks than fit at once (the grid barriers need them all),
        // and at least one block per token (each block serves one token's down rows).
        const int64_t tk = int64_t(p.num_tokens) * p.top_k;
        const int64_t rows =
            std::max<int64_t>({int64_t(p.num_experts), tk * p.inter, int64_t(p.num_tokens) * p.hidden});
        const int64_t blocks = std::min<int64_t>((rows + kWarps - 1) / kWarps, int64_t(per_sm) * sms);
        ZMOE_KERNEL_REQUIRE(blocks >= p.num_tokens, "moe_decode_one_launch: fewer resident blocks than tokens");
        launch_pdl(kernel, dim3(uint32_t(blocks)), dim3(kThreads), smem, stream,
                   one_launch_args{p, p.fp8 != nullptr ? *p.fp8 : moe_fp8_experts{}});
    });
}

template <bool kFp8>
void launch_format(const moe_decode_one_launch_params& p, cudaStream_t stream) {
    if (p.num_tokens == 1)
        launch_tokens<1, kFp8>(p, stream);
    else if (p.num_tokens == 2)
        launch_tokens<2, kFp8>(p, stream);
    else if (p.num_tokens <= 4)
        launch_tokens<4, kFp8>(p, stream);
    else if (p.num_tokens <= 8)
        launch_tokens<8, kFp8>(p, stream);
    else
        launch_tokens<16, kFp8>(p, stream);
}

}  // namespace

bool moe_decode_one_launch_supported(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t hidden,
                                     int32_t inter, bool fp8) {
    return num_tokens >= 1 && num_tokens <= kMoeDecodeOneLaunchMaxTokens && top_k >= 1 && top_k <= kMaxTopK &&
           num_experts >= top_k && num_experts <= kMaxExperts && hidden % 16 == 0 && inter % 16 == 0 && hidden > 0 &&
           inter > 0 && layout_of(num_tokens, top_k, num_experts, hidden, inter, fp8).total <= kMaxSmem;
}

void launch_moe_decode_one_launch(const moe_decode_one_launch_params& p, cudaStream_t stream) {
    const bool fp8 = p.fp8 != nullptr;
    ZMOE_KERNEL_REQUIRE(moe_decode_one_launch_supported(p.num_tokens, p.top_k, p.num_experts, p.hidden, p.inter, fp8),
                        "moe_decode_one_launch: unsupported shape (moe_decode_one_launch_supported)");
    ZMOE_KERNEL_REQUIRE(p.scratch != nullptr && p.act != nullptr && p.router_logits != nullptr,
                        "moe_decode_one_launch: scratch, act and router_logits are required");
    ZMOE_KERNEL_REQUIRE(fp8 || (p.w_gate_up != nullptr && p.w_down != nullptr),
                        "moe_decode_one_launch: BF16 weights are required without fp8");
    ZMOE_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
                            (p.router_w == nullptr || reinterpret_cast<uintptr_t>(p.router_w) % 16 == 0),
                        "moe_decode_one_launch: router_w and x must be 16-byte aligned");
    if (fp8)
        launch_format<true>(p, stream);
    else
        launch_format<false>(p, stream);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels::detail
