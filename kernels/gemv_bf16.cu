// Dense BF16 GEMV for a few rows of activations (decode steps of a few sequences): y[m, n] = x[m, k] . w[n, k]^T
// (+ bias[n]), fp32 accumulation. Memory bound: w is streamed once, so the kernel keeps many 16-byte loads in flight.
//
// At most one block of eight warps per multiprocessor (at most 128 registers a thread, so that the next kernel's
// block fits beside it); x is staged once per block in shared memory (bf16 [m][k], 16-byte rows). A warp owns one
// row of w at a time (grid-stride over the rows) and walks it in steps of 8 16-byte chunks per lane (chunks j,
// j + 32, ... for lane j: a row of 2048 BF16 is one step) through two register buffers: the next step's loads are in
// flight while this step's chunks are converted and multiplied with the m rows of x; at a row's last step the
// lanes' partial sums meet in a warp reduction (fixed order: deterministic, whatever the grid). Launched
// programmatically dependent (pdl.cuh): each warp issues its first step's loads before waiting for the kernel
// before it.

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 8;  // 16-byte chunks of a row per lane and step (a row of 2048 BF16 in one step)
constexpr size_t kMaxSmem = 64u << 10;

/// Streams a weight chunk past L1 (each is read once).
__device__ __forceinline__ uint4 load_stream(const uint4* src) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(src));
    return v;
}

__device__ __forceinline__ void to_f32x8(const uint4& u, float (&f)[8]) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 v = __bfloat1622float2(h[i]);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}

/// Eight 16-byte chunks of one row of w, chunk c0 + 32 u for u < 8 (zeros past the row's end).
struct chunks {
    uint4 v[kUnroll];
};

__device__ __forceinline__ void load_chunks(const uint4* row, int32_t c0, int32_t kv, chunks& out) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
        out.v[u] = c0 + 32 * u < kv ? load_stream(row + c0 + 32 * u) : make_uint4(0, 0, 0, 0);
}

/// One step of a warp: row `row`, chunks from c0 (the lane's first).
struct step {
    int64_t row;
    int32_t c0;
};

/// A warp's steps, in order: its rows (grid-stride), each in chunk sets of 32 * kUnroll.
__device__ __forceinline__ step next_step(step s, int32_t kv, int64_t row_stride, int lane) {
    s.c0 += 32 * kUnroll;
    if (s.c0 >= kv) {
        s.c0 = lane;
        s.row += row_stride;
    }
    return s;
}

/// acc[m] += w chunks . x[m] chunks; at the row's last step the warp reduces and writes y[m, row] (+ bias).
template <int M, bool kF32>
__device__ __forceinline__ void consume(const gemv_bf16_params& p, const uint4* x_s, int32_t kv, int lane, step s,
                                        const chunks& w, float (&acc)[M]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int32_t c = s.c0 + 32 * u;
        if (c >= kv) break;
        float wf[8];
        to_f32x8(w.v[u], wf);
#pragma unroll
        for (int m = 0; m < M; ++m) {
            float xf[8];
            to_f32x8(x_s[m * kv + c], xf);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[m] += wf[e] * xf[e];
        }
    }
    if (s.c0 - lane + 32 * kUnroll < kv) return;  // more chunks of this row to come
    const bool bias = p.bias != nullptr;
    const float b = bias ? __bfloat162float(p.bias[s.row]) : 0.f;
#pragma unroll
    for (int m = 0; m < M; ++m) {
        float v = detail::warp_sum(acc[m]);
        acc[m] = 0.f;
        // A BF16 output's bias meets the BF16-rounded product, as launch_add_bias after cuBLASLt does: both paths
        // round alike.
        if (bias) v = (kF32 ? v : __bfloat162float(__float2bfloat16(v))) + b;
        if (lane == m) {
            const size_t at = size_t(m) * p.n + s.row;
            if constexpr (kF32)
                static_cast<float*>(p.y)[at] = v;
            else
                static_cast<bf16*>(p.y)[at] = __float2bfloat16(v);
        }
    }
}

