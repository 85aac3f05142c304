// The FP8 routed experts of a few tokens with their router in ONE launch (launch_moe_decode_fp8_one): the router
// launch and launch_moe_decode_fp8's two launches as phases of one grid of resident blocks (two per multiprocessor,
// the grid sized from the occupancy), meeting at grid barriers, as moe_decode.cu does for BF16:
//   0. before the programmatic wait, the router rows and the replica tables towards L2; then the router GEMV, one warp
//      per expert (launch_gemv_bf16's lanes and order), the logits to global memory; every block quantizes x into
//      shared memory and copies the replica tables meanwhile; grid barrier;
//   1. every block runs the same softmax top-k over the logits (one warp per token): the slots and weights in its
//      shared memory, no launch between; block 0 writes them out and counts the valid tokens' choices;
//   2. gate/up: one warp per (FFN column, choice), columns outermost so that choices of one expert read its row at the
//      same time (the second read an L2 hit), dealt round-robin over the grid's warps (numbered across blocks first,
//      so a round covers every multiprocessor), each item's gate and up rows in flight together; act in fp32 to
//      global memory; then each warp copies its first down rows into shared memory (cp.async: no registers held over
//      the barrier), to arrive during it;
//   3. each block serves one token (block b token b % num_tokens: a block needs only its token's act, which it
//      quantizes into shared memory as launch_moe_decode_fp8's second kernel does), one warp per hidden row of that
//      token: the token's choices summed in fp32, each rounded to bf16 and weighted in top-k order, written to out.
// Every sum has launch_moe_decode_fp8's lanes and order (moe_decode_fp8_common.cuh), the router's launch_gemv_bf16's,
// the top-k launch_router_topk's: for the same logits the outputs are those of the three launches bit for bit.

#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/dispatch.cuh"
#include "kernels/grid_barrier.cuh"
#include "kernels/moe_decode_fp8.hpp"
#include "kernels/moe_decode_fp8_common.cuh"
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
constexpr int kGateUpUnroll = 4;         // gate/up: 16-byte chunks per lane and row in flight (hidden 2048: the row)
constexpr int kStageChunks = 2;          // down: chunks per lane and row of the first rows staged (inter 1024: the row)
constexpr int kActBatch = 6;             // act's quantization: items per warp loaded together (Qwen3: 48 over 8 warps)
constexpr size_t kMaxSmem = 200u << 10;  // dynamic shared memory (two blocks per multiprocessor need < 113 KB each)

/// Dynamic shared memory, in order: x's codes [T, hidden], this block's token's act codes [top_k, inter] (each padded
/// to 16 bytes), x's scales [T, hidden / 128] and act's [top_k, inter / 128] fp32 (padded to 16 bytes); then the
/// staging area: per warp its first down rows' chunks [kGroup][min(inter / 16, 32 * kStageChunks)] x 16 bytes, then
/// per warp their block scales [kGroup][kStageChunks][32] fp32. The logits [T, num_experts] fp32 alias the staging
/// area (read in the top-k only, before anything is staged); it is at least their size.
struct smem_layout {
    size_t aq, xs, stage, stage_scales, total;
    int32_t pre_chunks;
};
__host__ __device__ inline smem_layout layout_of(int32_t T, int32_t K, int32_t E, int32_t H, int32_t I) {
    const auto up16 = [](size_t n) { return (n + 15) / 16 * 16; };
    smem_layout l{};
    l.pre_chunks = I / 16 < 32 * kStageChunks ? I / 16 : 32 * kStageChunks;
    l.aq = up16(size_t(T) * H);
    l.xs = l.aq + up16(size_t(K) * I);
    l.stage = l.xs + up16((size_t(T) * ((H + 127) / 128) + size_t(K) * ((I + 127) / 128)) * sizeof(float));
    l.stage_scales = l.stage + size_t(kWarps) * kGroup * l.pre_chunks * 16;
    const size_t staging = l.stage_scales - l.stage + size_t(kWarps) * kGroup * kStageChunks * 32 * sizeof(float);
    const size_t logits = up16(size_t(T) * E * sizeof(float));
    l.total = l.stage + (staging > logits ? staging : logits);
    return l;
}

