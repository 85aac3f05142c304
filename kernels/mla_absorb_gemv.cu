// MLA's absorbed projections for a decode step of a few tokens, as streaming kernels over kv_b instead of cuBLASLt's
// batched GEMMs: at one to kMlaAbsorbGemvMaxTokens tokens the 2 + 2 MB of a layer's W_k and W_v (DeepSeek-V2/V3) are
// read once at close to the copy bandwidth, the weights are loaded before the programmatic wait (they depend on no
// earlier kernel), and the next kernel may launch under this one's tail (pdl.cuh). Both sum in fp32 in a fixed order
// (deterministic) and round once to BF16, as the GEMM path does.
//
//   q_absorb: q_lat[t, h, j] = sum_i W[h (dn + dv) + i, j] q[t, h, i] (i < dn): W_k,h's rows are the K side, its
//             columns the outputs. One block per (head, 64-column slice): thread (row group g, 16-byte chunk c) holds
//             rows g, g + 32, ... of the slice's chunk c in registers; the 32 row groups' partial sums meet in shared
//             memory and are added in row-group order.
//   v_up:     out[t, h dv + i] = sum_j W[h (dn + dv) + dn + i, j] o_lat[t, h, j]: one block per (head, 16 rows), a
//             warp per two rows, each lane two 16-byte pieces of a row, the lanes' sums by a butterfly.

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/mla_gemm.hpp"
#include "kernels/pdl.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kRank = 512;                            // latent width the kernels take (DeepSeek-V2/V3)
constexpr int kSliceCols = 64;                        // q_absorb: output columns per block
constexpr int kChunksPerRow = kSliceCols / 8;         // 16-byte chunks of a slice's row: 8
constexpr int kRowGroups = kThreads / kChunksPerRow;  // 32
constexpr int kMaxRowsPerThread = 8;                  // q_absorb: nope_dim <= 256
constexpr int kVRowsPerBlock = 16;                    // v_up: output rows per block (two per warp)
constexpr int kVPieces = kRank / 8 / 32;              // v_up: 16-byte pieces of a row per lane: 2

__device__ __forceinline__ uint4 load_weights(const bf16* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 x = __bfloat1622float2(h[i]);
        f[2 * i] = x.x, f[2 * i + 1] = x.y;
    }
}

template <int kTokens>
__global__ void __launch_bounds__(kThreads) mla_q_absorb_gemv_kernel(const mla_absorb_gemm_params p) {
    // Shared memory: the row groups' partial sums, [kRowGroups][kTokens][kSliceCols] fp32 (32 KB at 4 tokens).
    __shared__ float partial[kRowGroups][kTokens][kSliceCols];
    const int32_t h = blockIdx.y, c = threadIdx.x % kChunksPerRow, g = threadIdx.x / kChunksPerRow;
    const int32_t dn = p.nope_dim, qk = p.nope_dim + p.rope_dim;
    const int32_t col0 = blockIdx.x * kSliceCols + c * 8;
    const bf16* w = p.kv_b + size_t(h) * (p.nope_dim + p.v_dim) * kRank + col0;
    uint4 wr[kMaxRowsPerThread];
#pragma unroll
    for (int k = 0; k < kMaxRowsPerThread; ++k)
        if (g + kRowGroups * k < dn) wr[k] = load_weights(w + size_t(g + kRowGroups * k) * kRank);

    detail::pdl_wait();  // q comes from the kernels before
    detail::pdl_launch_dependents();
    float acc[kTokens][8];
#pragma unroll
    for (int t = 0; t < kTokens; ++t)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[t][e] = 0.f;
#pragma unroll
    for (int k = 0; k < kMaxRowsPerThread; ++k) {
        const int32_t i = g + kRowGroups * k;
        if (i >= dn) break;
        float wf[8];
        unpack8(wr[k], wf);
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
            const float x = t < p.num_tokens ? __bfloat162float(p.in[(size_t(t) * p.num_heads + h) * qk + i]) : 0.f;
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[t][e] = fmaf(wf[e], x, acc[t][e]);
        }
    }
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
        float4* dst = reinterpret_cast<float4*>(&partial[g][t][c * 8]);
        dst[0] = make_float4(acc[t][0], acc[t][1], acc[t][2], acc[t][3]);
        dst[1] = make_float4(acc[t][4], acc[t][5], acc[t][6], acc[t][7]);
    }
    __syncthreads();
    for (int item = threadIdx.x; item < kTokens * kSliceCols; item += kThreads) {
        const int t = item / kSliceCols, col = item % kSliceCols;
        if (t >= p.num_tokens) break;
        float sum = 0.f;
#pragma unroll 8
        for (int r = 0; r < kRowGroups; ++r) sum += partial[r][t][col];
        p.out[(size_t(t) * p.num_heads + h) * kRank + blockIdx.x * kSliceCols + col] = __float2bfloat16(sum);
    }
}

