// Grouped expert GEMM for Hopper (sm_90a): TMA loads into 128-byte-swizzled shared memory, wgmma on the tensor
// cores, a warp-specialised persistent kernel. Same contract as launch_grouped_gemm (kernels/api.hpp):
// c[r] = a[r] . b[e]^T for the rows r of each expert e, SiLU(gate) * up fused into the epilogue with swiglu.
//
// Layout of one CTA (384 threads): warpgroup 0 is the producer (one thread issues the TMA copies of a
// kStages-deep ring of (A tile, B tile) stages, each completing on its "full" mbarrier; with a_rows, its 128
// threads gather the A rows with cp.async instead, writing the same 128-byte swizzle, and each thread's arrive on
// the stage's full barrier is made by the hardware once its copies have landed (cp.async.mbarrier.arrive), so the
// producer runs the whole ring ahead of the math as with TMA); warpgroups 1 and 2
// multiply (wgmma m64nNk16, A and B read from shared memory through matrix descriptors, one stage's wgmmas kept
// in flight while the next stage's are issued) and release each stage through its "empty" mbarrier. Tiles are BM
// rows (64 or 128, dividing row_align so a tile never straddles two experts) by 256 rows of b (with swiglu: 128
// gate rows and the 128 matching up rows, so a tile makes 128 output columns). With BM = 128 each math warpgroup
// owns 64 rows and all 256 columns; with BM = 64 both own the same 64 rows and 128 columns each. The tile list
// is built on the device: the CTAs stride over (row tile, column tile) pairs up to expert_offsets[num_experts] /
// BM row tiles, row-tile-major, so the CTAs running at one time share an expert's weights and a row tile's
// activations in L2.
//
// Epilogue: each math warpgroup converts its accumulators to BF16 (after SiLU * up), 64 x 64 boxes at a time, into
// its own 128-byte-swizzled shared-memory buffers, and one of its threads stores the boxes with TMA (bulk async
// groups); the warpgroup goes on to the next tile's main loop while the stores run, and waits for a store to have
// read its buffer only before it writes that buffer again, so the global writes overlap the math. The gate/up GEMM
// (by default; coop_variant) has a buffer per box and writes a tile's boxes in one phase between two barriers,
// with SiLU through tanh.approx; the down GEMM reuses two buffers box after box.

#include <cuda.h>

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/grouped_gemm_sm90.hpp"
#include "kernels/sm90_primitives.cuh"

