// Block-scaled FP8 (e4m3) grouped expert GEMM for Hopper (sm_90a), the FP8 counterpart of grouped_gemm_sm90.cu:
// the same warp-specialised persistent layout, device-built tile schedule and expert grouping, with e4m3 A and B
// (both K-major, as FP8 wgmma requires) and the format's scales (docs/fp8.md):
//   c[r, j] = sum_kb (a_q[r, kb] . b_q[e, j, kb]) * a_scale[kb, r] * b_scale[e, j / 128, kb]
// where kb runs over the 128-wide K blocks. One pipeline stage is one K block (128 e4m3 = one 128-byte swizzle
// row): each math warpgroup multiplies the stage into a partial fp32 accumulator with four wgmma m64n128k32 (the
// first clears it), waits for them, and promotes the partial into its main fp32 accumulator scaled by the row's
// activation scale times the column block's weight scale (DeepGEMM's promotion per K block, the CPU reference's
// arithmetic in workers/cpu_kernels.cpp). The activation scales of a stage (one per row) ride in the stage: the
// producer copies them with a bulk copy completing on the stage's barrier; the weight scales (one or two per
// warpgroup and stage) are read from global memory a stage ahead.
//
// CTA (384 threads): warpgroup 0 produces (one thread issues the TMA copies), warpgroups 1 and 2 multiply, each
// with 64 rows x 128 rows of b (64 partial + 64 main accumulator registers per thread). Tiles:
//   - kBM = 128 (down GEMM, large groups): warpgroup w owns rows 64w.. of the tile, both own b rows [n0, n0 + 128);
//   - kBM = 64: both own the tile's 64 rows, warpgroup w owns b rows [128 w, 128 w + 128) of a 256-row b tile.
//     With swiglu (always kBM = 64) those are gate columns [n0 + 64 w, +64) then the matching up columns, so a tile
//     makes 128 output columns: one 128-channel group of the output.
// Epilogues: down (no swiglu) converts to BF16 and stores 64 x 64 boxes with TMA, as the BF16 kernel. gate/up
// computes act = SiLU(gate) * up in fp32 (SiLU with the approximate division: two MUFU operations, ~1e-6 relative,
// where the BF16 kernel's tanh.approx form would err by ~2^-11 and flip e4m3 roundings), the per-row amax over the
// tile's 128 output columns (the two warpgroups exchange their halves' amax through shared memory; columns past n count
// as zero), scale = amax / 448 (1 for an all-zero group), act_q = cvt.rn.satfinite.e4m3(act x (1 / scale)): the down
// GEMM's A operand and its scales, as quantize_fp8_activation_row computes them (the reciprocal's product can differ
// from the quotient in the last fp32 bit: an e4m3 rounding flips only for a value within that of a tie).

#include <cuda.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/sm90_primitives.cuh"

namespace zmoe::kernels {
namespace {

using namespace sm90;

constexpr int kThreads = 384;          // producer warpgroup + two math warpgroups
constexpr int kBK = 128;               // K elements (bytes) of one stage: one scale block, one 128-byte swizzle row
constexpr int kWgN = 128;              // wgmma N of a math warpgroup
constexpr size_t kSmemLimit = 232448;  // an sm_90 block's dynamic shared memory (227 KB)
constexpr int32_t kMaxExperts = 256;   // the tile schedule's room in shared memory
constexpr int kMathBarrier = 3;        // named barrier of the two math warpgroups (1 and 2: each warpgroup's own)

/// The kernel's tile and shared memory: a ring of stages (a kBM-row A tile, kBTile rows of b and the A tile's
/// kBM activation scales), each math warpgroup's output buffers, the amax exchange, the barriers and the schedule.
template <int kBM, bool kSwiglu>
struct fp8_tile {
    static_assert(!kSwiglu || kBM == 64, "the gate/up GEMM runs 64-row tiles (a tile = one output group)");
    static constexpr int kBTile = kBM == 128 ? 128 : 256;                  // rows of b per tile
    static constexpr int kOutN = kSwiglu ? kBTile / 2 : kBTile;            // output columns of a tile
    static constexpr uint32_t kABytes = kBM * kBK;                         // e4m3
    static constexpr uint32_t kBBytes = kBTile * kBK;                      // e4m3
    static constexpr uint32_t kStageBytes = kABytes + kBBytes;             // + the scales, stored apart
    static constexpr uint32_t kCBytes = kSwiglu ? 64 * 64 : 2 * 64 * 128;  // a warpgroup's output: e4m3 or 2 BF16 boxes
    static constexpr size_t kFixedBytes =
        1024 + 16 * sizeof(uint64_t) + (kMaxExperts + 1) * sizeof(int32_t) + 2 * 2 * 64 * sizeof(float);
    static constexpr int kFit = int((kSmemLimit - kFixedBytes - 2 * kCBytes) / (kStageBytes + kBM * sizeof(float)));
    static constexpr int kStages = kFit < 8 ? kFit : 8;
    static constexpr size_t kCOffset = size_t(kStages) * kStageBytes;
    static constexpr size_t kScaleOffset = kCOffset + 2 * kCBytes;                   // [kStages][kBM] floats
    static constexpr size_t kAmaxOffset = kScaleOffset + size_t(kStages) * kBM * 4;  // [2][2][64] floats
    static constexpr size_t kBarOffset = kAmaxOffset + 2 * 2 * 64 * sizeof(float);
    static size_t smem_bytes(int32_t num_experts) {
        return kBarOffset + 2 * kStages * sizeof(uint64_t) + size_t(num_experts + 1) * sizeof(int32_t) + 1024;
    }
    static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0 && kCBytes % 1024 == 0, "1024-byte swizzle atoms");
    static_assert(kStages >= 2, "the pipeline needs two stages");
};

/// d (64 x 128, fp32) = (kAccumulate ? d : 0) + A (64 x 32) . B (128 x 32)^T, e4m3, K-major in shared memory.
template <int kAccumulate>
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" ZMOE_WGMMA_D0_63 "}, %64, %65, %66, 1, 1;\n"
                 : ZMOE_WGMMA_ACC32(0), ZMOE_WGMMA_ACC32(32)
                 : "l"(desc_a), "l"(desc_b), "n"(kAccumulate));
}

/// 4-byte cp.async into shared memory; valid false fills zeros and reads nothing.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0)
                 : "memory");
}

/// Barrier over the two math warpgroups (256 threads).
__device__ __forceinline__ void math_sync() { asm volatile("bar.sync %0, 256;\n" ::"n"(kMathBarrier) : "memory"); }

/// Two floats to two e4m3 codes (lo in the low byte), round to nearest even, saturating to +-448.
__device__ __forceinline__ uint16_t to_e4m3x2(float lo, float hi) {
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ void st_shared_b16(uint32_t addr, uint16_t v) {
    asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(addr), "h"(v) : "memory");
}

/// Weight scale index of b rows [row0, row0 + 128) of expert e's set `set` (0: gate or the only set, 1: up).
__device__ __forceinline__ const float* weight_scales(const grouped_gemm_fp8_params& p, int32_t e, int set,
                                                      int32_t col_block) {
    const int32_t nb = (p.n + 127) / 128, kb = (p.k + 127) / 128;
    const int sets = p.swiglu ? 2 : 1;
    return p.b_scales + (size_t(e * sets + set) * nb + min(col_block, nb - 1)) * kb;
}

