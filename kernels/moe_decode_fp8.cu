// The FP8 routed experts for a few tokens (launch_moe_decode_fp8): two launches of one warp per output element,
// reading each e4m3 weight row once per token with 16-byte loads (the rows of all of a warp's choices in flight
// together), the activations quantized per 128-channel group into shared memory by every block (a few KB: cheaper
// than another launch). The grouped path's tiles of 64 rows would multiply 63 padding rows per expert here.
// Both launches are programmatically dependent (pdl.cuh): gate/up waits for the router before anything, then lets
// the down kernel launch; the down kernel prefetches its weight rows into L2 (the slots are the router's, complete
// once gate/up is past its wait) before waiting for gate/up's act.

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/moe_decode_fp8.hpp"
#include "kernels/moe_decode_fp8_common.cuh"
#include "kernels/pdl.cuh"
#include "kernels/sm90_primitives.cuh"

namespace zmoe::kernels::detail {
namespace {

using namespace fp8_decode;

constexpr int kBulkItems = 2;             // gate/up bulk: (pair, column) items per warp
constexpr int32_t kBulkMaxHidden = 4096;  // gate/up bulk: hidden sizes whose rows are staged in shared memory
constexpr size_t kMaxSmem = 96u << 10;

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
            sm90::bulk_load(rows + size_t(2 * i) * H, g_row, uint32_t(H), bar);
            sm90::bulk_load(rows + size_t(2 * i + 1) * H, g_row + size_t(I) * H, uint32_t(H), bar);
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

}  // namespace zmoe::kernels::detail
