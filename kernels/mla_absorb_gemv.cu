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
#include "kernels/mla_rope.cuh"
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
constexpr int kCombineGroups = 4;                     // combine: residue classes of splits (mla_decode.cu's)
constexpr int kCombinePerGroup = kMlaDecodeMaxSplits / kCombineGroups;  // splits a group holds: 8
constexpr int kMaxRopeHalf = 64;                                        // rope pairs per head (rope_dim <= 128)
static_assert(kRank / kSliceCols > kMlaAbsorbGemvMaxTokens, "the rope's latent-row blocks precede the q_pe block");
static_assert(kThreads >= kMlaAbsorbGemvMaxTokens * kMaxRopeHalf, "a thread per q_pe pair of a head");

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

template <int kTokens, bool kRope>
__global__ void __launch_bounds__(kThreads)
    mla_q_absorb_gemv_kernel(const mla_absorb_gemm_params p, const mla_rope_kv_params rope) {
    // Shared memory: the row groups' partial sums, [kRowGroups][kTokens][kSliceCols] fp32 (32 KB at 4 tokens); with
    // kRope the tokens' cos / sin [kTokens][kMaxRopeHalf] fp32 each and a reduction's 32 floats.
    __shared__ float partial[kRowGroups][kTokens][kSliceCols];
    __shared__ float cos_s[kRope ? kTokens : 1][kMaxRopeHalf], sin_s[kRope ? kTokens : 1][kMaxRopeHalf];
    __shared__ float scratch[32];
    const int32_t h = blockIdx.y, c = threadIdx.x % kChunksPerRow, g = threadIdx.x / kChunksPerRow;
    const int32_t dn = p.nope_dim, qk = p.nope_dim + p.rope_dim;
    const int32_t col0 = blockIdx.x * kSliceCols + c * 8;
    const bf16* w = p.kv_b + size_t(h) * (p.nope_dim + p.v_dim) * kRank + col0;
    uint4 wr[kMaxRowsPerThread];
#pragma unroll
    for (int k = 0; k < kMaxRowsPerThread; ++k)
        if (g + kRowGroups * k < dn) wr[k] = load_weights(w + size_t(g + kRowGroups * k) * kRank);
    // With kRope, launch_mla_rope_kv's work rides along: head h's q_pe in the last column slice's block of head h,
    // token t's latent row (norm, RoPE, cache write) in block (t, head 0). The angles depend on the host's positions
    // only: before the wait.
    const int32_t half = rope.rope_dim / 2;
    const bool rope_q = kRope && blockIdx.x == gridDim.x - 1;
    const bool rope_kv = kRope && h == 0 && int32_t(blockIdx.x) < p.num_tokens;
    if (rope_q || rope_kv) {
        for (int32_t item = threadIdx.x; item < p.num_tokens * half; item += kThreads) {
            const int32_t t = item / half, i = item % half;
            detail::mla_rope_angle(rope, rope.positions[t], i, cos_s[t][i], sin_s[t][i]);
        }
        __syncthreads();
    }

    detail::pdl_wait();  // q (and with kRope kv) comes from the kernels before
    detail::pdl_launch_dependents();
    if (rope_q && int32_t(threadIdx.x) < p.num_tokens * half) {
        const int32_t t = threadIdx.x / half, i = threadIdx.x % half;
        detail::mla_rope_q_pair(rope, t, h, i, cos_s[t][i], sin_s[t][i]);
    }
    if (rope_kv) detail::mla_rope_kv_row(rope, blockIdx.x, cos_s[blockIdx.x], sin_s[blockIdx.x], scratch);
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

template <int kTokens, bool kCombine>
__global__ void __launch_bounds__(kThreads)
    mla_v_up_gemv_kernel(const mla_absorb_gemm_params p, const float* partials, int32_t num_splits) {
    // Shared memory with kCombine: the combined latents o_s [kTokens][kRank] BF16 (4 KB at 4 tokens), the four split
    // groups' sums [kCombineGroups][kRank / 4] float4 (8 KB), the splits' weights and the inverse of their sum.
    __shared__ __align__(16) bf16 o_s[kCombine ? kTokens : 1][kRank];
    __shared__ float4 sums[kCombine ? kCombineGroups : 1][kRank / 4];
    __shared__ float w_s[kMlaDecodeMaxSplits];
    __shared__ float inv_s;
    const int32_t h = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t row0 = blockIdx.x * kVRowsPerBlock + warp * 2;
    uint4 wr[2][kVPieces];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const bf16* w = p.kv_b + (size_t(h) * (p.nope_dim + p.v_dim) + p.nope_dim + row0 + r) * kRank;
#pragma unroll
        for (int k = 0; k < kVPieces; ++k) wr[r][k] = load_weights(w + (k * 32 + lane) * 8);
    }

    detail::pdl_wait();  // o_lat (or its split partials) comes from the attention kernel before
    detail::pdl_launch_dependents();
    if constexpr (kCombine) {
        // launch_mla_decode_bf16's combine, for head h of every token: thread (quad q, pair) holds the splits of
        // groups 2 pair and 2 pair + 1 (group g: splits g, g + 4, ...) at columns 4 q .. 4 q + 3, loaded before the
        // weights are known; the groups' sums are added in group order and rounded to BF16 as that combine does.
        const int q = threadIdx.x % (kRank / 4), pair = threadIdx.x / (kRank / 4);
        static_assert(kThreads == 2 * (kRank / 4) && kCombineGroups == 4);
        for (int t = 0; t < p.num_tokens; ++t) {
            const float* part = partials + (size_t(t) * p.num_heads + h) * num_splits * kMlaDecodePartStride;
            float4 v[2][kCombinePerGroup];
#pragma unroll
            for (int gi = 0; gi < 2; ++gi)
#pragma unroll
                for (int i = 0; i < kCombinePerGroup; ++i) {
                    const int c = 2 * pair + gi + kCombineGroups * i;
                    v[gi][i] = c < num_splits
                                   ? __ldcg(reinterpret_cast<const float4*>(part + c * kMlaDecodePartStride + 4 * q))
                                   : make_float4(0.f, 0.f, 0.f, 0.f);
                }
            if (warp == 0) {
                const int c = lane;
                const float lse = c < num_splits ? __ldcg(part + c * kMlaDecodePartStride + kRank) : -INFINITY;
                const float mx = detail::warp_max(lse);
                const float w = lse == -INFINITY ? 0.f : expf(lse - mx);
                const float sum = detail::warp_sum(w);
                if (c < num_splits) w_s[c] = w;
                if (c == 0) inv_s = sum > 0.f ? 1.f / sum : 0.f;
            }
            __syncthreads();  // w_s, inv_s
#pragma unroll
            for (int gi = 0; gi < 2; ++gi) {
                float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
                for (int i = 0; i < kCombinePerGroup; ++i) {
                    const int c = 2 * pair + gi + kCombineGroups * i;
                    if (c >= num_splits) break;
                    const float w = w_s[c];
                    if (w == 0.f) continue;  // an empty split (its row may be anything finite or not)
                    acc.x = fmaf(w, v[gi][i].x, acc.x);
                    acc.y = fmaf(w, v[gi][i].y, acc.y);
                    acc.z = fmaf(w, v[gi][i].z, acc.z);
                    acc.w = fmaf(w, v[gi][i].w, acc.w);
                }
                sums[2 * pair + gi][q] = acc;
            }
            __syncthreads();  // sums
            if (pair == 0) {
                float4 acc = sums[0][q];
#pragma unroll
                for (int g = 1; g < kCombineGroups; ++g) {
                    const float4 x = sums[g][q];
                    acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
                }
                const float inv = inv_s;
                o_s[t][4 * q] = __float2bfloat16(acc.x * inv);
                o_s[t][4 * q + 1] = __float2bfloat16(acc.y * inv);
                o_s[t][4 * q + 2] = __float2bfloat16(acc.z * inv);
                o_s[t][4 * q + 3] = __float2bfloat16(acc.w * inv);
            }
            __syncthreads();  // o_s[t]; w_s and sums are rewritten by the next token
        }
    }
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
        if (t >= p.num_tokens) break;
        const bf16* o = kCombine ? &o_s[t][0] : p.in + (size_t(t) * p.num_heads + h) * kRank;
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
        detail::launch_pdl(mla_q_absorb_gemv_kernel<tokens.value, false>, dim3(kRank / kSliceCols, p.num_heads),
                           dim3(kThreads), 0, stream, p, mla_rope_kv_params{});
    });
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_mla_rope_q_absorb_gemv(const mla_rope_kv_params& rope, const mla_absorb_gemm_params& p,
                                   cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(mla_absorb_gemv_supported(p.num_tokens, p.nope_dim, p.v_dim, p.kv_lora_rank),
                        "mla_rope_q_absorb_gemv: 1..kMlaAbsorbGemvMaxTokens tokens, kv_lora_rank 512, nope_dim <= 256, "
                        "v_dim a multiple of 16");
    ZMOE_KERNEL_REQUIRE(rope.q == p.in && rope.num_tokens == p.num_tokens && rope.num_heads == p.num_heads &&
                            rope.nope_dim == p.nope_dim && rope.rope_dim == p.rope_dim &&
                            rope.kv_lora_rank == p.kv_lora_rank,
                        "mla_rope_q_absorb_gemv: the rope and the absorption must be of the same q and dims");
    ZMOE_KERNEL_REQUIRE(rope.rope_dim % 2 == 0 && rope.rope_dim <= 2 * kMaxRopeHalf,
                        "mla_rope_q_absorb_gemv: rope_dim must be even and <= 128");
    if (p.num_heads == 0) return;
    dispatch_tokens(p.num_tokens, [&](auto tokens) {
        detail::launch_pdl(mla_q_absorb_gemv_kernel<tokens.value, true>, dim3(kRank / kSliceCols, p.num_heads),
                           dim3(kThreads), 0, stream, p, rope);
    });
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_mla_v_up_gemv(const mla_absorb_gemm_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(mla_absorb_gemv_supported(p.num_tokens, p.nope_dim, p.v_dim, p.kv_lora_rank),
                        "mla_v_up_gemv: 1..kMlaAbsorbGemvMaxTokens tokens, kv_lora_rank 512, nope_dim <= 256, v_dim a "
                        "multiple of 16");
    if (p.num_heads == 0) return;
    dispatch_tokens(p.num_tokens, [&](auto tokens) {
        detail::launch_pdl(mla_v_up_gemv_kernel<tokens.value, false>, dim3(p.v_dim / kVRowsPerBlock, p.num_heads),
                           dim3(kThreads), 0, stream, p, static_cast<const float*>(nullptr), 1);
    });
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_mla_combine_v_up_gemv(const mla_absorb_gemm_params& p, const float* partials, int32_t num_splits,
                                  cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(mla_absorb_gemv_supported(p.num_tokens, p.nope_dim, p.v_dim, p.kv_lora_rank),
                        "mla_combine_v_up_gemv: 1..kMlaAbsorbGemvMaxTokens tokens, kv_lora_rank 512, nope_dim <= 256, "
                        "v_dim a multiple of 16");
    ZMOE_KERNEL_REQUIRE(num_splits >= 2 && num_splits <= kMlaDecodeMaxSplits && partials != nullptr,
                        "mla_combine_v_up_gemv: 2..kMlaDecodeMaxSplits splits' partials");
    if (p.num_heads == 0) return;
    dispatch_tokens(p.num_tokens, [&](auto tokens) {
        detail::launch_pdl(mla_v_up_gemv_kernel<tokens.value, true>, dim3(p.v_dim / kVRowsPerBlock, p.num_heads),
                           dim3(kThreads), 0, stream, p, partials, num_splits);
    });
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