template <int kBM, bool kSwiglu>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_fp8_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                            const __grid_constant__ CUtensorMap map_c, const grouped_gemm_fp8_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using T = fp8_tile<kBM, kSwiglu>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    float* a_scale_s = reinterpret_cast<float*>(smem + T::kScaleOffset);
    float* amax_s = reinterpret_cast<float*>(smem + T::kAmaxOffset);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + T::kBarOffset);
    uint64_t* empty = full + T::kStages;
    int32_t* tile_start = reinterpret_cast<int32_t*>(empty + T::kStages);
    if (threadIdx.x == 0) {
        for (int s = 0; s < T::kStages; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 8);  // one arrive per math warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    build_tile_schedule<kBM>(p.expert_offsets, p.num_experts, tile_start);
    __syncthreads();
    const int32_t n_tiles = (p.n + T::kOutN - 1) / T::kOutN;
    const int32_t num_tiles = tile_start[p.num_experts] * n_tiles;
    const int32_t k_tiles = (p.k + kBK - 1) / kBK;
    const int32_t n_b = kSwiglu ? 2 * p.n : p.n;

    if (threadIdx.x < 128) {
        // Producer: thread 0 fills the ring, stage after stage, tile after tile.
        if (threadIdx.x != 0) return;
        tma_prefetch_map(&map_a);
        tma_prefetch_map(&map_b);
        uint32_t it = 0;
        for (int32_t t = blockIdx.x; t < num_tiles; t += gridDim.x) {
            const row_tile rt = locate_row_tile<kBM>(p.expert_offsets, tile_start, p.num_experts, t / n_tiles);
            const int32_t n0 = (t % n_tiles) * T::kOutN;
            const int32_t b_row = rt.expert * n_b;
            for (int32_t kt = 0; kt < k_tiles; ++kt, ++it) {
                const uint32_t s = it % T::kStages;
                mbar_wait(&empty[s], ((it / T::kStages) & 1) ^ 1);
                unsigned char* a_s = smem + size_t(s) * T::kStageBytes;
                unsigned char* b_s = a_s + T::kABytes;
                const int32_t k0 = kt * kBK;
                mbar_arrive_expect_tx(&full[s], T::kStageBytes + uint32_t(rt.rows) * 4);
                tma_load_2d(a_s, &map_a, k0, rt.m0, &full[s]);
                if constexpr (kSwiglu) {
#pragma unroll
                    for (int w = 0; w < 2; ++w) {
                        unsigned char* group = b_s + size_t(w) * kWgN * kBK;
                        tma_load_2d(group, &map_b, k0, b_row + n0 + 64 * w, &full[s]);
                        tma_load_2d(group + 64 * kBK, &map_b, k0, b_row + p.n + n0 + 64 * w, &full[s]);
                    }
                } else {
                    tma_load_2d(b_s, &map_b, k0, b_row + n0, &full[s]);
                }
                bulk_load(a_scale_s + size_t(s) * kBM, p.a_scales + size_t(kt) * p.a_scale_ld + rt.m0,
                          uint32_t(rt.rows) * 4, &full[s]);
            }
        }
        return;
    }

    const int mw = int(threadIdx.x) / 128 - 1;  // math warpgroup 0 or 1
    const int a_row0 = kBM == 128 ? mw * 64 : 0;
    const int b_row0 = kBM == 128 ? 0 : mw * kWgN;
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int r = warp * 16 + lane / 4;  // this thread's rows of the warpgroup's 64: r and r + 8
    const bool storer = threadIdx.x % 128 == 0;
    const uint32_t c_s = smem_addr(smem + T::kCOffset + mw * T::kCBytes);
    if (storer) tma_prefetch_map(&map_c);
    float acc[64], part[64];
    uint32_t it = 0, tile_parity = 0;
    for (int32_t t = blockIdx.x; t < num_tiles; t += gridDim.x, tile_parity ^= 1) {
        const row_tile rt = locate_row_tile<kBM>(p.expert_offsets, tile_start, p.num_experts, t / n_tiles);
        const int32_t n0 = (t % n_tiles) * T::kOutN;
        // A 64-row tile of the 128-row layout leaves warpgroup 1 idle: it only passes the stages on.
        if (a_row0 >= rt.rows) {
            for (int32_t kt = 0; kt < k_tiles; ++kt, ++it) {
                const uint32_t s = it % T::kStages;
                mbar_wait(&full[s], (it / T::kStages) & 1);
                if (lane == 0) mbar_arrive(&empty[s]);
            }
            continue;
        }
        // The weight scales of the warpgroup's 128 b rows: with swiglu its gate block and its up block (columns
        // j < 64 of the accumulator are gate, the rest up), else the one column block.
        const float* ws0 =
            kSwiglu ? weight_scales(p, rt.expert, 0, n0 / 128) : weight_scales(p, rt.expert, 0, (n0 + b_row0) / 128);
        const float* ws1 = kSwiglu ? weight_scales(p, rt.expert, 1, n0 / 128) : ws0;
        float wn0 = __ldg(ws0), wn1 = __ldg(ws1);
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] = 0.f;
        for (int32_t kt = 0; kt < k_tiles; ++kt, ++it) {
            const float w0 = wn0, w1 = wn1;
            if (kt + 1 < k_tiles) {
                wn0 = __ldg(ws0 + kt + 1);
                wn1 = __ldg(ws1 + kt + 1);
            }
            const uint32_t s = it % T::kStages;
            mbar_wait(&full[s], (it / T::kStages) & 1);
            const unsigned char* a_s = smem + size_t(s) * T::kStageBytes;
            const uint64_t desc_a = smem_desc(a_s + a_row0 * kBK);
            const uint64_t desc_b = smem_desc(a_s + T::kABytes + b_row0 * kBK);
            wgmma_fence();
            wgmma_m64n128k32_e4m3<0>(part, desc_a, desc_b);
#pragma unroll
            for (int kk = 1; kk < kBK / 32; ++kk) wgmma_m64n128k32_e4m3<1>(part, desc_a + 2 * kk, desc_b + 2 * kk);
            wgmma_commit();
            wgmma_wait<0>();
            fence_accumulators(part);
            const float sa0 = a_scale_s[s * kBM + a_row0 + r], sa1 = a_scale_s[s * kBM + a_row0 + r + 8];
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s]);
            const float s00 = sa0 * w0, s10 = sa1 * w0, s01 = sa0 * w1, s11 = sa1 * w1;
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const float f0 = j < 8 ? s00 : s01, f1 = j < 8 ? s10 : s11;
                acc[4 * j + 0] = fmaf(part[4 * j + 0], f0, acc[4 * j + 0]);
                acc[4 * j + 1] = fmaf(part[4 * j + 1], f0, acc[4 * j + 1]);
                acc[4 * j + 2] = fmaf(part[4 * j + 2], f1, acc[4 * j + 2]);
                acc[4 * j + 3] = fmaf(part[4 * j + 3], f1, acc[4 * j + 3]);
            }
        }

        // Accumulator element 4 j + 2 h + q sits at row r + 8 h, column 8 j + 2 (lane % 4) + q of the warpgroup's
        // 64 x 128 block.
        if constexpr (kSwiglu) {
            const int32_t col0 = n0 + 64 * mw;  // the warpgroup's first output column
            float v[32];
            float amax[2] = {0.f, 0.f};
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int q = 0; q < 2; ++q) {
                        const float g = acc[4 * j + 2 * h + q], u = acc[4 * (j + 8) + 2 * h + q];
                        const int32_t col = col0 + 8 * j + 2 * (lane % 4) + q;
                        const float a = col < p.n ? __fdividef(g, 1.f + __expf(-g)) * u : 0.f;
                        v[4 * j + 2 * h + q] = a;
                        amax[h] = fmaxf(amax[h], fabsf(a));
                    }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 1));
                amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 2));
            }
            float* ex = amax_s + tile_parity * 128;  // [2 warpgroups][64 rows], double-buffered by tile
            if (lane % 4 == 0) {
                ex[mw * 64 + r] = amax[0];
                ex[mw * 64 + r + 8] = amax[1];
            }
            if (storer) bulk_wait_read<0>();  // the previous tile's store has read the output buffer
            math_sync();
            float scale[2], inv[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float m = fmaxf(ex[r + 8 * h], ex[64 + r + 8 * h]);
                scale[h] = m > 0.f ? m / 448.f : 1.f;
                inv[h] = __frcp_rn(scale[h]);
            }
            // e4m3 codes into the 64 x 64-byte buffer (no swizzle), then one TMA store of the box.
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const uint16_t codes = to_e4m3x2(v[4 * j + 2 * h] * inv[h], v[4 * j + 2 * h + 1] * inv[h]);
                    st_shared_b16(c_s + (r + 8 * h) * 64 + 8 * j + 2 * (lane % 4), codes);
                }
            if (mw == 0 && lane % 4 == 0) {
                float* out = p.c_scales + size_t(n0 / 128) * p.c_scale_ld + rt.m0;
                out[r] = scale[0];
                out[r + 8] = scale[1];
            }
            fence_proxy_async();
            warpgroup_sync(1 + mw);
            if (storer) {
                if (col0 < p.n) tma_store_2d(&map_c, c_s, col0, rt.m0);
                bulk_commit();
            }
        } else {
            // BF16: two 64 x 64 boxes, 128-byte swizzled (16-byte chunk c of row x at slot c ^ (x % 8)).
            const int32_t col0 = n0 + b_row0;
            if (storer) bulk_wait_read<0>();
            warpgroup_sync(1 + mw);
#pragma unroll
            for (int box = 0; box < 2; ++box)
#pragma unroll
                for (int jj = 0; jj < 8; ++jj)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int j = 8 * box + jj;
                        const __nv_bfloat162 pair = __floats2bfloat162_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
                        const int row = r + 8 * h;
                        st_shared_b32(c_s + box * 8192 + row * 128 + ((jj ^ (row % 8)) << 4) + (lane % 4) * 4,
                                      *reinterpret_cast<const uint32_t*>(&pair));
                    }
            fence_proxy_async();
            warpgroup_sync(1 + mw);
            if (storer) {
#pragma unroll
                for (int box = 0; box < 2; ++box)
                    if (col0 + box * 64 < p.n) tma_store_2d(&map_c, c_s + box * 8192, col0 + box * 64, rt.m0 + a_row0);
                bulk_commit();
            }
        }
    }
    if (storer) bulk_wait_all();