namespace zmoe::kernels::detail {
namespace {

using namespace sm90;

constexpr int kThreads = 384;          // producer warpgroup + two math warpgroups
constexpr int kBK = 64;                // K elements of one stage: one 128-byte swizzle row
constexpr int kBRows = 256;            // rows of b per tile
constexpr size_t kSmemLimit = 232448;  // an sm_90 block's dynamic shared memory (227 KB)

/// The shared memory of the kernel: a ring of stages (a kBM-row A tile and kBTileRows rows of b, kBK wide), then
/// each math warpgroup's kCBufsPerWg output boxes, the ring's barriers and the tile schedule.
template <int kBM, int kBTileRows, int kCBufsPerWg>
struct ring_layout {
    static constexpr int kBTile = kBTileRows;  // rows of b per tile
    static constexpr uint32_t kABytes = kBM * kBK * 2;
    static constexpr uint32_t kBBytes = kBTileRows * kBK * 2;
    static constexpr uint32_t kStageBytes = kABytes + kBBytes;
    static constexpr uint32_t kCBoxBytes = 64 * 128;          // 64 rows x 64 BF16 columns
    static constexpr int kCBufs = kCBufsPerWg;                // output box buffers of a math warpgroup
    static constexpr uint32_t kCBytes = kCBufs * kCBoxBytes;  // one math warpgroup's output buffers
    // Alignment slack, the barriers (at most 8 stages of 2) and the schedule; the stages take the rest (up to 8).
    static constexpr size_t kFixedBytes = 1024 + 16 * sizeof(uint64_t) + (kMaxWgmmaExperts + 1) * sizeof(int32_t);
    static constexpr int kFit = int((kSmemLimit - kFixedBytes - 2 * kCBytes) / kStageBytes);
    static constexpr int kStages = kFit < 8 ? kFit : 8;
    static constexpr size_t kCOffset = size_t(kStages) * kStageBytes;
    static constexpr size_t kBarOffset = kCOffset + 2 * kCBytes;
    /// Dynamic shared memory: the stages, the math warpgroups' output buffers, the barriers, the tile schedule
    /// (num_experts + 1 ints) and the alignment slack.
    static size_t smem_bytes(int32_t num_experts) {
        return kBarOffset + 2 * kStages * sizeof(uint64_t) + size_t(num_experts + 1) * sizeof(int32_t) + 1024;
    }
    static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "boxes must stay 1024-byte aligned (swizzle atom)");
    static_assert(kStages >= 2, "the pipeline needs two stages");
};

/// Output boxes (64 x 64) a math warpgroup of the cooperative kernel makes per tile.
constexpr int wg_boxes(int bm, bool swiglu) { return (swiglu ? 1 : 2) * (bm == 128 ? 128 : 64) / 64; }
/// Its output buffers: one per box (all_boxes), else two, or one where it makes a single box.
constexpr int wg_buffers(int bm, bool swiglu, bool all_boxes) {
    return all_boxes || wg_boxes(bm, swiglu) < 2 ? wg_boxes(bm, swiglu) : 2;
}

/// The cooperative kernel's tile: kBM rows x 256 rows of b, both math warpgroups on it. With kAllBoxes each math
/// warpgroup has a buffer for every output box of a tile (one write phase per tile), else two (one where it makes
/// a single box), reused box after box.
template <int kBM, bool kSwiglu, bool kAllBoxes = false>
struct wg_tile : ring_layout<kBM, kBRows, wg_buffers(kBM, kSwiglu, kAllBoxes)> {
    static constexpr bool kOnePhase = kAllBoxes;
    static constexpr int kWgN = kBM == 128 ? 256 : 128;          // wgmma N of each math warpgroup
    static constexpr int kOutN = kSwiglu ? kBRows / 2 : kBRows;  // output columns of a tile
    static constexpr int kWgOut = kSwiglu ? kWgN / 2 : kWgN;     // output columns of a math warpgroup
    static constexpr int kBoxB = kSwiglu ? kWgN / 2 : kBRows;    // rows of one TMA box of b
    static constexpr int kBGroup = kWgN;                         // with swiglu: gate rows then as many up rows
};

/// d (64 x 256, fp32) += A (64 x 16) . B (256 x 16)^T, both BF16 and K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" ZMOE_WGMMA_D0_63 ", " ZMOE_WGMMA_D64_127
                 "}, %128, %129, 1, 1, 1, 0, 0;\n"
                 : ZMOE_WGMMA_ACC32(0), ZMOE_WGMMA_ACC32(32), ZMOE_WGMMA_ACC32(64), ZMOE_WGMMA_ACC32(96)
                 : "l"(desc_a), "l"(desc_b));
}

/// d (64 x 128, fp32) += A (64 x 16) . B (128 x 16)^T.
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" ZMOE_WGMMA_D0_63
                 "}, %64, %65, 1, 1, 1, 0, 0;\n"
                 : ZMOE_WGMMA_ACC32(0), ZMOE_WGMMA_ACC32(32)
                 : "l"(desc_a), "l"(desc_b));
}

template <int kWgN>
__device__ __forceinline__ void wgmma_tile(float (&d)[kWgN / 2], uint64_t desc_a, uint64_t desc_b) {
    if constexpr (kWgN == 256)
        wgmma_m64n256k16(d, desc_a, desc_b);
    else
        wgmma_m64n128k16(d, desc_a, desc_b);
}

/// Gathering producer: the rows of a behind this thread's rows threadIdx.x / 8 + 16 j of the row tile at m0 (-1
/// past max_rows).
template <int kBM>
__device__ __forceinline__ void gather_rows_of_tile(const grouped_gemm_params& p, int32_t m0,
                                                    int32_t (&src)[kBM / 16]) {
#pragma unroll
    for (int j = 0; j < kBM / 16; ++j) {
        const int32_t row = m0 + int32_t(threadIdx.x) / 8 + 16 * j;
        src[j] = row < p.max_rows ? p.a_rows[row] : -1;
    }
}

