// Dense BF16 GEMV for a few rows of activations (decode steps of a few sequences): y[m, n] = x[m, k] . w[n, k]^T
// (+ bias[n]), fp32 accumulation. Memory bound: w is streamed once, so the kernel keeps many 16-byte loads in flight.
//
// Blocks of eight warps; x is staged once per block in shared memory (bf16 [m][k], 16-byte rows), optionally
// through the RMSNorm before the GEMV (each block normalises the few rows itself: one launch and one pass over x
// fewer than launch_rms_norm + GEMV, the same bits). A warp owns R consecutive rows of w at a time (grid-stride over
// the rows): lane j reads 16-byte chunks j, j + 32, ... of each row, 16 / R chunks per row in flight (a row of 2048
// BF16 in one round trip), converts each chunk once and multiplies it with the m rows of x; the lanes' partial sums
// meet in a warp reduction (fixed order: deterministic). Launched programmatically dependent (pdl.cuh): each warp
// issues the loads of its first rows into registers before waiting for the kernel before it, so the weights stream
// in while that kernel ends. Optionally (the QKV projection) RoPE + q/k norm + KV-cache write run in the epilogue:
// a ticket per head, and the warp that finishes a head's rows last rotates it (rope_head.cuh, the rope kernel's
// code), one launch fewer per layer.

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/pdl.cuh"
#include "kernels/rope_head.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxBlocks = 4096;  // grid-stride beyond (enough to fill any current GPU several times)
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

/// This warp's weight chunks c0, c0 + 32, ... (kUnroll of them) of rows row0 .. row0 + R - 1 (rows past n: zeros).
template <int R, int kUnroll>
__device__ __forceinline__ void load_chunks(const gemv_bf16_params& p, int64_t row0, int32_t c0, int32_t kv,
                                            uint4 (&wv)[R][kUnroll]) {
    const uint4* w = reinterpret_cast<const uint4*>(p.w);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r)
            wv[r][u] = row0 + r < p.n && c0 + 32 * u < kv ? load_stream(w + (row0 + r) * kv + c0 + 32 * u)
                                                          : make_uint4(0, 0, 0, 0);
}

/// x (m rows of k) into shared memory as BF16; with p.norm_weight, RMSNorm(x (+ residual)) computed as
/// rms_norm_kernel does (this block's 256 threads, the same vectors per thread, the same reduction order), so the
/// bits are those of launch_rms_norm; block 0 writes the sum to residual_out.
template <int M>
__device__ __forceinline__ void stage_x(const gemv_bf16_params& p, uint4* x_s, int32_t kv) {
    const uint4* x = reinterpret_cast<const uint4*>(p.x);
    if (p.norm_weight == nullptr) {
        for (int32_t i = threadIdx.x; i < M * kv; i += kThreads) x_s[i] = x[i];
        return;
    }
    __shared__ float partial[M][kWarps];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float sum_sq[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
        sum_sq[m] = 0.f;
        for (int32_t vec = threadIdx.x; vec < kv; vec += kThreads) {
            const size_t at = size_t(m) * kv + vec;
            float v[8];
            to_f32x8(x[at], v);
            if (p.residual != nullptr) {
                float r[8];
                to_f32x8(reinterpret_cast<const uint4*>(p.residual)[at], r);
#pragma unroll
                for (int j = 0; j < 8; ++j) v[j] = __bfloat162float(__float2bfloat16(v[j] + r[j]));
            }
            bf16* s = reinterpret_cast<bf16*>(x_s + at);
            detail::store_f32x8(s, v);  // s is BF16 already: stored exactly
            if (blockIdx.x == 0 && p.residual_out != nullptr) detail::store_f32x8(p.residual_out + at * 8, v);
#pragma unroll
            for (int j = 0; j < 8; ++j) sum_sq[m] += v[j] * v[j];
        }
        sum_sq[m] = detail::warp_sum(sum_sq[m]);
        if (lane == 0) partial[m][warp] = sum_sq[m];
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const float total = detail::warp_sum(lane < kWarps ? partial[m][lane] : 0.f);
        const float inv = rsqrtf(total / float(p.k) + p.eps);
        for (int32_t vec = threadIdx.x; vec < kv; vec += kThreads) {
            bf16* s = reinterpret_cast<bf16*>(x_s + size_t(m) * kv + vec);
            float v[8], w[8];
            detail::load_f32x8(s, v);
            detail::load_f32x8(p.norm_weight + vec * 8, w);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = v[j] * inv * w[j];
            detail::store_f32x8(s, v);
        }
    }
}