#endif
}

// ---------------------------------------------------------------------------------------------------------
// Wide tiles: 128 rows of A x 256 rows of b (gate/up: 128 gate + 128 up rows, one 128-channel output group; down:
// 256 output columns). Each math warpgroup owns 64 rows and all 256 b rows: its main accumulator is 64 x 256 fp32
// (128 registers), and each K block runs in two 128-column halves, each four wgmma m64n128k32 into one 64-register
// partial, then promoted into its half of the main accumulator. Per K block a CTA loads 48 KB for 8.4 MFLOP
// (narrow gate/up: 40 KB for 4.2 MFLOP): 40% less L2 traffic per FLOP. The 192 accumulator registers need more
// than the 168 that 384 threads get at entry: the producer warpgroup gives registers back (setmaxnreg 56: its gather
// spills at 40) and the math warpgroups take them (224; 128 x 56 + 256 x 224 = 384 x 168, the CTA's allocation). The
// gate/up epilogue needs no exchange between warpgroups: a thread's quad holds whole rows of the tile's 128 output
// columns. With a_rows (launch_moe_experts' gate/up: x quantized once per token, not into each of its top-k permuted
// rows) the producer's 128 threads gather the tile's A rows and their scales with cp.async, as the BF16 kernel gathers
// x.

constexpr int kWideBM = 128;        // rows of A per tile
constexpr int kWideBN = 256;        // rows of b per tile
constexpr int kStaggerBarrier = 4;  // named barrier holding the second math warpgroup back at the start
constexpr int kProducerRegs = 56;   // setmaxnreg of the producer warpgroup (its gather spills at 40) ...
constexpr int kMathRegs = 224;      // ... and of the math warpgroups
// setmaxnreg.inc waits until the CTA's pool has the registers: the pool is what the CTA got at launch (384 threads x
// 168, __launch_bounds__(kThreads, 1)), so the two counts must fit in it (64 / 224 exceeded it by 1 K registers and
// the math warpgroups waited forever).
static_assert(128 * kProducerRegs + 256 * kMathRegs <= kThreads * 168, "setmaxnreg beyond the CTA's registers");
// With A in registers (kRegA: 16 more registers for the K block's A fragments; no gather) the split is 24 / 240.
constexpr int kProducerRegsRs = 24;
constexpr int kMathRegsRs = 240;
static_assert(128 * kProducerRegsRs + 256 * kMathRegsRs <= kThreads * 168, "setmaxnreg beyond the CTA's registers");

/// d (64 x 128, fp32) = (kAccumulate ? d : 0) + A (64 x 32, e4m3, this warp's 16 rows in registers: ldmatrix_a's
/// fragment) . B (128 x 32)^T, B K-major in shared memory.
template <int kAccumulate>
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" ZMOE_WGMMA_D0_63
                 "}, {%64, %65, %66, %67}, %68, %69, 1, 1;\n"
                 : ZMOE_WGMMA_ACC32(0), ZMOE_WGMMA_ACC32(32)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kAccumulate));
}

/// The A fragment of one k32 step for this warp's 16 rows [row0, row0 + 16) of a 128-byte-swizzled K-major tile
/// (TMA's layout: 16-byte chunk c of row x at c ^ (x % 8)): four 8 x 16-byte matrices (rows 0-7 / 8-15, K bytes
/// 0-15 / 16-31 of the step), which ldmatrix hands out as the wgmma register fragment of 8-bit A (thread t: row
/// t / 4 (+ 8), K bytes 4 (t % 4) .. + 3 (+ 16)).
__device__ __forceinline__ void ldmatrix_a(uint32_t (&a)[4], uint32_t tile, int row0, int kk, int lane) {
    const int m = lane / 8;
    const int row = row0 + (m & 1) * 8 + lane % 8;
    const int chunk = 2 * kk + (m >> 1);
    const uint32_t addr = tile + row * 128 + ((chunk ^ (row % 8)) << 4);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr)
                 : "memory");
}

template <bool kSwiglu>
struct fp8_wide_tile {
    static constexpr int kOutN = kSwiglu ? 128 : 256;           // output columns of a tile
    static constexpr uint32_t kABytes = kWideBM * kBK;          // e4m3
    static constexpr uint32_t kBBytes = kWideBN * kBK;          // e4m3
    static constexpr uint32_t kStageBytes = kABytes + kBBytes;  // + the scales, stored apart
    static constexpr uint32_t kCBytes =
        kSwiglu ? 64 * 128 : 4 * 64 * 128;  // a warpgroup's output: e4m3 or 4 BF16 boxes
    static constexpr size_t kFixedBytes = 1024 + 16 * sizeof(uint64_t) + (kMaxExperts + 1) * sizeof(int32_t);
    static constexpr int kFit = int((kSmemLimit - kFixedBytes - 2 * kCBytes) / (kStageBytes + kWideBM * sizeof(float)));
    static constexpr int kStages = kFit < 6 ? kFit : 6;
    static constexpr size_t kCOffset = size_t(kStages) * kStageBytes;
    static constexpr size_t kScaleOffset = kCOffset + 2 * kCBytes;  // [kStages][kWideBM] floats
    static constexpr size_t kBarOffset = kScaleOffset + size_t(kStages) * kWideBM * 4;
    static size_t smem_bytes(int32_t num_experts) {
        return kBarOffset + 2 * kStages * sizeof(uint64_t) + size_t(num_experts + 1) * sizeof(int32_t) + 1024;
    }
    static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0 && kCBytes % 1024 == 0, "1024-byte swizzle atoms");
    static_assert(kStages >= 3, "the pipeline needs three stages");
};

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Clusters (wide_multicast): two CTAs on two row tiles of one expert and the same columns.
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ uint32_t cluster_id() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ uint32_t cluster_count() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
    return r;
}
/// Barrier over every thread of the cluster, ordering their earlier memory accesses (shared memory and barrier
/// initialisation included) before the later ones of all.
__device__ __forceinline__ void cluster_sync() {
    asm volatile(
        "barrier.cluster.arrive.release.aligned;\n"
        "barrier.cluster.wait.acquire.aligned;\n" ::
            : "memory");
}
/// Arrives on the mbarrier at bar's offset in the shared memory of the cluster's CTA `rank`. The plain arrive (no
/// .release.cluster): what it signals is that this warpgroup's wgmmas have finished reading the stage (waited for
/// already), not data written through the generic proxy; the BF16 kernel's 2-CTA trial measured the
/// release.cluster form 6-8 cycles of membar stall per arrive (docs/kernels.md).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(bar)), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}

/// tma_load_2d into the same shared-memory offset of every CTA in cta_mask, each completing on its own barrier at
/// bar's offset.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, int32_t c0, int32_t c1,
                                                      uint64_t* bar, uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
        "{%3, "
        "%4}], [%2], %5;\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
        : "memory");
}