/// Gathering producer: this thread's 16-byte chunk of K columns [k0, k0 + 64) of its rows, into the stage's A tile.
template <int kBM>
__device__ __forceinline__ void gather_stage(const grouped_gemm_params& p, unsigned char* a_s,
                                             const int32_t (&src)[kBM / 16], int32_t k0, int chunk) {
    const int32_t k = k0 + chunk * 8;
#pragma unroll
    for (int j = 0; j < kBM / 16; ++j) {
        // Row r's chunk c goes to 16-byte slot c ^ (r % 8) of its 128 bytes: the 128-byte swizzle TMA writes and
        // the matrix descriptors read.
        const int r = int(threadIdx.x) / 8 + 16 * j;
        const bool valid = src[j] >= 0 && k < p.k;
        cp_async_16(a_s + r * 128 + ((chunk ^ (r & 7)) << 4), valid ? p.a + size_t(src[j]) * p.k + k : p.a, valid);
    }
}

/// SiLU(g) = g * sigmoid(g) three ways: g / (1 + e^-g) with IEEE division (kSiluDiv: a division subroutine per
/// element), with the approximate division (kSiluFastDiv: two MUFU operations), or 0.5 g (1 + tanh(0.5 g)) with
/// tanh.approx (kSiluTanh: one; relative error ~2^-11, below BF16's rounding of the product).
constexpr int kSiluDiv = 0, kSiluFastDiv = 1, kSiluTanh = 2;
template <int kSilu>
__device__ __forceinline__ float silu(float g) {
    if constexpr (kSilu == kSiluDiv) {
        return g / (1.f + __expf(-g));
    } else if constexpr (kSilu == kSiluFastDiv) {
        return __fdividef(g, 1.f + __expf(-g));
    } else {
        const float h = 0.5f * g;
        float t;
        asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
        return fmaf(h, t, h);
    }
}

/// Epilogue: output box `box` (64 rows x 64 columns) of a warpgroup's 64 x kWgN accumulator block, after SiLU * up
/// with swiglu (gate columns in the first kWgN / 2, up in the rest), as BF16 into the 128-byte-swizzled buffer at
/// shared address buf (16-byte chunk c of row r at slot c ^ (r % 8)): the fragment (element 4j + 2h + q at row
/// warp * 16 + lane / 4 + 8h, column 8j + 2 * (lane % 4) + q) lands without bank conflicts.
template <int kWgN, bool kSwiglu, int kSilu = kSiluDiv>
__device__ __forceinline__ void write_box(const float (&acc)[kWgN / 2], int box, uint32_t buf, int warp, int lane) {
    const int r = warp * 16 + lane / 4;
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
        const int j = 8 * box + jj;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float v[2];
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const float g = acc[4 * j + 2 * h + q];
                if constexpr (kSwiglu) {
                    const float u = acc[4 * (j + kWgN / 16) + 2 * h + q];
                    v[q] = silu<kSilu>(g) * u;
                } else {
                    v[q] = g;
                }
            }
            const __nv_bfloat162 pair = __floats2bfloat162_rn(v[0], v[1]);
            const int row = r + 8 * h;
            st_shared_b32(buf + row * 128 + ((jj ^ (row % 8)) << 4) + (lane % 4) * 4,
                          *reinterpret_cast<const uint32_t*>(&pair));
        }
    }
}

/// The shared memory past the stages and output buffers: the ring's barriers and the tile schedule.
struct ring_smem {
    unsigned char* smem;  // 1024-byte aligned: the stages (A tile, then b's rows), then the output buffers
    uint64_t* full;       // [kStages]
    uint64_t* empty;      // [kStages]
    int32_t* tile_start;  // [num_experts + 1]
    int32_t n_tiles;      // column tiles
    int32_t num_tiles;    // row tiles x column tiles
    int32_t k_tiles;      // K steps of kBK
};