/// The q|k|v head (q heads, then KV heads whose K and V rows count together) that row belongs to, and how many
/// warp row groups of R rows make it up.
__device__ __forceinline__ int32_t rope_unit(const rope_qk_norm_kv_params& r, int64_t row, int R, int32_t* groups) {
    const int32_t hd = r.head_dim, q_size = r.num_q_heads * hd, kv_size = r.num_kv_heads * hd;
    const auto i = int32_t(row);
    *groups = (i < q_size ? hd : 2 * hd) / R;
    if (i < q_size) return i / hd;
    return r.num_q_heads + ((i - q_size) % kv_size) / hd;
}

template <int M, int R, bool kF32>
__global__ void __launch_bounds__(kThreads) gemv_bf16_kernel(const gemv_bf16_params p) {
    constexpr int kUnroll = 16 / R;  // 16-byte chunks of one row in flight per lane: 16 loads per lane in all
    extern __shared__ __align__(16) unsigned char smem[];  // x: [M][k] bf16
    uint4* x_s = reinterpret_cast<uint4*>(smem);
    const int32_t kv = p.k / 8;  // 16-byte chunks per row
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row_step = int64_t(gridDim.x) * kWarps * R;
    int64_t row0 = (int64_t(blockIdx.x) * kWarps + warp) * R;
    // The weights depend on no earlier kernel: this warp's first loads are issued before waiting for the kernel
    // before it, so they stream in while that kernel ends.
    uint4 wv[R][kUnroll];
    load_chunks<R, kUnroll>(p, row0, lane, kv, wv);
    detail::pdl_wait();
    detail::pdl_launch_dependents();
    stage_x<M>(p, x_s, kv);
    __syncthreads();

    bool loaded = true;
    for (; row0 < p.n; row0 += row_step) {
        float acc[R][M];
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
        for (int32_t c0 = lane; c0 < kv; c0 += 32 * kUnroll) {
            if (!loaded) load_chunks<R, kUnroll>(p, row0, c0, kv, wv);
            loaded = false;
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int32_t c = c0 + 32 * u;
                if (c >= kv) break;
                float wf[R][8];
#pragma unroll
                for (int r = 0; r < R; ++r) to_f32x8(wv[r][u], wf[r]);
#pragma unroll
                for (int m = 0; m < M; ++m) {
                    float xf[8];
                    to_f32x8(x_s[m * kv + c], xf);
#pragma unroll
                    for (int r = 0; r < R; ++r)
#pragma unroll
                        for (int e = 0; e < 8; ++e) acc[r][m] += wf[r][e] * xf[e];
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const bool live = row0 + r < p.n;
            const bool bias = live && p.bias != nullptr;
            const float b = bias ? __bfloat162float(p.bias[row0 + r]) : 0.f;
#pragma unroll
            for (int m = 0; m < M; ++m) {
                float v = detail::warp_sum(acc[r][m]);
                // A BF16 output's bias meets the BF16-rounded product, as launch_add_bias after cuBLASLt does: both
                // paths round alike.
                if (bias) v = (kF32 ? v : __bfloat162float(__float2bfloat16(v))) + b;
                if (lane == r * M + m && live) {
                    const size_t at = size_t(m) * p.n + row0 + r;
                    if constexpr (kF32)
                        static_cast<float*>(p.y)[at] = v;
                    else
                        static_cast<bf16*>(p.y)[at] = __float2bfloat16(v);
                }
            }
        }
        if constexpr (!kF32) {
            if (p.rope_counters != nullptr) {
                // A ticket per head: the warp that writes a head's last rows rotates that head for every row of x.
                int32_t groups = 0;
                const int32_t unit = rope_unit(p.rope, row0, R, &groups);
                __threadfence();  // this warp's outputs are visible before its ticket is
                __syncwarp();
                int last = 0;
                if (lane == 0) {
                    last = atomicAdd(&p.rope_counters[unit], 1) == groups - 1;
                    if (last) p.rope_counters[unit] = 0;  // ready for the next launch
                }
                if (__shfl_sync(detail::kFullMask, last, 0)) {
                    __threadfence();
                    rope_qk_norm_kv_params r = p.rope;
                    r.qkv = static_cast<const bf16*>(p.y);
                    for (int32_t t = 0; t < M; ++t) detail::rope_one_head(r, t, unit, lane);
                }
            }
        }
    }
}

template <int M, int R, bool kF32>
void launch_one(const gemv_bf16_params& p, cudaStream_t stream) {
    const size_t smem = size_t(M) * p.k * sizeof(bf16);
    ZMOE_CUDA_CHECK(
        cudaFuncSetAttribute(gemv_bf16_kernel<M, R, kF32>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
    const int64_t blocks = std::min<int64_t>((int64_t(p.n) + kWarps * R - 1) / (kWarps * R), kMaxBlocks);
    detail::launch_pdl(gemv_bf16_kernel<M, R, kF32>, dim3(int(blocks)), dim3(kThreads), smem, stream, p);
}

template <int M>
void launch_rows(const gemv_bf16_params& p, cudaStream_t stream) {
    // Two rows per warp once there are enough rows to fill the GPU with warps anyway (more loads in flight each).
    const bool two = p.n >= 4096;
    if (p.y_fp32)
        two ? launch_one<M, 2, true>(p, stream) : launch_one<M, 1, true>(p, stream);
    else
        two ? launch_one<M, 2, false>(p, stream) : launch_one<M, 1, false>(p, stream);
}

}  // namespace

bool rope_gemv_supported(qk_norm_mode norm, int32_t head_dim) {
    return norm != qk_norm_mode::whole && head_dim > 0 && head_dim % 8 == 0 &&
           head_dim <= 2 * 32 * detail::kRopeMaxPairsPerLane;
}

bool gemv_bf16_supported(int32_t m, int32_t n, int32_t k) {
    return m >= 1 && m <= kGemvMaxRows && n >= 1 && k >= 8 && k % 8 == 0 && size_t(m) * k * sizeof(bf16) <= kMaxSmem;
}

void launch_gemv_bf16(const gemv_bf16_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.m == 0 || gemv_bf16_supported(p.m, p.n, p.k),
                        "gemv_bf16: m in [1, kGemvMaxRows], k a multiple of 8, m * k * 2 bytes <= 64 KB");
    ZMOE_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0,
                        "gemv_bf16: x and w must be 16-byte aligned");
    ZMOE_KERNEL_REQUIRE(
        p.norm_weight == nullptr || (p.residual_out != p.x && (p.residual == nullptr || p.residual_out != p.residual)),
        "gemv_bf16: the fused norm's residual_out must alias neither x nor residual");
    if (p.rope_counters != nullptr) {
        const rope_qk_norm_kv_params& r = p.rope;
        ZMOE_KERNEL_REQUIRE(!p.y_fp32 && rope_gemv_supported(r.norm, r.head_dim) && r.num_tokens == p.m &&
                                int64_t(r.num_q_heads + 2 * r.num_kv_heads) * r.head_dim == p.n &&
                                (r.norm == qk_norm_mode::none || (r.q_norm_weight && r.k_norm_weight)),
                            "gemv_bf16: the fused RoPE needs a BF16 q|k|v output of m tokens, per-head or no q/k "
                            "norm (weights given) and head_dim a multiple of 8 up to 256");
    }
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