/// The wide-tile kernel (see above); kStagger holds the second math warpgroup back until the first has issued its
/// first half K block, so that the two warpgroups' promotions need not coincide. kCluster: launched in clusters of
/// two CTAs that take the two row tiles of a pair (each expert's row tiles rounded up to an even count, so a pair is
/// always one expert's) at the same columns: each CTA loads its own A and one half of the b tile, multicast to both,
/// and a stage is free again once the math warps of both CTAs have released it (16 arrivals on each CTA's empty
/// barrier): half the b traffic from L2.
template <bool kSwiglu, bool kStagger, bool kCluster, bool kRegA>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_fp8_wide_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                                 const __grid_constant__ CUtensorMap map_c, const grouped_gemm_fp8_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using T = fp8_wide_tile<kSwiglu>;
    constexpr int kCtas = kCluster ? 2 : 1;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // The same offset in every CTA (the dynamic shared memory starts at the same address in each).
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    float* a_scale_s = reinterpret_cast<float*>(smem + T::kScaleOffset);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + T::kBarOffset);
    uint64_t* empty = full + T::kStages;
    int32_t* tile_start = reinterpret_cast<int32_t*>(empty + T::kStages);
    const uint32_t rank = kCluster ? cluster_rank() : 0;
    const int32_t first_unit = int32_t(kCluster ? cluster_id() : blockIdx.x);
    const int32_t unit_stride = int32_t(kCluster ? cluster_count() : gridDim.x);
    if (threadIdx.x == 0) {
        for (int s = 0; s < T::kStages; ++s) {
            // The producer's arrive with the TMA bytes, and with a_rows each gathering thread's arrive.
            mbar_init(&full[s], p.a_rows != nullptr ? 129 : 1);
            mbar_init(&empty[s], 8 * kCtas);  // one arrive per math warp of each CTA
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    build_tile_schedule<kWideBM, kCtas>(p.expert_offsets, p.num_experts, tile_start);
    __syncthreads();
    if constexpr (kCluster) cluster_sync();  // the peer's barriers are initialised before anything reaches them
    const int32_t n_tiles = (p.n + T::kOutN - 1) / T::kOutN;
    // Units: (a group of kCtas row tiles, a column tile); the CTA of rank r takes row tile kCtas x group + r.
    const int32_t num_units = tile_start[p.num_experts] / kCtas * n_tiles;
    const int32_t k_tiles = (p.k + kBK - 1) / kBK;

    const bool gather = !kRegA && p.a_rows != nullptr;  // kRegA: no gather (launch_grouped_gemm_fp8 refuses it)
    if (threadIdx.x < 128) {
        // Producer: thread 0 issues the TMA copies, stage after stage, tile after tile; with a_rows all 128 threads
        // also gather the A rows (16-byte cp.async, written in the 128-byte swizzle TMA would write) and their
        // scales, each arriving on the stage's barrier once its copies have landed.
        setmaxnreg_dec<kRegA ? kProducerRegsRs : kProducerRegs>();
        if (gather || threadIdx.x == 0) {
            if (threadIdx.x == 0) {
                if (!gather) tma_prefetch_map(&map_a);
                tma_prefetch_map(&map_b);
            }
            const int32_t n_b = kSwiglu ? 2 * p.n : p.n;
            const int chunk = threadIdx.x % 8;  // gather: this thread's 16-byte chunk of rows threadIdx.x / 8 + 16 j
            uint32_t it = 0;
            for (int32_t u = first_unit; u < num_units; u += unit_stride) {
                const row_tile rt = locate_row_tile<kWideBM>(p.expert_offsets, tile_start, p.num_experts,
                                                             (u / n_tiles) * kCtas + int32_t(rank));
                const uint32_t rows = uint32_t(max(rt.rows, 0));
                const int32_t n0 = (u % n_tiles) * T::kOutN;
                const int32_t b_row = rt.expert * n_b;
                // The second half's b rows: the up rows of the same columns, or the next 128 columns.
                const int32_t b_row1 = kSwiglu ? b_row + p.n + n0 : b_row + n0 + 128;
                // gather: a's row behind tile row threadIdx.x (its scales), or -1.
                const int32_t scale_src = gather && threadIdx.x < rows ? p.a_rows[rt.m0 + threadIdx.x] : -1;
                for (int32_t kt = 0; kt < k_tiles; ++kt, ++it) {
                    const uint32_t s = it % T::kStages;
                    mbar_wait(&empty[s], ((it / T::kStages) & 1) ^ 1);
                    unsigned char* a_s = smem + size_t(s) * T::kStageBytes;
                    unsigned char* b_s = a_s + T::kABytes;
                    const int32_t k0 = kt * kBK;
                    if (threadIdx.x == 0) {
                        mbar_arrive_expect_tx(&full[s], gather ? T::kBBytes : T::kStageBytes + rows * 4);
                        if (!gather) tma_load_2d(a_s, &map_a, k0, rt.m0, &full[s]);
                        if constexpr (kCluster) {
                            tma_load_2d_multicast(b_s + rank * 128 * kBK, &map_b, k0, rank == 0 ? b_row + n0 : b_row1,
                                                  &full[s], 0x3);
                        } else {
                            tma_load_2d(b_s, &map_b, k0, b_row + n0, &full[s]);
                            tma_load_2d(b_s + 128 * kBK, &map_b, k0, b_row1, &full[s]);
                        }
                        if (!gather && rows > 0)
                            bulk_load(a_scale_s + size_t(s) * kWideBM, p.a_scales + size_t(kt) * p.a_scale_ld + rt.m0,
                                      rows * 4, &full[s]);
                    }
                    if (gather) {
                        const int32_t k = k0 + chunk * 16;
                        // The row map is re-read per stage (L1 hits) rather than kept: 8 more registers spilled
                        // under the producer's setmaxnreg budget.
#pragma unroll
                        for (int j = 0; j < kWideBM / 16; ++j) {
                            const uint32_t row = threadIdx.x / 8 + 16 * j;
                            const int32_t src = row < rows ? __ldg(p.a_rows + rt.m0 + row) : -1;
                            const bool valid = src >= 0 && k < p.k;
                            cp_async_16(a_s + row * 128 + ((chunk ^ (row & 7)) << 4),
                                        valid ? p.a + size_t(src) * p.k + k : p.a, valid);
                        }
                        cp_async_4(a_scale_s + size_t(s) * kWideBM + threadIdx.x,
                                   scale_src >= 0 ? p.a_scales + size_t(kt) * p.a_scale_ld + scale_src : p.a_scales,
                                   scale_src >= 0);
                        cp_async_arrive_on(&full[s]);  // once this thread's copies of the stage have landed
                    }
                }
            }
        }
    } else {
        setmaxnreg_inc<kRegA ? kMathRegsRs : kMathRegs>();
        const int mw = int(threadIdx.x) / 128 - 1;  // math warpgroup 0 or 1
        const int a_row0 = mw * 64;
        const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
        const int r = warp * 16 + lane / 4;  // this thread's rows of the warpgroup's 64: r and r + 8
        const bool storer = threadIdx.x % 128 == 0;
        const uint32_t c_s = smem_addr(smem + T::kCOffset + mw * T::kCBytes);
        if (storer) tma_prefetch_map(&map_c);
        bool released = !kStagger || mw == 1;  // whether this warpgroup has done its part of the stagger
        if (kStagger && mw == 1) named_bar_sync(kStaggerBarrier, 256);
        // Frees stage s for the producers: this CTA's, and with kCluster the peer's, which multicasts into it.
        const auto release = [&](uint32_t s) {
            if (lane == 0) {
                mbar_arrive(&empty[s]);
                if constexpr (kCluster) mbar_arrive_cluster(&empty[s], rank ^ 1);
            }
        };
        float acc[128], part[64];
        uint32_t it = 0;
        for (int32_t u = first_unit; u < num_units; u += unit_stride) {
            const row_tile rt = locate_row_tile<kWideBM>(p.expert_offsets, tile_start, p.num_experts,
                                                         (u / n_tiles) * kCtas + int32_t(rank));
            const int32_t n0 = (u % n_tiles) * T::kOutN;
            // The 64-row last tile of a group of an odd number of 64-row blocks leaves warpgroup 1 idle; a tile that
            // rounding added (no rows) both.
            if (a_row0 >= rt.rows) {
                for (int32_t kt = 0; kt < k_tiles; ++kt, ++it) {
                    const uint32_t s = it % T::kStages;
                    mbar_wait(&full[s], (it / T::kStages) & 1);
                    release(s);
                }
                continue;
            }
            // The weight scales of the two halves: gate's and up's block of the columns, or two column blocks.
            const float* ws0 = weight_scales(p, rt.expert, 0, n0 / 128);
            const float* ws1 =
                kSwiglu ? weight_scales(p, rt.expert, 1, n0 / 128) : weight_scales(p, rt.expert, 0, n0 / 128 + 1);
            float wn0 = __ldg(ws0), wn1 = __ldg(ws1);
#pragma unroll
            for (int i = 0; i < 128; ++i) acc[i] = 0.f;
            for (int32_t kt = 0; kt < k_tiles; ++kt, ++it) {
                const float w0 = wn0, w1 = wn1;
                if (kt + 1 < k_tiles) {
                    wn0 = __ldg(ws0 + kt + 1);
                    wn1 = __ldg(ws1 + kt + 1);
                }
                const uint32_t s = it % T::kStages;
                mbar_wait(&full[s], (it / T::kStages) & 1);
                if (gather) fence_proxy_async();  // the gathered rows came through cp.async (generic proxy)
                const unsigned char* a_s = smem + size_t(s) * T::kStageBytes;
                const uint64_t desc_a = smem_desc(a_s + a_row0 * kBK);
                const float sa0 = a_scale_s[s * kWideBM + a_row0 + r], sa1 = a_scale_s[s * kWideBM + a_row0 + r + 8];
                // kRegA: the K block's A fragments read once into registers, for both halves.
                uint32_t afrag[kBK / 32][4];
                if constexpr (kRegA) {
#pragma unroll
                    for (int kk = 0; kk < kBK / 32; ++kk)
                        ldmatrix_a(afrag[kk], smem_addr(a_s), a_row0 + warp * 16, kk, lane);
                }
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const uint64_t desc_b = smem_desc(a_s + T::kABytes + half * 128 * kBK);
                    wgmma_fence();
                    if constexpr (kRegA) {
                        wgmma_m64n128k32_e4m3_rs<0>(part, afrag[0], desc_b);
#pragma unroll
                        for (int kk = 1; kk < kBK / 32; ++kk)
                            wgmma_m64n128k32_e4m3_rs<1>(part, afrag[kk], desc_b + 2 * kk);
                    } else {
                        wgmma_m64n128k32_e4m3<0>(part, desc_a, desc_b);
#pragma unroll
                        for (int kk = 1; kk < kBK / 32; ++kk)
                            wgmma_m64n128k32_e4m3<1>(part, desc_a + 2 * kk, desc_b + 2 * kk);
                    }
                    wgmma_commit();
                    if (kStagger && !released) {
                        named_bar_arrive(kStaggerBarrier, 256);
                        released = true;
                    }
                    wgmma_wait<0>();
                    fence_accumulators(part);
                    if (half == 1) {
                        __syncwarp();
                        release(s);
                    }
                    const float w = half == 0 ? w0 : w1;
                    const float f0 = sa0 * w, f1 = sa1 * w;
#pragma unroll
                    for (int j = 0; j < 16; ++j) {
                        float* d = acc + 64 * half + 4 * j;
                        d[0] = fmaf(part[4 * j + 0], f0, d[0]);
                        d[1] = fmaf(part[4 * j + 1], f0, d[1]);
                        d[2] = fmaf(part[4 * j + 2], f1, d[2]);
                        d[3] = fmaf(part[4 * j + 3], f1, d[3]);
                    }
                }
            }

            // Accumulator element 64 half + 4 j + 2 h + q sits at row r + 8 h, column 128 half + 8 j + 2 (lane % 4)
            // + q of the warpgroup's 64 x 256 block (with swiglu half 0 is gate, half 1 up, of columns n0 + ...).
            if constexpr (kSwiglu) {
                float amax[2] = {0.f, 0.f};
#pragma unroll
                for (int j = 0; j < 16; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int q = 0; q < 2; ++q) {
                            const int i = 4 * j + 2 * h + q;
                            const float g = acc[i], u = acc[64 + i];
                            const int32_t col = n0 + 8 * j + 2 * (lane % 4) + q;
                            const float a = col < p.n ? __fdividef(g, 1.f + __expf(-g)) * u : 0.f;
                            acc[i] = a;
                            amax[h] = fmaxf(amax[h], fabsf(a));
                        }
                // A row's 128 columns are in the four lanes of its quad.
                float scale[2], inv[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 1));
                    amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 2));
                    scale[h] = amax[h] > 0.f ? amax[h] / 448.f : 1.f;
                    inv[h] = __frcp_rn(scale[h]);
                }
                if (storer) bulk_wait_read<0>();  // the previous tile's store has read the output buffer
                warpgroup_sync(1 + mw);
                // e4m3 codes into the 64 x 128-byte box, 128-byte swizzled (16-byte chunk c of row x at c ^ (x % 8)).