/// Lays out the dynamic shared memory, initialises the ring's barriers (empty: empty_arrivals per phase) and builds
/// the tile schedule; ends with __syncthreads and the tile counts.
template <typename Tile, int kBM>
__device__ __forceinline__ ring_smem setup_ring(unsigned char* smem_raw, const grouped_gemm_params& p,
                                                uint32_t empty_arrivals) {
    ring_smem r;
    // The swizzle pattern is a function of the address bits: stages start on 1024-byte boundaries.
    r.smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    r.full = reinterpret_cast<uint64_t*>(r.smem + Tile::kBarOffset);
    r.empty = r.full + Tile::kStages;
    r.tile_start = reinterpret_cast<int32_t*>(r.empty + Tile::kStages);
    if (threadIdx.x == 0) {
        for (int s = 0; s < Tile::kStages; ++s) {
            // The producer's arrive with the TMA bytes, and with a_rows each gathering thread's arrive.
            mbar_init(&r.full[s], p.a_rows != nullptr ? 129 : 1);
            mbar_init(&r.empty[s], empty_arrivals);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    build_tile_schedule<kBM>(p.expert_offsets, p.num_experts, r.tile_start);
    __syncthreads();
    r.n_tiles = (p.n + Tile::kOutN - 1) / Tile::kOutN;
    r.num_tiles = r.tile_start[p.num_experts] * r.n_tiles;
    r.k_tiles = (p.k + kBK - 1) / kBK;
    return r;
}

/// The producer warpgroup: for this CTA's tiles (blockIdx.x, + gridDim.x, ...) in order, each tile's
/// K steps into the ring's next stage once it is empty: thread 0 issues the TMA copies of b's kBTile rows (with
/// swiglu, groups of kBGroup / 2 gate rows followed by the matching up rows) and of the A tile, or with a_rows its
/// 128 threads gather the A rows with cp.async.
/// The whole kernel runs at the 168 registers per thread that 384 threads leave (no setmaxnreg: the math
/// warpgroups' 128 accumulators fit).
template <typename Tile, int kBM, bool kSwiglu>
__device__ __forceinline__ void produce(const grouped_gemm_params& p, const ring_smem& r, const CUtensorMap* map_a,
                                        const CUtensorMap* map_b) {
    const int32_t n_tiles = r.n_tiles, num_tiles = r.num_tiles, k_tiles = r.k_tiles;
    const bool gather = p.a_rows != nullptr;
    if (!gather && threadIdx.x != 0) return;
    if (threadIdx.x == 0) {
        if (!gather) tma_prefetch_map(map_a);
        tma_prefetch_map(map_b);
    }
    const int32_t n_b = kSwiglu ? 2 * p.n : p.n;
    const int chunk = threadIdx.x % 8;  // gather: this thread's 16-byte chunk of each 128-byte row
    uint32_t it = 0;
    for (int32_t t = blockIdx.x; t < num_tiles; t += gridDim.x) {
        const row_tile rt = locate_row_tile<kBM>(p.expert_offsets, r.tile_start, p.num_experts, t / n_tiles);
        const int32_t n0 = (t % n_tiles) * Tile::kOutN;
        const int32_t b_row = rt.expert * n_b;
        int32_t src[kBM / 16];  // gather: the row of a behind tile rows threadIdx.x / 8 + 16 j
        if (gather) gather_rows_of_tile<kBM>(p, rt.m0, src);
        for (int32_t kt = 0; kt < k_tiles; ++kt, ++it) {
            const uint32_t s = it % Tile::kStages;
            mbar_wait(&r.empty[s], ((it / Tile::kStages) & 1) ^ 1);
            unsigned char* a_s = r.smem + size_t(s) * Tile::kStageBytes;
            unsigned char* b_s = a_s + Tile::kABytes;
            const int32_t k0 = kt * kBK;
            if (threadIdx.x == 0) {
                mbar_arrive_expect_tx(&r.full[s], gather ? Tile::kBBytes : Tile::kStageBytes);
                if (!gather) tma_load_2d(a_s, map_a, k0, rt.m0, &r.full[s]);
                constexpr int kGroup = Tile::kBGroup;
                if constexpr (kSwiglu) {
#pragma unroll
                    for (int w = 0; w < Tile::kBTile / kGroup; ++w) {
                        const int32_t col = n0 + w * (kGroup / 2);
                        unsigned char* group = b_s + size_t(w) * kGroup * 128;
                        tma_load_2d(group, map_b, k0, b_row + col, &r.full[s]);
                        tma_load_2d(group + (kGroup / 2) * 128, map_b, k0, b_row + p.n + col, &r.full[s]);
                    }
                } else {
                    static_assert(Tile::kBoxB == Tile::kBTile, "one TMA box holds the tile's rows of b");
                    tma_load_2d(b_s, map_b, k0, b_row + n0, &r.full[s]);
                }
            }
            if (gather) {
                gather_stage<kBM>(p, a_s, src, k0, chunk);
                cp_async_arrive_on(&r.full[s]);  // once this thread's copies of the stage have landed
            }
        }
    }
}

template <int kBM, bool kSwiglu, bool kAllBoxes, int kSilu>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_wgmma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                              const __grid_constant__ CUtensorMap map_c, const grouped_gemm_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using tile = wg_tile<kBM, kSwiglu, kAllBoxes>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const ring_smem ring = setup_ring<tile, kBM>(smem_raw, p, 8);  // one arrive per math warp
    if (threadIdx.x < 128) {
        produce<tile, kBM, kSwiglu>(p, ring, &map_a, &map_b);
    } else {
        const auto [smem, full, empty, tile_start, n_tiles, num_tiles, k_tiles] = ring;
        const bool gather = p.a_rows != nullptr;
        const int mw = int(threadIdx.x) / 128 - 1;  // math warpgroup 0 or 1
        const int a_row0 = kBM == 128 ? mw * 64 : 0;
        const int b_row0 = kBM == 128 ? 0 : mw * tile::kWgN;
        const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
        const bool storer = threadIdx.x % 128 == 0;  // the thread that issues this warpgroup's TMA stores
        const uint32_t c_s = smem_addr(smem + tile::kCOffset + mw * tile::kCBytes);
        if (storer) tma_prefetch_map(&map_c);
        float acc[tile::kWgN / 2];
        uint32_t it = 0;
        for (int32_t t = blockIdx.x; t < num_tiles; t += gridDim.x) {
            const row_tile rt = locate_row_tile<kBM>(p.expert_offsets, tile_start, p.num_experts, t / n_tiles);
            const int32_t n0 = (t % n_tiles) * tile::kOutN;
            // A 64-row tile leaves the second warpgroup of a 128-row tile idle: it only passes the stages on.
            if (a_row0 >= rt.rows) {
                for (int32_t kt = 0; kt < k_tiles; ++kt, ++it) {
                    const uint32_t s = it % tile::kStages;
                    mbar_wait(&full[s], (it / tile::kStages) & 1);
                    if (lane == 0) mbar_arrive(&empty[s]);
                }
                continue;
            }
#pragma unroll
            for (int i = 0; i < tile::kWgN / 2; ++i) acc[i] = 0.f;
            // One stage's wgmmas stay in flight while the next stage's are issued; a stage is released once its
            // wgmmas are done.
            for (int32_t kt = 0; kt < k_tiles; ++kt, ++it) {
                const uint32_t s = it % tile::kStages;
                mbar_wait(&full[s], (it / tile::kStages) & 1);
                if (gather) fence_proxy_async();  // the gathered rows came through cp.async (generic proxy)
                const unsigned char* a_s = smem + size_t(s) * tile::kStageBytes;
                const uint64_t desc_a = smem_desc(a_s + a_row0 * 128);
                const uint64_t desc_b = smem_desc(a_s + tile::kABytes + b_row0 * 128);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < kBK / 16; ++kk) wgmma_tile<tile::kWgN>(acc, desc_a + 2 * kk, desc_b + 2 * kk);
                wgmma_commit();
                wgmma_wait<1>();
                fence_accumulators(acc);
                if (kt > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % tile::kStages]);
            }
            wgmma_wait<0>();
            fence_accumulators(acc);
            if (lane == 0) mbar_arrive(&empty[(it - 1) % tile::kStages]);

            // Epilogue: the warpgroup's kWgOut output columns go out in boxes of 64 rows x 64 columns.
            const int32_t col0 = n0 + (kBM == 128 ? 0 : mw * tile::kWgOut);
            if constexpr (tile::kOnePhase) {
                // A buffer per box: once the previous tile's stores have read the buffers (long done: a whole main
                // loop ran since), all boxes are written between two barriers and stored as one bulk group.
                if (storer) bulk_wait_read<0>();
                warpgroup_sync(1 + mw);
#pragma unroll
                for (int box = 0; box < tile::kWgOut / 64; ++box)
                    write_box<tile::kWgN, kSwiglu, kSilu>(acc, box, c_s + box * tile::kCBoxBytes, warp, lane);
                fence_proxy_async();  // the TMA stores read what these generic-proxy stores wrote
                warpgroup_sync(1 + mw);
                if (storer) {
#pragma unroll
                    for (int box = 0; box < tile::kWgOut / 64; ++box)
                        if (col0 + box * 64 < p.n)
                            tma_store_2d(&map_c, c_s + box * tile::kCBoxBytes, col0 + box * 64, rt.m0 + a_row0);
                    bulk_commit();
                }
            } else {
                // Otherwise each box is written into one of the kCBufs buffers (once the store that last used that
                // buffer has read it) and stored with TMA as its own bulk group.
#pragma unroll
                for (int box = 0; box < tile::kWgOut / 64; ++box) {
                    const uint32_t buf = c_s + (box % tile::kCBufs) * tile::kCBoxBytes;
                    if (storer) bulk_wait_read<tile::kCBufs - 1>();
                    warpgroup_sync(1 + mw);
                    write_box<tile::kWgN, kSwiglu, kSilu>(acc, box, buf, warp, lane);
                    fence_proxy_async();  // the TMA store reads what these generic-proxy stores wrote
                    warpgroup_sync(1 + mw);
                    if (storer) {
                        if (col0 + box * 64 < p.n) tma_store_2d(&map_c, buf, col0 + box * 64, rt.m0 + a_row0);
                        bulk_commit();  // a group per box, empty past n, so that the buffer waits count boxes
                    }
                }
            }
        }
        if (storer) bulk_wait_all();
    }