template <int kT, int kPerLane>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) moe_decode_fp8_one_kernel(const moe_decode_fp8_one_params p) {
    extern __shared__ uint4 smem4[];
    const int32_t T = p.num_tokens, K = p.top_k, H = p.hidden, I = p.inter, E = p.num_experts, TK = T * K;
    const int32_t kbH = (H + 127) / 128, kbI = (I + 127) / 128, hvec = H / 8, hchunks = H / 16, ichunks = I / 16;
    const smem_layout L = layout_of(T, K, E, H, I);
    unsigned char* const base = reinterpret_cast<unsigned char*>(smem4);
    uint8_t* xq = base;                                          // [T, H]
    uint8_t* aq = base + L.aq;                                   // [K, I]: this block's token
    float* xs = reinterpret_cast<float*>(base + L.xs);           // [T, kbH]
    float* as = xs + size_t(T) * kbH;                            // [K, kbI]
    float* logits_s = reinterpret_cast<float*>(base + L.stage);  // [T, E], the top-k only
    __shared__ int32_t slot_s[kT * kMaxTopK];                    // per choice t * top_k + j
    __shared__ float weight_s[kT * kMaxTopK];
    __shared__ int32_t offsets_s[kMaxExperts + 1];
    __shared__ int32_t rslots_s[kSmemSlots];
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

    // 0. The router GEMV: lane l sums 16-byte vectors l, l + 32, ... in order, then the warp reduction, per token
    //    (launch_gemv_bf16's arithmetic).
    if (fused_router) {
        const auto* xv = reinterpret_cast<const uint4*>(p.x);
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
                    float wf[8];
                    load_f32x8(reinterpret_cast<const bf16*>(&wv[i]), wf);
#pragma unroll
                    for (int t = 0; t < kT; ++t) {
                        if (t >= T) break;
                        float xf[8];
                        const uint4 xt = kXr ? xr[i] : __ldg(xv + size_t(t) * hvec + v);
                        load_f32x8(reinterpret_cast<const bf16*>(&xt), xf);
#pragma unroll
                        for (int k = 0; k < 8; ++k) acc[t] += wf[k] * xf[k];
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
    // x quantized per token and 128-channel group (launch_moe_decode_fp8's first kernel does the same); ends with a
    // block sync.
    quantize_to_smem<2>(
        [&](int32_t r, int32_t c, float(&v)[4]) {
            const uint2 raw = *reinterpret_cast<const uint2*>(p.x + size_t(r) * H + c);
            const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
            const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
            v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
        },
        T, H, xq, xs);
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

    // 2. gate/up: item (column n, choice a); each lane's chunks c = lane, lane + 32, ... as launch_moe_decode_fp8.
    const int64_t items = int64_t(TK) * I;
    for (int64_t item = gw; item < items; item += W) {
        const int32_t n = int32_t(item / TK), a = int32_t(item % TK), t = a / K, slot = slot_s[a];
        const auto* g_row = reinterpret_cast<const uint4*>(p.fp8.w_gate_up + (size_t(slot) * 2 * I + n) * H);
        const uint4* u_row = g_row + size_t(I) * H / 16;
        const float* gs = p.fp8.w_gate_up_scales + (size_t(slot) * 2 * kbI + n / 128) * kbH;
        const float* us = p.fp8.w_gate_up_scales + ((size_t(slot) * 2 + 1) * kbI + n / 128) * kbH;
        const uint4* xrow = reinterpret_cast<const uint4*>(xq + size_t(t) * H);
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
                    sg[i] = __ldg(gs + c / 8);
                    su[i] = __ldg(us + c / 8);
                }
            }
#pragma unroll
            for (int i = 0; i < kGateUpUnroll; ++i) {
                const int32_t c = c0 + 32 * i;
                if (c >= hchunks) break;
                const uint4 x = xrow[c];
                const float sa = xs[t * kbH + c / 8];
                ag = fmaf(dot16(wg[i], x), sa * sg[i], ag);
                au = fmaf(dot16(wu[i], x), sa * su[i], au);
            }
        }
        ag = warp_sum(ag);
        au = warp_sum(au);
        if (lane == 0) p.act[size_t(a) * I + n] = __fdividef(ag, 1.f + __expf(-ag)) * au;
    }

    // 3's assignment: block b serves token tb = b % T with the token's Gt blocks (bt its index among them) and Wt
    // warps.
    const int32_t tb = int32_t(blockIdx.x % T), Gt = (G - tb + T - 1) / T, bt = int32_t(blockIdx.x / T);
    const int64_t gwt = int64_t(warp) * Gt + bt, Wt = int64_t(Gt) * kWarps;
    const int32_t* tslot = slot_s + tb * K;
    const float* tweight = weight_s + tb * K;
    // This warp's first hidden row: the first kGroup choices' first chunks and their block scales copied into shared
    // memory now (the slots are known), to arrive during the barrier. Each lane copies exactly the chunks it
    // multiplies first.
    const moe_fp8_experts& f = p.fp8;
    const int32_t pre_chunks = L.pre_chunks;
    uint4* stage = reinterpret_cast<uint4*>(base + L.stage) + size_t(warp) * kGroup * pre_chunks;  // [kGroup][pre]
    float* stage_scales = reinterpret_cast<float*>(base + L.stage_scales) +
                          warp * kGroup * kStageChunks * 32;  // [kGroup][kStageChunks][32]
    const bool staged = gwt < H;  // holds (h = gwt, the first kGroup choices, chunks below pre_chunks)
    if (staged) {
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
            if (j >= K) break;
            const size_t slot = size_t(tslot[j]);
            const uint4* row = reinterpret_cast<const uint4*>(f.w_down + (slot * H + gwt) * I);
            const float* scales = f.w_down_scales + (slot * kbH + gwt / 128) * kbI;
#pragma unroll
            for (int i = 0; i < kStageChunks; ++i) {
                const int32_t c = lane + 32 * i;
                if (c < ichunks) {
                    sm90::cp_async_16(stage + j * pre_chunks + c, row + c, true);
                    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(
                                     sm90::smem_addr(stage_scales + (j * kStageChunks + i) * 32 + lane)),
                                 "l"(scales + c / 8)
                                 : "memory");
                }
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    grid_barrier(barrier, fused_router ? 2 * G : G);
    pdl_launch_dependents();  // every block is resident and past its last barrier

    // 3. The token's act quantized per choice and 128-channel group (launch_moe_decode_fp8's second kernel does the
    //    same; act was written by other blocks: read through L2), then down with the weighted sum.
    quantize_to_smem<kActBatch>(
        [&](int32_t r, int32_t c, float(&v)[4]) {
            const float4 x = __ldcg(reinterpret_cast<const float4*>(p.act + (size_t(tb) * K + r) * I + c));
            v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
        },
        K, I, aq, as);
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
                        sc[j] = stage_scales[(j * kStageChunks + (c - lane) / 32) * 32 + lane];
                    } else {
                        const size_t slot = size_t(tslot[j0 + j]);
                        wv[j] = load_stream(reinterpret_cast<const uint4*>(f.w_down + (slot * H + h) * I) + c);
                        sc[j] = __ldg(f.w_down_scales + (slot * kbH + h / 128) * kbI + c / 8);
                    }
                }