#pragma unroll
                for (int j = 0; j < 16; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int row = r + 8 * h;
                        const uint16_t codes = to_e4m3x2(acc[4 * j + 2 * h] * inv[h], acc[4 * j + 2 * h + 1] * inv[h]);
                        st_shared_b16(c_s + row * 128 + (((j >> 1) ^ (row % 8)) << 4) + 8 * (j & 1) + 2 * (lane % 4),
                                      codes);
                    }
                if (lane % 4 == 0) {
                    float* out = p.c_scales + size_t(n0 / 128) * p.c_scale_ld + rt.m0 + a_row0;
                    out[r] = scale[0];
                    out[r + 8] = scale[1];
                }
                fence_proxy_async();
                warpgroup_sync(1 + mw);
                if (storer) {
                    if (n0 < p.n) tma_store_2d(&map_c, c_s, n0, rt.m0 + a_row0);
                    bulk_commit();
                }
            } else {
                // BF16: four 64 x 64 boxes, 128-byte swizzled.
                if (storer) bulk_wait_read<0>();
                warpgroup_sync(1 + mw);
#pragma unroll
                for (int box = 0; box < 4; ++box)
#pragma unroll
                    for (int jj = 0; jj < 8; ++jj)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int i = 32 * box + 4 * jj + 2 * h;  // = 64 half + 4 j + 2 h
                            const __nv_bfloat162 pair = __floats2bfloat162_rn(acc[i], acc[i + 1]);
                            const int row = r + 8 * h;
                            st_shared_b32(c_s + box * 8192 + row * 128 + ((jj ^ (row % 8)) << 4) + (lane % 4) * 4,
                                          *reinterpret_cast<const uint32_t*>(&pair));
                        }
                fence_proxy_async();
                warpgroup_sync(1 + mw);
                if (storer) {
#pragma unroll
                    for (int box = 0; box < 4; ++box)
                        if (n0 + box * 64 < p.n) tma_store_2d(&map_c, c_s + box * 8192, n0 + box * 64, rt.m0 + a_row0);
                    bulk_commit();
                }
            }
        }
        if (kStagger && !released) named_bar_arrive(kStaggerBarrier, 256);
        if (storer) bulk_wait_all();
    }
    // The peer may still arrive on this CTA's barriers or multicast into its shared memory until it is done too.
    if constexpr (kCluster) {
        __syncwarp();
        cluster_sync();
    }
#endif
}

// ---------------------------------------------------------------------------------------------------------
// Pair tiles: clusters of two CTAs on one 128-row tile and one 128-channel output group (gate/up), the CTA of
// rank r computing its 64 output columns c0 = n0 + 64 r from 64 gate + 64 up rows of b. Each math warpgroup owns
// 64 rows x those 128 b rows: one wgmma m64n128k32 chain per K block into a 64-register partial, promoted once per K
// block (the wide tiles wait and promote twice per K block; the narrow ones read 40 KB per 4.2 MFLOP where a pair CTA
// reads 32 KB, 24 KB with kMulticastA). The group's per-row amax is the larger of the two CTAs' halves: each row's
// writer thread stores its rows' amax into the peer's shared memory (st.shared::cluster) and arrives on the peer's
// exchange barrier (release at cluster scope), then every thread waits on its own (acquire); buffers and barriers
// alternate by tile (the peer's stores for tile t + 2 wait on this CTA's arrivals for t + 1, made after it read t's).
// kMulticastA: each CTA loads 64 of the tile's 128 A rows and multicasts them to both (the wide_multicast protocol: a
// stage is free once the math warps of both CTAs released it). Without swiglu (down) a cluster's unit is 256 output
// columns, 128 per CTA (one weight-scale block), BF16 out as the wide tiles; worth it only with kMulticastA.

constexpr int kPairBM = 128;  // rows of A per tile
constexpr int kPairBN = 128;  // rows of b per CTA: 64 gate + 64 up

template <bool kSwiglu>
struct fp8_pair_tile {
    static constexpr int kOutN = kSwiglu ? 128 : 256;  // output columns of a cluster's unit
    static constexpr uint32_t kABytes = kPairBM * kBK;
    static constexpr uint32_t kBBytes = kPairBN * kBK;
    static constexpr uint32_t kStageBytes = kABytes + kBBytes;
    static constexpr uint32_t kCBytes = kSwiglu ? 64 * 64 : 2 * 64 * 128;  // a warpgroup's e4m3 box or 2 BF16 boxes
    static constexpr size_t kFixedBytes =
        1024 + 16 * sizeof(uint64_t) + (kMaxExperts + 1) * sizeof(int32_t) + 2 * kPairBM * sizeof(float);
    static constexpr int kFit = int((kSmemLimit - kFixedBytes - 2 * kCBytes) / (kStageBytes + kPairBM * sizeof(float)));
    static constexpr int kStages = kFit < 8 ? kFit : 8;
    static constexpr size_t kCOffset = size_t(kStages) * kStageBytes;
    static constexpr size_t kScaleOffset = kCOffset + 2 * kCBytes;                           // [kStages][128] floats
    static constexpr size_t kExchangeOffset = kScaleOffset + size_t(kStages) * kPairBM * 4;  // [2][128] floats
    static constexpr size_t kBarOffset = kExchangeOffset + 2 * kPairBM * sizeof(float);
    static size_t smem_bytes(int32_t num_experts) {
        return kBarOffset + (2 * kStages + 2) * sizeof(uint64_t) + size_t(num_experts + 1) * sizeof(int32_t) + 1024;
    }
    static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0 && kCBytes % 1024 == 0, "1024-byte swizzle atoms");
    static_assert(kStages >= 3, "the pipeline needs three stages");
    static_assert(2 * kStages + 2 <= 16, "the barriers' room in kFixedBytes");
};

