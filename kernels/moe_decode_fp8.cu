// The FP8 routed experts for a few tokens (launch_moe_decode_fp8): two launches of one warp per output element,
// reading each e4m3 weight row once per token with 16-byte loads (the rows of all of a warp's choices in flight
// together), the activations quantized per 128-channel group into shared memory by every block (a few KB: cheaper
// than another launch). The grouped path's tiles of 64 rows would multiply 63 padding rows per expert here.
// Both launches are programmatically dependent (pdl.cuh): gate/up waits for the router before anything, then lets
// the down kernel launch; the down kernel prefetches its weight rows into L2 (the slots are the router's, complete
// once gate/up is past its wait) before waiting for gate/up's act.

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda_check.hpp"
#include "kernels/moe_decode_fp8.hpp"
#include "kernels/pdl.cuh"

namespace zmoe::kernels::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxTopK = 16;
constexpr int kGroup = 8;      // down: choices whose rows are in flight together
constexpr int kPreChunks = 4;  // gate/up with preload: 16-byte chunks per lane and row loaded before x's quantization
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

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
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

/// (1) act[pair, n] = silu(gate) * up, one warp per (pair, n). kPreload: the warp's first kPreChunks 16-byte chunks
/// of its gate and up rows are loaded before the block quantizes x, so that their DRAM latency overlaps that of x.
template <bool kPreload>
__global__ void __launch_bounds__(kThreads) gate_up_kernel(const moe_decode_fp8_params p) {
    extern __shared__ uint4 smem4[];
    constexpr int kPre = kPreload ? kPreChunks : 1;
    pdl_wait();  // x and the router's slots and weights come from the kernels before
    pdl_launch_dependents();
    const int32_t H = p.hidden, I = p.inter, kbH = (H + 127) / 128, nbI = (I + 127) / 128, chunks = H / 16;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t item = int64_t(blockIdx.x) * kWarps + warp;
    const bool active = item < int64_t(p.num_tokens) * p.top_k * I;
    const int32_t pair = active ? int32_t(item / I) : 0, n = active ? int32_t(item % I) : 0, t = pair / p.top_k;
    const int32_t slot = active ? p.slot_ids[pair] : 0;
    const moe_fp8_experts& f = p.fp8;
    const uint4* g_row = reinterpret_cast<const uint4*>(f.w_gate_up + (size_t(slot) * 2 * I + n) * H);
    const uint4* u_row = g_row + size_t(I) * H / 16;
    uint4 pg[kPre], pu[kPre];
#pragma unroll
    for (int i = 0; i < kPre; ++i) {
        const int32_t c = lane + 32 * i;
        pg[i] = pu[i] = make_uint4(0, 0, 0, 0);
        if (kPreload && active && c < chunks) {
            pg[i] = __ldg(g_row + c);
            pu[i] = __ldg(u_row + c);
        }
    }
    uint8_t* xq = reinterpret_cast<uint8_t*>(smem4);
    float* xs = reinterpret_cast<float*>(xq + size_t(p.num_tokens) * H);
    quantize_to_smem<2>(
        [&](int32_t r, int32_t c, float(&v)[4]) {
            const uint2 raw = *reinterpret_cast<const uint2*>(p.x + size_t(r) * H + c);
            const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
            const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
            v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
        },
        p.num_tokens, H, xq, xs);
    if (!active) return;
    const float* gs = f.w_gate_up_scales + (size_t(slot) * 2 * nbI + n / 128) * kbH;
    const float* us = f.w_gate_up_scales + ((size_t(slot) * 2 + 1) * nbI + n / 128) * kbH;
    const uint4* xrow = reinterpret_cast<const uint4*>(xq + size_t(t) * H);
    float ag = 0.f, au = 0.f;
    // Chunk c (16 e4m3) of both rows: the same fp32 sums, in the same order, with or without the preload.
    const auto step = [&](const uint4& wg, const uint4& wu, int32_t c) {
        const uint4 a = xrow[c];
        const int32_t kb = c / 8;
        const float sa = xs[t * kbH + kb];
        ag = fmaf(dot16(wg, a), sa * __ldg(gs + kb), ag);
        au = fmaf(dot16(wu, a), sa * __ldg(us + kb), au);
    };
    int32_t c0 = lane;
    if constexpr (kPreload) {
#pragma unroll
        for (int i = 0; i < kPre; ++i)
            if (lane + 32 * i < chunks) step(pg[i], pu[i], lane + 32 * i);
        c0 = lane + 32 * kPre;
    }
#pragma unroll 4
    for (int32_t c = c0; c < chunks; c += 32) step(__ldg(g_row + c), __ldg(u_row + c), c);
    ag = warp_sum(ag);
    au = warp_sum(au);
    if (lane == 0) p.act[size_t(pair) * I + n] = __fdividef(ag, 1.f + __expf(-ag)) * au;
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
    const size_t s1 = gate_up_smem(p.num_tokens, p.hidden), s2 = down_smem(pairs, p.inter);
    const auto gate_up = p.preload_weights ? gate_up_kernel<true> : gate_up_kernel<false>;
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(gate_up, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(down_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
    const int64_t items1 = int64_t(pairs) * p.inter, items2 = int64_t(p.num_tokens) * p.hidden;
    launch_pdl(gate_up, dim3(unsigned((items1 + kWarps - 1) / kWarps)), dim3(kThreads), s1, stream, p);
    launch_pdl(down_kernel, dim3(unsigned((items2 + kWarps - 1) / kWarps)), dim3(kThreads), s2, stream, p);
}

}  // namespace zmoe::kernels::detail