template <int M, bool kF32>
__global__ void __launch_bounds__(kThreads, 2) gemv_bf16_kernel(const gemv_bf16_params p) {
    extern __shared__ __align__(16) unsigned char smem[];  // x: [M][k] bf16
    uint4* x_s = reinterpret_cast<uint4*>(smem);
    const int32_t kv = p.k / 8;  // 16-byte chunks per row
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row_stride = int64_t(gridDim.x) * kWarps;
    const uint4* w = reinterpret_cast<const uint4*>(p.w);
    step cur{int64_t(blockIdx.x) * kWarps + warp, lane};
    // The weights depend on no earlier kernel: the first step's loads go out before waiting for the kernel before
    // this one, so they stream in while it ends.
    chunks a, b;
    if (cur.row < p.n) load_chunks(w + cur.row * kv, cur.c0, kv, a);
    detail::pdl_wait();
    detail::pdl_launch_dependents();
    const uint4* x = reinterpret_cast<const uint4*>(p.x);
    for (int32_t i = threadIdx.x; i < M * kv; i += kThreads) x_s[i] = x[i];
    __syncthreads();
    if (cur.row >= p.n) return;

    // Two register buffers: the next step's loads are in flight while this step's chunks are multiplied.
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.f;
    for (;;) {
        step nxt = next_step(cur, kv, row_stride, lane);
        if (nxt.row < p.n) load_chunks(w + nxt.row * kv, nxt.c0, kv, b);
        consume<M, kF32>(p, x_s, kv, lane, cur, a, acc);
        if (nxt.row >= p.n) break;
        cur = nxt;
        nxt = next_step(cur, kv, row_stride, lane);
        if (nxt.row < p.n) load_chunks(w + nxt.row * kv, nxt.c0, kv, a);
        consume<M, kF32>(p, x_s, kv, lane, cur, b, acc);
        if (nxt.row >= p.n) break;
        cur = nxt;
    }
}

template <int M, bool kF32>
void launch_one(const gemv_bf16_params& p, cudaStream_t stream) {
    const size_t smem = size_t(M) * p.k * sizeof(bf16);
    ZMOE_CUDA_CHECK(
        cudaFuncSetAttribute(gemv_bf16_kernel<M, kF32>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
    // One block per multiprocessor at most: each warp streams its rows through two register buffers, and the block
    // leaves room on its multiprocessor for the next kernel's block (programmatic dependent launch), which then
    // issues its own weight loads while this one ends.
    int device = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&device));
    static int sms[64] = {};
    if (device < 64 && sms[device] == 0)
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms[device], cudaDevAttrMultiProcessorCount, device));
    // Two blocks per multiprocessor where every warp has many rows (the LM head): more loads in flight.
    const int64_t num_sms = device < 64 ? sms[device] : 132;
    const int64_t max_blocks = int64_t(p.n) >= 8 * kWarps * num_sms ? 2 * num_sms : num_sms;
    const int64_t blocks = std::min<int64_t>((int64_t(p.n) + kWarps - 1) / kWarps, max_blocks);
    detail::launch_pdl(gemv_bf16_kernel<M, kF32>, dim3(int(blocks)), dim3(kThreads), smem, stream, p);
}

template <int M>
void launch_rows(const gemv_bf16_params& p, cudaStream_t stream) {
    p.y_fp32 ? launch_one<M, true>(p, stream) : launch_one<M, false>(p, stream);
}

}  // namespace

bool gemv_bf16_supported(int32_t m, int32_t n, int32_t k) {
    return m >= 1 && m <= kGemvMaxRows && n >= 1 && k >= 8 && k % 8 == 0 && size_t(m) * k * sizeof(bf16) <= kMaxSmem;
}

void launch_gemv_bf16(const gemv_bf16_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.m == 0 || gemv_bf16_supported(p.m, p.n, p.k),
                        "gemv_bf16: m in [1, kGemvMaxRows], k a multiple of 8, m * k * 2 bytes <= 64 KB");
    ZMOE_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0,
                        "gemv_bf16: x and w must be 16-byte aligned");
    if (p.m == 0 || p.n == 0) return;
    switch (p.m) {
        case 1:
            launch_rows<1>(p, stream);
            break;
        case 2:
            launch_rows<2>(p, stream);
            break;
        case 3:
            launch_rows<3>(p, stream);
            break;
        case 4:
            launch_rows<4>(p, stream);
            break;
        case 5:
            launch_rows<5>(p, stream);
            break;
        case 6:
            launch_rows<6>(p, stream);
            break;
        case 7:
            launch_rows<7>(p, stream);
            break;
        default:
            launch_rows<8>(p, stream);
            break;
    }
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