/// The address of the same shared-memory location in the cluster's CTA `rank`.
__device__ __forceinline__ uint32_t peer_addr(const void* p, uint32_t rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(p)), "r"(rank));
    return remote;
}
__device__ __forceinline__ void st_cluster_f32(uint32_t addr, float v) {
    asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}
/// Arrives on a barrier of another CTA of the cluster, releasing this thread's earlier writes at cluster scope.
__device__ __forceinline__ void mbar_arrive_release_cluster(uint32_t remote_bar) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote_bar) : "memory");
}
/// mbar_wait with acquire at cluster scope (what the peer released before arriving is visible after).
__device__ __forceinline__ void mbar_wait_acquire_cluster(uint64_t* bar, uint32_t parity) {
    const uint32_t addr = smem_addr(bar);
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n"
            : "=r"(done)
            : "r"(addr), "r"(parity)
            : "memory");
    } while (!done);
}

template <bool kSwiglu, bool kMulticastA>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_fp8_pair_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                                 const __grid_constant__ CUtensorMap map_c, const grouped_gemm_fp8_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using T = fp8_pair_tile<kSwiglu>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    float* a_scale_s = reinterpret_cast<float*>(smem + T::kScaleOffset);
    float* exchange = reinterpret_cast<float*>(smem + T::kExchangeOffset);  // [2][128]: the peer's row amax
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + T::kBarOffset);
    uint64_t* empty = full + T::kStages;
    uint64_t* xbar = empty + T::kStages;  // [2]: the peer's math warps have stored their rows' amax
    int32_t* tile_start = reinterpret_cast<int32_t*>(xbar + 2);
    const uint32_t rank = cluster_rank(), peer = rank ^ 1;
    if (threadIdx.x == 0) {
        for (int s = 0; s < T::kStages; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], kMulticastA ? 16 : 8);  // one arrive per math warp (of both CTAs with multicast)
        }
        mbar_init(&xbar[0], 64);  // one arrive per row writer (lane % 4 == 0) of the peer's eight math warps
        mbar_init(&xbar[1], 64);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    build_tile_schedule<kPairBM>(p.expert_offsets, p.num_experts, tile_start);
    __syncthreads();
    cluster_sync();  // the peer's barriers are initialised before anything reaches them
    const int32_t groups = (p.n + T::kOutN - 1) / T::kOutN;  // column units: 128-channel groups, or 256 columns
    const int32_t num_units = tile_start[p.num_experts] * groups;
    const int32_t k_tiles = (p.k + kBK - 1) / kBK;
    const int32_t first_unit = int32_t(cluster_id()), unit_stride = int32_t(cluster_count());

    if (threadIdx.x < 128) {
        if (threadIdx.x == 0) {
            tma_prefetch_map(&map_a);
            tma_prefetch_map(&map_b);
            uint32_t it = 0;
            for (int32_t u = first_unit; u < num_units; u += unit_stride) {
                const row_tile rt = locate_row_tile<kPairBM>(p.expert_offsets, tile_start, p.num_experts, u / groups);
                const int32_t c0 = (u % groups) * T::kOutN + T::kOutN / 2 * int32_t(rank);
                const int32_t b_row = rt.expert * (kSwiglu ? 2 * p.n : p.n);
                for (int32_t kt = 0; kt < k_tiles; ++kt, ++it) {
                    const uint32_t s = it % T::kStages;
                    mbar_wait(&empty[s], ((it / T::kStages) & 1) ^ 1);
                    unsigned char* a_s = smem + size_t(s) * T::kStageBytes;
                    unsigned char* b_s = a_s + T::kABytes;
                    const int32_t k0 = kt * kBK;
                    mbar_arrive_expect_tx(&full[s], T::kStageBytes + uint32_t(rt.rows) * 4);
                    if constexpr (kMulticastA) {
                        tma_load_2d_multicast(a_s + rank * 64 * kBK, &map_a, k0, rt.m0 + 64 * int32_t(rank), &full[s],
                                              0x3);
                    } else {
                        tma_load_2d(a_s, &map_a, k0, rt.m0, &full[s]);
                        tma_load_2d(a_s + 64 * kBK, &map_a, k0, rt.m0 + 64, &full[s]);
                    }
                    tma_load_2d(b_s, &map_b, k0, b_row + c0, &full[s]);
                    tma_load_2d(b_s + 64 * kBK, &map_b, k0, b_row + (kSwiglu ? p.n : 64) + c0, &full[s]);
                    bulk_load(a_scale_s + size_t(s) * kPairBM, p.a_scales + size_t(kt) * p.a_scale_ld + rt.m0,
                              uint32_t(rt.rows) * 4, &full[s]);
                }
            }
        }
    } else {
        const int mw = int(threadIdx.x) / 128 - 1;  // math warpgroup 0 or 1
        const int a_row0 = mw * 64;
        const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
        const int r = warp * 16 + lane / 4;  // this thread's rows of the warpgroup's 64: r and r + 8
        const bool storer = threadIdx.x % 128 == 0;
        const uint32_t c_s = smem_addr(smem + T::kCOffset + mw * T::kCBytes);
        if (storer) tma_prefetch_map(&map_c);
        const auto release = [&](uint32_t s) {
            if (lane == 0) {
                mbar_arrive(&empty[s]);
                if constexpr (kMulticastA) mbar_arrive_cluster(&empty[s], peer);
            }
        };
        // Hands this warp's rows' amax to the peer and returns the peer's for the same rows (tile number `tile`).
        const auto swap_amax = [&](uint32_t tile, const float(&mine)[2], float(&theirs)[2]) {
            const uint32_t buf = tile & 1;
            if (lane % 4 == 0) {  // each row's writer releases its own two stores
                const uint32_t dst = peer_addr(exchange + buf * kPairBM + a_row0 + r, peer);
                st_cluster_f32(dst, mine[0]);
                st_cluster_f32(dst + 8 * sizeof(float), mine[1]);
                mbar_arrive_release_cluster(peer_addr(&xbar[buf], peer));
            }
            mbar_wait_acquire_cluster(&xbar[buf], (tile >> 1) & 1);
            theirs[0] = exchange[buf * kPairBM + a_row0 + r];
            theirs[1] = exchange[buf * kPairBM + a_row0 + r + 8];
        };
        float acc[64], part[64];
        uint32_t it = 0, tile = 0;
        for (int32_t u = first_unit; u < num_units; u += unit_stride, ++tile) {
            const row_tile rt = locate_row_tile<kPairBM>(p.expert_offsets, tile_start, p.num_experts, u / groups);
            const int32_t n0 = (u % groups) * T::kOutN, c0 = n0 + T::kOutN / 2 * int32_t(rank);
            // The 64-row last tile of a group of an odd number of 64-row blocks leaves warpgroup 1 idle: it passes
            // the stages on and takes part in the amax exchange with zeros.
            if (a_row0 >= rt.rows) {
                for (int32_t kt = 0; kt < k_tiles; ++kt, ++it) {
                    const uint32_t s = it % T::kStages;
                    mbar_wait(&full[s], (it / T::kStages) & 1);
                    release(s);
                }
                if constexpr (kSwiglu) {
                    const float zero[2] = {0.f, 0.f};
                    float unused[2];
                    swap_amax(tile, zero, unused);
                }
                continue;
            }
            // The weight scales: gate's and up's block of the group, or the one column block of c0.
            const float* ws0 = weight_scales(p, rt.expert, 0, kSwiglu ? n0 / 128 : c0 / 128);
            const float* ws1 = kSwiglu ? weight_scales(p, rt.expert, 1, n0 / 128) : ws0;
            float wn0 = __ldg(ws0), wn1 = __ldg(ws1);
#pragma unroll
            for (int i = 0; i < 64; ++i) acc[i] = 0.f;
            for (int32_t kt = 0; kt < k_tiles; ++kt, ++it) {
                const float w0 = wn0, w1 = wn1;
                if (kt + 1 < k_tiles) {
                    wn0 = __ldg(ws0 + kt + 1);
                    wn1 = __ldg(ws1 + kt + 1);
                }
                const uint32_t s = it % T::kStages;
                mbar_wait(&full[s], (it / T::kStages) & 1);
                const unsigned char* a_s = smem + size_t(s) * T::kStageBytes;
                const uint64_t desc_a = smem_desc(a_s + a_row0 * kBK);
                const uint64_t desc_b = smem_desc(a_s + T::kABytes);
                const float sa0 = a_scale_s[s * kPairBM + a_row0 + r], sa1 = a_scale_s[s * kPairBM + a_row0 + r + 8];
                wgmma_fence();
                wgmma_m64n128k32_e4m3<0>(part, desc_a, desc_b);
#pragma unroll
                for (int kk = 1; kk < kBK / 32; ++kk) wgmma_m64n128k32_e4m3<1>(part, desc_a + 2 * kk, desc_b + 2 * kk);
                wgmma_commit();
                wgmma_wait<0>();
                fence_accumulators(part);
                __syncwarp();
                release(s);
                const float s00 = sa0 * w0, s10 = sa1 * w0, s01 = sa0 * w1, s11 = sa1 * w1;
#pragma unroll
                for (int j = 0; j < 16; ++j) {
                    const float f0 = j < 8 ? s00 : s01, f1 = j < 8 ? s10 : s11;
                    acc[4 * j + 0] = fmaf(part[4 * j + 0], f0, acc[4 * j + 0]);
                    acc[4 * j + 1] = fmaf(part[4 * j + 1], f0, acc[4 * j + 1]);
                    acc[4 * j + 2] = fmaf(part[4 * j + 2], f1, acc[4 * j + 2]);
                    acc[4 * j + 3] = fmaf(part[4 * j + 3], f1, acc[4 * j + 3]);
                }
            }

            if constexpr (kSwiglu) {
                // Accumulator element 4 j + 2 h + q sits at row r + 8 h, b row 8 j + 2 (lane % 4) + q of the stage:
                // gate column c0 + 8 j + ... for j < 8, the matching up column for j + 8.
                float amax[2] = {0.f, 0.f};
#pragma unroll
                for (int j = 0; j < 8; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int q = 0; q < 2; ++q) {
                            const int i = 4 * j + 2 * h + q;
                            const float g = acc[i], up = acc[32 + i];
                            const int32_t col = c0 + 8 * j + 2 * (lane % 4) + q;
                            const float a = col < p.n ? __fdividef(g, 1.f + __expf(-g)) * up : 0.f;
                            acc[i] = a;
                            amax[h] = fmaxf(amax[h], fabsf(a));
                        }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 1));
                    amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 2));
                }
                float other[2];
                swap_amax(tile, amax, other);
                float scale[2], inv[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const float m = fmaxf(amax[h], other[h]);
                    scale[h] = m > 0.f ? m / 448.f : 1.f;
                    inv[h] = __frcp_rn(scale[h]);
                }
                if (storer) bulk_wait_read<0>();  // the previous tile's store has read the output buffer
                warpgroup_sync(1 + mw);
                // e4m3 codes into the 64 x 64-byte buffer (no swizzle), then one TMA store of the box.