#endif
}

/// Tensor map of a row-major BF16 matrix [rows, k], boxes of kBK x box_rows, 128-byte swizzle; reads past the
/// matrix fill zeros (the K tail, and rows past the last expert), stores past it are dropped (the N tail).
CUtensorMap make_map(const bf16* base, int64_t rows, int32_t k, int32_t box_rows) {
    CUtensorMap map{};
    const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(k) * sizeof(bf16)};
    const cuuint32_t box[2] = {cuuint32_t(kBK), cuuint32_t(box_rows)};
    const cuuint32_t elem_strides[2] = {1, 1};
    const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(base), dims, strides,
                                      box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    ZMOE_KERNEL_REQUIRE(r == CUDA_SUCCESS, "grouped_gemm: cuTensorMapEncodeTiled failed");
    return map;
}

/// Launches the persistent kernel with its tile layout: one CTA per SM at most (or p.max_ctas), no more than
/// there are tiles.
template <typename Tile, typename Kernel>
void launch_tiles(Kernel kernel, int bm, const grouped_gemm_params& p, cudaStream_t stream) {
    if (p.max_rows < 64) return;  // expert groups are multiples of row_align >= 64 rows: all are empty
    const size_t smem = Tile::smem_bytes(p.num_experts);
    ZMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const int32_t n_b = p.swiglu ? 2 * p.n : p.n;
    const CUtensorMap map_a = p.a_rows ? CUtensorMap{} : make_map(p.a, p.max_rows, p.k, bm);  // gather: unused
    const CUtensorMap map_b = make_map(p.b, int64_t(p.num_experts) * n_b, p.k, Tile::kBoxB);
    const CUtensorMap map_c = make_map(p.c, p.max_rows, p.n, 64);
    const int64_t tiles_bound = int64_t(p.max_rows / 64) * ((p.n + Tile::kOutN - 1) / Tile::kOutN);
    const int ctas = p.max_ctas > 0 ? std::min(p.max_ctas, current_device().sms) : current_device().sms;
    const int grid = int(std::max<int64_t>(1, std::min<int64_t>(tiles_bound, ctas)));
    kernel<<<grid, kThreads, smem, stream>>>(map_a, map_b, map_c, p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

template <int kBM, bool kSwiglu, bool kAllBoxes, int kSilu = kSiluDiv>
void launch_cooperative_as(const grouped_gemm_params& p, cudaStream_t stream) {
    constexpr int kMode = kSwiglu ? kSilu : kSiluDiv;  // without SiLU * up the mode is moot: one kernel
    launch_tiles<wg_tile<kBM, kSwiglu, kAllBoxes>>(grouped_gemm_wgmma_kernel<kBM, kSwiglu, kAllBoxes, kMode>, kBM, p,
                                                   stream);
}

/// The cooperative kernel with kSwiglu, kBM-row tiles and the epilogue of variant v.
template <int kBM, bool kSwiglu>
void launch_cooperative(const grouped_gemm_params& p, coop_variant v, cudaStream_t stream) {
    switch (v) {
        case coop_variant::two_buffers:
            return launch_cooperative_as<kBM, kSwiglu, false>(p, stream);
        case coop_variant::all_boxes:
            return launch_cooperative_as<kBM, kSwiglu, true>(p, stream);
        case coop_variant::all_boxes_fast_div:
            return launch_cooperative_as<kBM, kSwiglu, true, kSiluFastDiv>(p, stream);
        case coop_variant::all_boxes_tanh:
            return launch_cooperative_as<kBM, kSwiglu, true, kSiluTanh>(p, stream);
    }
}

}  // namespace

bool device_has_wgmma() {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
        (void)cudaGetLastError();  // no usable device: clear the error, answer no
        return false;
    }
    return major == 9;
}