#pragma unroll
                for (int j = 0; j < kGroup; ++j)
                    if (j0 + j < K) {
                        const uint4 x = reinterpret_cast<const uint4*>(aq + size_t(j0 + j) * I)[c];
                        y[j] = fmaf(dot16(wv[j], x), as[(j0 + j) * kbI + c / 8] * sc[j], y[j]);
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

template <int kT>
void launch_tokens(const moe_decode_fp8_one_params& p, cudaStream_t stream) {
    const size_t smem = layout_of(p.num_tokens, p.top_k, p.num_experts, p.hidden, p.inter).total;
    DISPATCH_EXPERTS_PER_LANE(p.num_experts, kPerLane, {
        const auto kernel = moe_decode_fp8_one_kernel<kT, kPerLane>;
        ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
        int device = 0, sms = 0, per_sm = 0;
        ZMOE_CUDA_CHECK(cudaGetDevice(&device));
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        ZMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
        ZMOE_KERNEL_REQUIRE(per_sm >= 1, "moe_decode_fp8_one: the kernel does not fit a multiprocessor");
        // Enough warps for the widest phase, never more blocks than fit at once (the grid barriers need them all),
        // and at least one block per token (each block serves one token's down rows).
        const int64_t tk = int64_t(p.num_tokens) * p.top_k;
        const int64_t rows =
            std::max<int64_t>({int64_t(p.num_experts), tk * p.inter, int64_t(p.num_tokens) * p.hidden});
        const int64_t blocks = std::min<int64_t>((rows + kWarps - 1) / kWarps, int64_t(per_sm) * sms);
        ZMOE_KERNEL_REQUIRE(blocks >= p.num_tokens, "moe_decode_fp8_one: fewer resident blocks than tokens");
        launch_pdl(kernel, dim3(uint32_t(blocks)), dim3(kThreads), smem, stream, p);
    });
}

}  // namespace

bool moe_decode_fp8_one_supported(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t hidden,
                                  int32_t inter) {
    return num_tokens >= 1 && num_tokens <= kMoeDecodeFp8OneMaxTokens && top_k >= 1 && top_k <= kMaxTopK &&
           num_experts >= top_k && num_experts <= kMaxExperts && hidden % 16 == 0 && inter % 16 == 0 && hidden > 0 &&
           inter > 0 && layout_of(num_tokens, top_k, num_experts, hidden, inter).total <= kMaxSmem;
}

void launch_moe_decode_fp8_one(const moe_decode_fp8_one_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(moe_decode_fp8_one_supported(p.num_tokens, p.top_k, p.num_experts, p.hidden, p.inter),
                        "moe_decode_fp8_one: unsupported shape (moe_decode_fp8_one_supported)");
    ZMOE_KERNEL_REQUIRE(p.scratch != nullptr && p.act != nullptr && p.router_logits != nullptr,
                        "moe_decode_fp8_one: scratch, act and router_logits are required");
    ZMOE_KERNEL_REQUIRE(p.router_w == nullptr || (reinterpret_cast<uintptr_t>(p.router_w) % 16 == 0 &&
                                                  reinterpret_cast<uintptr_t>(p.x) % 16 == 0),
                        "moe_decode_fp8_one: router_w and x must be 16-byte aligned");
    if (p.num_tokens == 1)
        launch_tokens<1>(p, stream);
    else if (p.num_tokens == 2)
        launch_tokens<2>(p, stream);
    else if (p.num_tokens <= 4)
        launch_tokens<4>(p, stream);
    else if (p.num_tokens <= 8)
        launch_tokens<8>(p, stream);
    else
        launch_tokens<16>(p, stream);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels::detail