#pragma unroll
                for (int j = 0; j < 8; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const uint16_t codes = to_e4m3x2(acc[4 * j + 2 * h] * inv[h], acc[4 * j + 2 * h + 1] * inv[h]);
                        st_shared_b16(c_s + (r + 8 * h) * 64 + 8 * j + 2 * (lane % 4), codes);
                    }
                if (rank == 0 && lane % 4 == 0) {
                    float* out = p.c_scales + size_t(n0 / 128) * p.c_scale_ld + rt.m0 + a_row0;
                    out[r] = scale[0];
                    out[r + 8] = scale[1];
                }
                fence_proxy_async();
                warpgroup_sync(1 + mw);
                if (storer) {
                    if (c0 < p.n) tma_store_2d(&map_c, c_s, c0, rt.m0 + a_row0);
                    bulk_commit();
                }
            } else {
                // BF16: two 64 x 64 boxes, 128-byte swizzled (16-byte chunk c of row x at slot c ^ (x % 8)).
                if (storer) bulk_wait_read<0>();
                warpgroup_sync(1 + mw);
#pragma unroll
                for (int box = 0; box < 2; ++box)
#pragma unroll
                    for (int jj = 0; jj < 8; ++jj)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int j = 8 * box + jj;
                            const __nv_bfloat162 v2 = __floats2bfloat162_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
                            const int row = r + 8 * h;
                            st_shared_b32(c_s + box * 8192 + row * 128 + ((jj ^ (row % 8)) << 4) + (lane % 4) * 4,
                                          *reinterpret_cast<const uint32_t*>(&v2));
                        }
                fence_proxy_async();
                warpgroup_sync(1 + mw);
                if (storer) {
#pragma unroll
                    for (int box = 0; box < 2; ++box)
                        if (c0 + box * 64 < p.n) tma_store_2d(&map_c, c_s + box * 8192, c0 + box * 64, rt.m0 + a_row0);
                    bulk_commit();
                }
            }
        }
        if (storer) bulk_wait_all();
    }
    // The peer may still arrive on this CTA's barriers, store into its exchange or multicast into it until it is done.
    __syncwarp();
    cluster_sync();
#endif
}

/// Tensor map of a row-major matrix [rows, cols] of `elem` bytes per element, boxes of box_cols x box_rows.
CUtensorMap make_map(const void* base, CUtensorMapDataType type, size_t elem, int64_t rows, int32_t cols,
                     int32_t box_cols, int32_t box_rows, CUtensorMapSwizzle swizzle) {
    CUtensorMap map{};
    const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(cols) * elem};
    const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
    const cuuint32_t elem_strides[2] = {1, 1};
    const CUresult res = encode_tiled()(&map, type, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    ZMOE_KERNEL_REQUIRE(res == CUDA_SUCCESS, "grouped_gemm_fp8: cuTensorMapEncodeTiled failed");
    return map;
}

template <int kBM, bool kSwiglu>
void launch_as(const grouped_gemm_fp8_params& p, cudaStream_t stream) {
    using T = fp8_tile<kBM, kSwiglu>;
    if (p.max_rows < 64) return;  // groups are multiples of row_align >= 64 rows: all are empty
    auto kernel = grouped_gemm_fp8_kernel<kBM, kSwiglu>;
    const size_t smem = T::smem_bytes(p.num_experts);
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const int32_t n_b = kSwiglu ? 2 * p.n : p.n;
    const CUtensorMap map_a =
        make_map(p.a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p.max_rows, p.k, kBK, kBM, CU_TENSOR_MAP_SWIZZLE_128B);
    const CUtensorMap map_b = make_map(p.b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, int64_t(p.num_experts) * n_b, p.k, kBK,
                                       kSwiglu ? 64 : T::kBTile, CU_TENSOR_MAP_SWIZZLE_128B);
    const CUtensorMap map_c =
        kSwiglu
            ? make_map(p.c_q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p.max_rows, p.n, 64, 64, CU_TENSOR_MAP_SWIZZLE_NONE)
            : make_map(p.c, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p.max_rows, p.n, 64, 64, CU_TENSOR_MAP_SWIZZLE_128B);
    const int64_t tiles_bound = int64_t(p.max_rows / 64) * ((p.n + T::kOutN - 1) / T::kOutN);
    const int ctas = p.max_ctas > 0 ? std::min(p.max_ctas, current_device().sms) : current_device().sms;
    const int grid = int(std::max<int64_t>(1, std::min<int64_t>(tiles_bound, ctas)));
    kernel<<<grid, kThreads, smem, stream>>>(map_a, map_b, map_c, p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

template <bool kSwiglu, bool kStagger, bool kCluster, bool kRegA = false>
void launch_wide(const grouped_gemm_fp8_params& p, cudaStream_t stream) {
    using T = fp8_wide_tile<kSwiglu>;
    if (p.max_rows < 64) return;  // groups are multiples of row_align >= 64 rows: all are empty
    auto kernel = grouped_gemm_fp8_wide_kernel<kSwiglu, kStagger, kCluster, kRegA>;
    const size_t smem = T::smem_bytes(p.num_experts);
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const int32_t n_b = kSwiglu ? 2 * p.n : p.n;
    const CUtensorMap map_a =
        make_map(p.a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p.max_rows, p.k, kBK, kWideBM, CU_TENSOR_MAP_SWIZZLE_128B);
    const CUtensorMap map_b = make_map(p.b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, int64_t(p.num_experts) * n_b, p.k, kBK,
                                       128, CU_TENSOR_MAP_SWIZZLE_128B);
    const CUtensorMap map_c =
        kSwiglu
            ? make_map(p.c_q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p.max_rows, p.n, 128, 64, CU_TENSOR_MAP_SWIZZLE_128B)
            : make_map(p.c, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p.max_rows, p.n, 64, 64, CU_TENSOR_MAP_SWIZZLE_128B);
    // Row tiles <= max_rows / 128 + one partial tile per expert (+ one more per expert from the rounding).
    const int64_t tiles_bound =
        int64_t((p.max_rows + kWideBM - 1) / kWideBM + 2 * p.num_experts) * ((p.n + T::kOutN - 1) / T::kOutN);
    const int ctas = p.max_ctas > 0 ? std::min(p.max_ctas, current_device().sms) : current_device().sms;
    if constexpr (kCluster) {
        ZMOE_KERNEL_REQUIRE(ctas >= 2, "grouped_gemm_fp8: wide_multicast needs max_ctas 0 or >= 2");
        cudaLaunchConfig_t config{};
        config.blockDim = dim3(kThreads);
        config.dynamicSmemBytes = smem;
        config.stream = stream;
        cudaLaunchAttribute attribute{};
        attribute.id = cudaLaunchAttributeClusterDimension;
        attribute.val.clusterDim.x = 2;
        attribute.val.clusterDim.y = 1;
        attribute.val.clusterDim.z = 1;
        config.attrs = &attribute;
        config.numAttrs = 1;
        // A persistent grid must be resident at once: as many clusters as the GPU holds together (the SMs of a GPC
        // need not pair up), within the CTA budget.
        config.gridDim = dim3(unsigned(ctas / 2 * 2));
        int clusters = 0;
        ZMOE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
        ZMOE_KERNEL_REQUIRE(clusters > 0, "grouped_gemm_fp8: no cluster of two CTAs fits");
        const int64_t units_bound = (tiles_bound + 1) / 2;
        const int64_t grid_clusters = std::max<int64_t>(1, std::min<int64_t>({units_bound, clusters, ctas / 2}));
        config.gridDim = dim3(unsigned(2 * grid_clusters));
        ZMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, map_a, map_b, map_c, p));
    } else {
        const int grid = int(std::max<int64_t>(1, std::min<int64_t>(tiles_bound, ctas)));
        kernel<<<grid, kThreads, smem, stream>>>(map_a, map_b, map_c, p);
    }
    ZMOE_CUDA_CHECK_LAUNCH();
}