template <int kTokens>
__global__ void __launch_bounds__(kThreads) mla_v_up_gemv_kernel(const mla_absorb_gemm_params p) {
    const int32_t h = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t row0 = blockIdx.x * kVRowsPerBlock + warp * 2;
    uint4 wr[2][kVPieces];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const bf16* w = p.kv_b + (size_t(h) * (p.nope_dim + p.v_dim) + p.nope_dim + row0 + r) * kRank;
#pragma unroll
        for (int k = 0; k < kVPieces; ++k) wr[r][k] = load_weights(w + (k * 32 + lane) * 8);
    }

    detail::pdl_wait();  // o_lat comes from the attention kernel before
    detail::pdl_launch_dependents();
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
        if (t >= p.num_tokens) break;
        const bf16* o = p.in + (size_t(t) * p.num_heads + h) * kRank;
        float sum[2] = {0.f, 0.f};
#pragma unroll
        for (int k = 0; k < kVPieces; ++k) {
            float of[8];
            unpack8(*reinterpret_cast<const uint4*>(o + (k * 32 + lane) * 8), of);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float wf[8];
                unpack8(wr[r][k], wf);
#pragma unroll
                for (int e = 0; e < 8; ++e) sum[r] = fmaf(wf[e], of[e], sum[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) sum[r] = detail::warp_sum(sum[r]);
        if (lane < 2)
            p.out[size_t(t) * p.num_heads * p.v_dim + size_t(h) * p.v_dim + row0 + lane] =
                __float2bfloat16(lane == 0 ? sum[0] : sum[1]);
    }
}

template <typename Fn>
void dispatch_tokens(int32_t tokens, Fn&& fn) {
    switch (tokens) {
        case 1:
            return fn(std::integral_constant<int, 1>{});
        case 2:
            return fn(std::integral_constant<int, 2>{});
        default:
            return fn(std::integral_constant<int, kMlaAbsorbGemvMaxTokens>{});
    }
}

}  // namespace

bool mla_absorb_gemv_supported(int32_t num_tokens, int32_t nope_dim, int32_t v_dim, int32_t kv_lora_rank) {
    return num_tokens >= 1 && num_tokens <= kMlaAbsorbGemvMaxTokens && kv_lora_rank == kRank && nope_dim > 0 &&
           nope_dim <= kRowGroups * kMaxRowsPerThread && v_dim > 0 && v_dim % kVRowsPerBlock == 0;
}

void launch_mla_q_absorb_gemv(const mla_absorb_gemm_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(mla_absorb_gemv_supported(p.num_tokens, p.nope_dim, p.v_dim, p.kv_lora_rank),
                        "mla_q_absorb_gemv: 1..kMlaAbsorbGemvMaxTokens tokens, kv_lora_rank 512, nope_dim <= 256, "
                        "v_dim a multiple of 16");
    if (p.num_heads == 0) return;
    dispatch_tokens(p.num_tokens, [&](auto tokens) {
        detail::launch_pdl(mla_q_absorb_gemv_kernel<tokens.value>, dim3(kRank / kSliceCols, p.num_heads),
                           dim3(kThreads), 0, stream, p);
    });
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_mla_v_up_gemv(const mla_absorb_gemm_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(mla_absorb_gemv_supported(p.num_tokens, p.nope_dim, p.v_dim, p.kv_lora_rank),
                        "mla_v_up_gemv: 1..kMlaAbsorbGemvMaxTokens tokens, kv_lora_rank 512, nope_dim <= 256, v_dim a "
                        "multiple of 16");
    if (p.num_heads == 0) return;
    dispatch_tokens(p.num_tokens, [&](auto tokens) {
        detail::launch_pdl(mla_v_up_gemv_kernel<tokens.value>, dim3(p.v_dim / kVRowsPerBlock, p.num_heads),
                           dim3(kThreads), 0, stream, p);
    });
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