bool grouped_gemm_wgmma_supported(const grouped_gemm_params& p) {
    const auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    return current_device().major == 9 && p.row_align % 64 == 0 && p.k % 8 == 0 && p.n % 8 == 0 &&
           p.num_experts <= kMaxWgmmaExperts && aligned16(p.a) && aligned16(p.b) && aligned16(p.c);
}

void launch_grouped_gemm_wgmma(const grouped_gemm_params& p, cudaStream_t stream) {
    launch_grouped_gemm_wgmma(p, cooperative_variant(p.swiglu), stream);
}

void launch_grouped_gemm_wgmma(const grouped_gemm_params& p, coop_variant v, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(grouped_gemm_wgmma_supported(p),
                        "grouped_gemm: the wgmma kernel needs compute capability 9.x and row_align % 64 == 0");
    if (p.max_rows == 0 || p.n == 0) return;
    // 128-row tiles once the groups average about 128 rows or more (callers pass max_rows =
    // moe_permuted_rows_bound, so max_rows / num_experts - (row_align - 1) is the mean group size), else 64-row
    // tiles with the two math warpgroups splitting the columns.
    const bool tall = p.row_align % 128 == 0 || int64_t(p.max_rows) >= int64_t(p.num_experts) * (128 + p.row_align - 1);
    if (tall)
        p.swiglu ? launch_cooperative<128, true>(p, v, stream) : launch_cooperative<128, false>(p, v, stream);
    else
        p.swiglu ? launch_cooperative<64, true>(p, v, stream) : launch_cooperative<64, false>(p, v, stream);
}

coop_variant cooperative_variant(bool swiglu) {
    // The measured defaults: gate/up with one write phase per tile and SiLU through tanh.approx, down as before.
    return swiglu ? coop_variant::all_boxes_tanh : coop_variant::two_buffers;
}

}  // namespace zmoe::kernels::detail