template <bool kSwiglu, bool kMulticastA>
void launch_pair(const grouped_gemm_fp8_params& p, cudaStream_t stream) {
    using T = fp8_pair_tile<kSwiglu>;
    if (p.max_rows < 64) return;  // groups are multiples of row_align >= 64 rows: all are empty
    auto kernel = grouped_gemm_fp8_pair_kernel<kSwiglu, kMulticastA>;
    const size_t smem = T::smem_bytes(p.num_experts);
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const CUtensorMap map_a =
        make_map(p.a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p.max_rows, p.k, kBK, 64, CU_TENSOR_MAP_SWIZZLE_128B);
    const CUtensorMap map_b =
        make_map(p.b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, int64_t(p.num_experts) * (kSwiglu ? 2 * p.n : p.n), p.k, kBK,
                 64, CU_TENSOR_MAP_SWIZZLE_128B);
    const CUtensorMap map_c =
        kSwiglu
            ? make_map(p.c_q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p.max_rows, p.n, 64, 64, CU_TENSOR_MAP_SWIZZLE_NONE)
            : make_map(p.c, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p.max_rows, p.n, 64, 64, CU_TENSOR_MAP_SWIZZLE_128B);
    // Units (a row tile, a column unit), one per cluster: row tiles <= max_rows / 128 + one partial per expert.
    const int64_t units_bound =
        int64_t((p.max_rows + kPairBM - 1) / kPairBM + p.num_experts) * ((p.n + T::kOutN - 1) / T::kOutN);
    const int ctas = p.max_ctas > 0 ? std::min(p.max_ctas, current_device().sms) : current_device().sms;
    ZMOE_KERNEL_REQUIRE(ctas >= 2, "grouped_gemm_fp8: pair tiles need max_ctas 0 or >= 2");
    cudaLaunchConfig_t config{};
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = 2;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    config.gridDim = dim3(unsigned(ctas / 2 * 2));
    int clusters = 0;
    ZMOE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
    ZMOE_KERNEL_REQUIRE(clusters > 0, "grouped_gemm_fp8: no cluster of two CTAs fits");
    const int64_t grid_clusters = std::max<int64_t>(1, std::min<int64_t>({units_bound, clusters, ctas / 2}));
    config.gridDim = dim3(unsigned(2 * grid_clusters));
    ZMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, map_a, map_b, map_c, p));
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace

namespace {
/// Whether the groups average about 128 rows or more (as the BF16 kernel decides its 128-row tiles).
bool tall_groups(const grouped_gemm_fp8_params& p) {
    return p.row_align % 128 == 0 || int64_t(p.max_rows) >= int64_t(p.num_experts) * (128 + p.row_align - 1);
}
}  // namespace

fp8_gemm_tiles resolve_fp8_gemm_tiles(const grouped_gemm_fp8_params& p) {
    if (p.tiles != fp8_gemm_tiles::automatic) return p.tiles;
    return tall_groups(p) ? fp8_gemm_tiles::wide : fp8_gemm_tiles::narrow;
}

bool fp8_gemm_tiles_gather(fp8_gemm_tiles tiles) {
    return tiles == fp8_gemm_tiles::wide || tiles == fp8_gemm_tiles::wide_staggered ||
           tiles == fp8_gemm_tiles::wide_multicast;
}

bool grouped_gemm_fp8_supported(const grouped_gemm_fp8_params& p) {
    const auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    const void* out = p.swiglu ? static_cast<const void*>(p.c_q) : static_cast<const void*>(p.c);
    return current_device().major == 9 && p.row_align % 64 == 0 && p.k % 16 == 0 && p.n % 16 == 0 &&
           p.num_experts <= kMaxExperts && p.a_scale_ld % 4 == 0 && p.a_scale_ld >= p.max_rows && aligned16(p.a) &&
           aligned16(p.b) && aligned16(out) && aligned16(p.a_scales) &&
           (!p.swiglu || (p.c_scales != nullptr && p.c_scale_ld >= p.max_rows));
}

void launch_grouped_gemm_fp8(const grouped_gemm_fp8_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(grouped_gemm_fp8_supported(p),
                        "grouped_gemm_fp8: needs compute capability 9.x, row_align % 64 == 0, n and k multiples of 16, "
                        "a_scale_ld >= max_rows and a multiple of 4, 16-byte aligned operands");
    if (p.max_rows == 0 || p.n == 0) return;
    // As the BF16 kernel: 128-row tiles once the groups average about 128 rows (the down GEMM only; gate/up makes
    // one 128-channel output group per tile with 64-row tiles).
    const bool tall = tall_groups(p);
    const fp8_gemm_tiles tiles = resolve_fp8_gemm_tiles(p);
    ZMOE_KERNEL_REQUIRE(p.a_rows == nullptr || fp8_gemm_tiles_gather(tiles),
                        "grouped_gemm_fp8: a_rows needs wide tiles");
    switch (tiles) {
        case fp8_gemm_tiles::narrow:
            if (p.swiglu)
                launch_as<64, true>(p, stream);
            else if (tall)
                launch_as<128, false>(p, stream);
            else
                launch_as<64, false>(p, stream);
            return;
        case fp8_gemm_tiles::wide:
            return p.swiglu ? launch_wide<true, false, false>(p, stream) : launch_wide<false, false, false>(p, stream);
        case fp8_gemm_tiles::wide_staggered:
            return p.swiglu ? launch_wide<true, true, false>(p, stream) : launch_wide<false, true, false>(p, stream);
        case fp8_gemm_tiles::wide_multicast:
            return p.swiglu ? launch_wide<true, false, true>(p, stream) : launch_wide<false, false, true>(p, stream);
        case fp8_gemm_tiles::pair:
            return p.swiglu ? launch_pair<true, false>(p, stream) : launch_wide<false, false, false>(p, stream);
        case fp8_gemm_tiles::pair_multicast:
            return p.swiglu ? launch_pair<true, true>(p, stream) : launch_pair<false, true>(p, stream);
        case fp8_gemm_tiles::wide_rs:
            return p.swiglu ? launch_wide<true, false, false, true>(p, stream)
                            : launch_wide<false, false, false, true>(p, stream);
        case fp8_gemm_tiles::automatic:
            break;  // resolved above
    }
    ZMOE_KERNEL_REQUIRE(false, "grouped_gemm_fp8: unknown tiles value");
}

}  // namespace zmoe::kernels
