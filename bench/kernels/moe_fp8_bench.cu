// One MoE layer at Qwen3-30B-A3B shapes (hidden 2048, 128 experts, top-8, expert FFN 768) in BF16 and in
// block-scaled FP8 through kernels::launch_moe_layer (the executor's call; FP8 = moe_experts_params::fp8 set: the
// same router, then the FP8 experts), at each token count, in one run on one GPU:
//   - each layer as a CUDA graph replay, hot (one layer replayed) and cold (a graph of --cold layers, each with its
//     own copy of the expert weights, per layer: what a step sees; the ratio FP8 / BF16 is taken on cold);
//   - the FP8 grouped GEMMs' time (gate/up + down, from the launcher's stage marks, stream-ordered) and their
//     TFLOP/s on the routed rows, beside the dense FP8 peak measured now (cuBLASLt e4m3 GEMM, 8192^3, BF16 out);
//   - each layer's floor: the bytes it must move (touched experts' weights once, the router, x in and the output
//     out) at the measured copy bandwidth (1 GiB device to device), or its FLOPs at the measured dense peak of its
//     precision (cuBLASLt BF16 / FP8 GEMM), whichever is longer.
//   moe_fp8_bench [--tokens 1,32,...] [--iters N] [--warmup N] [--cold N] [--fp8-align 64|128|...] [--peer CMD]
//                 [--fp8-tiles automatic,narrow,wide,wide_staggered,wide_multicast,pair,pair_multicast,wide_rs]
//                 [--json PATH]
// --fp8-tiles: the FP8 GEMMs' tiles (fp8_gemm_tiles) of the main table (the first of the list); with more than
// one, a second table times the FP8 layer (cold), its permute (+ quantization) and its two GEMM stages with each. A
// value ending in /gather (wide/gather) turns moe_experts_params::fp8_gather on (/nogather: off, the default).
// --fp8-align sets the FP8 experts' row alignment (moe_experts_params::row_align; default 64): 128 makes the FP8 down
// GEMM run 128-row tiles at every batch size.
// --peer runs CMD after zmoe's measurements and reads "<tokens> <milliseconds> ..." rows from its standard output
// (as moe_layer_bench): the BF16 Triton peer's layer time, printed beside both.

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/stats.hpp"
#include "bench/kernels/bench_util.cuh"
#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/moe_decode_fp8.hpp"
#include "kernels/moe_decode_one_launch.hpp"

namespace {

using zmoe::bench::device_alloc;
using zmoe::bench::fill;
using zmoe::bench::json_escape;
using zmoe::bench::parse_list;
using zmoe::bench::time_graph_ms;
using zmoe::bench::time_op_ms;
using zmoe::kernels::bf16;

constexpr int32_t kHidden = 2048, kExperts = 128, kTopK = 8, kInter = 768;
constexpr int32_t kKbH = (kHidden + 127) / 128, kKbI = (kInter + 127) / 128;
constexpr size_t kW1 = size_t(kExperts) * 2 * kInter * kHidden, kW2 = size_t(kExperts) * kHidden * kInter;
constexpr size_t kS1 = size_t(kExperts) * 2 * kKbI * kKbH, kS2 = size_t(kExperts) * kKbH * kKbI;
int32_t g_fp8_align = 0;  // --fp8-align: 0 is the launcher's 64
zmoe::kernels::fp8_gemm_tiles g_fp8_tiles = zmoe::kernels::fp8_gemm_tiles::automatic;  // the layer's FP8 GEMM tiles
bool g_fp8_gather = false;  // moe_experts_params::fp8_gather (its default)

/// "automatic" | "narrow" | "wide" | "wide_staggered" | "wide_multicast" | "pair" | "pair_multicast" | "wide_rs"
/// (fp8_gemm_tiles); false for anything else.
bool parse_tiles(const std::string& name, zmoe::kernels::fp8_gemm_tiles& out) {
    using zmoe::kernels::fp8_gemm_tiles;
    const std::pair<const char*, fp8_gemm_tiles> names[] = {{"automatic", fp8_gemm_tiles::automatic},
                                                            {"narrow", fp8_gemm_tiles::narrow},
                                                            {"wide", fp8_gemm_tiles::wide},
                                                            {"wide_staggered", fp8_gemm_tiles::wide_staggered},
                                                            {"wide_multicast", fp8_gemm_tiles::wide_multicast},
                                                            {"pair", fp8_gemm_tiles::pair},
                                                            {"pair_multicast", fp8_gemm_tiles::pair_multicast},
                                                            {"wide_rs", fp8_gemm_tiles::wide_rs}};
    for (const auto& [n, v] : names)
        if (name == n) {
            out = v;
            return true;
        }
    return false;
}

/// One layer's expert weights in both precisions.
struct expert_weights {
    bf16 *w1, *w2;
    uint8_t *q1, *q2;
    float *s1, *s2;
};

struct buffers {
    bf16 *x, *gate_w, *act, *y, *out;
    float *logits, *weights;
    int32_t *ids, *slots, *counts, *offsets, *dest, *row_token, *replica_offsets, *replica_slots, *decode_scratch;
    int32_t max_rows;
    void *permute_ws, *blas_ws;
    size_t blas_ws_bytes;
    cublasLtHandle_t blas;
    uint8_t *x_q, *act_q;
    float *x_s, *act_s;
};

zmoe::kernels::moe_layer_params layer_params(const buffers& b, const expert_weights& w, int32_t tokens,
                                             const zmoe::kernels::moe_fp8_experts* fp8, bool fuse_router = true,
                                             zmoe::kernels::moe_path path = zmoe::kernels::moe_path::automatic) {
    return {.experts = {.x = b.x,
                        .w_gate_up = w.w1,
                        .w_down = w.w2,
                        .out = b.out,
                        .expert_offsets = b.offsets,
                        .dest_rows = b.dest,
                        .row_token = b.row_token,
                        .permute_workspace = b.permute_ws,
                        .act = b.act,
                        .y = b.y,
                        .max_rows = b.max_rows,
                        .num_tokens = tokens,
                        .top_k = kTopK,
                        .num_slots = kExperts,
                        .hidden = kHidden,
                        .inter = kInter,
                        .row_align = fp8 != nullptr ? g_fp8_align : 0,
                        .fp8_tiles = g_fp8_tiles,
                        .fp8_gather = g_fp8_gather,
                        .fp8 = fp8},
            .router_w = b.gate_w,
            .router_logits = b.logits,
            .blas = b.blas,
            .blas_workspace = b.blas_ws,
            .blas_workspace_bytes = b.blas_ws_bytes,
            .replica_offsets = b.replica_offsets,
            .replica_slots = b.replica_slots,
            .expert_counts = b.counts,
            .topk_ids = b.ids,
            .topk_weights = b.weights,
            .slot_ids = b.slots,
            .decode_scratch = b.decode_scratch,
            .num_experts = kExperts,
            .renormalize = true,
            .path = path,
            .fuse_router = fuse_router};
}

zmoe::kernels::moe_fp8_experts fp8_of(const buffers& b, const expert_weights& w) {
    return {.w_gate_up = w.q1,
            .w_gate_up_scales = w.s1,
            .w_down = w.q2,
            .w_down_scales = w.s2,
            .x_q = b.x_q,
            .x_scales = b.x_s,
            .act_q = b.act_q,
            .act_scales = b.act_s};
}

constexpr int kStages = int(zmoe::kernels::moe_stage::end) + 1;
const char* const kStageNames[kStages] = {"router_gemm",  "router_topk", "moe_decode", "permute",
                                          "gemm_gate_up", "gemm_down",   "combine",    "end"};

/// Median milliseconds of each stage of one stream-ordered layer (from its mark to the next mark), from the
/// launcher's marks; -1 for the stages the layer does not run. The permute stage includes the FP8 quantization.
std::vector<double> stage_ms(zmoe::kernels::moe_layer_params p, cudaStream_t stream, int warmup, int iters) {
    struct ctx {
        cudaStream_t stream;
        cudaEvent_t events[kStages];
        std::vector<int> order;
    } c{stream, {}, {}};
    for (auto& e : c.events) ZMOE_CUDA_CHECK(cudaEventCreate(&e));
    p.experts.mark = [](void* context, zmoe::kernels::moe_stage s) {
        auto* x = static_cast<ctx*>(context);
        x->order.push_back(int(s));
        ZMOE_CUDA_CHECK(cudaEventRecord(x->events[int(s)], x->stream));
    };
    p.experts.mark_context = &c;
    for (int i = 0; i < warmup; ++i) zmoe::kernels::launch_moe_layer(p, stream);
    std::vector<std::vector<double>> ms(kStages);
    for (int i = 0; i < iters; ++i) {
        c.order.clear();
        zmoe::kernels::launch_moe_layer(p, stream);
        ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
        for (size_t m = 0; m + 1 < c.order.size(); ++m) {
            float v = 0;
            ZMOE_CUDA_CHECK(cudaEventElapsedTime(&v, c.events[c.order[m]], c.events[c.order[m + 1]]));
            ms[c.order[m]].push_back(v);
        }
    }
    for (auto& e : c.events) ZMOE_CUDA_CHECK(cudaEventDestroy(e));
    std::vector<double> out(kStages, -1.0);
    for (int s = 0; s < kStages; ++s)
        if (!ms[s].empty()) out[s] = zmoe::median(ms[s]);
    return out;
}

struct ceilings {
    double bytes_per_s = 0, bf16_flops_per_s = 0, fp8_flops_per_s = 0;
};

/// cuBLASLt D (m x n, BF16) = A^T B with A (k x m) and B (k x n) column-major of `type` (the TN layout FP8 needs).
double dense_gemm_ms(cublasLtHandle_t blas, void* ws, size_t ws_bytes, cudaDataType_t type, int32_t dim,
                     cudaStream_t stream) {
    const size_t elem = type == CUDA_R_16BF ? 2 : 1;
    void* a = device_alloc<uint8_t>(size_t(dim) * dim * elem);
    void* b = device_alloc<uint8_t>(size_t(dim) * dim * elem);
    bf16* d = device_alloc<bf16>(size_t(dim) * dim);
    // Random BF16 bits, or (FP8) random e4m3 codes from them: never zeros, no NaN codes (0x7f / 0xff) anyway.
    bf16* src = device_alloc<bf16>(size_t(dim) * dim);
    for (void* m : {a, b}) {
        fill(src, size_t(dim) * dim, 1.f, m == a ? 21 : 22, stream);
        if (type == CUDA_R_16BF) {
            ZMOE_CUDA_CHECK(cudaMemcpyAsync(m, src, size_t(dim) * dim * 2, cudaMemcpyDeviceToDevice, stream));
        } else {
            float* scales = device_alloc<float>(size_t(dim) * ((dim + 127) / 128));
            zmoe::kernels::launch_fp8_quantize({.x = src,
                                                .q = static_cast<uint8_t*>(m),
                                                .scales = scales,
                                                .num_tokens = dim,
                                                .cols = dim,
                                                .scale_ld = dim},
                                               stream);
            ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
            ZMOE_CUDA_CHECK(cudaFree(scales));
        }
    }
    cublasLtMatmulDesc_t op;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtMatrixLayout_t la, lb, ld;
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, type, dim, dim, dim));
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, type, dim, dim, dim));
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, dim, dim, dim));
    cublasLtMatmulPreference_t pref;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                           sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(blas, op, la, lb, ld, ld, pref, 1, &heur, &found));
    ZMOE_KERNEL_REQUIRE(found > 0, "moe_fp8_bench: cuBLASLt has no algorithm for the dense GEMM");
    const float alpha = 1.f, beta = 0.f;
    const double ms = time_op_ms(
        [&] {
            ZMOE_CUBLAS_CHECK(
                cublasLtMatmul(blas, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &heur.algo, ws, ws_bytes, stream));
        },
        stream, 3, 20);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    for (void* m : {a, b, static_cast<void*>(d), static_cast<void*>(src)}) ZMOE_CUDA_CHECK(cudaFree(m));
    return ms;
}

ceilings measure_ceilings(const buffers& b, cudaStream_t stream) {
    ceilings c;
    c.bytes_per_s = zmoe::bench::copy_bytes_per_s(stream);
    c.bf16_flops_per_s = zmoe::bench::bf16_gemm_flops_per_s(b.blas, b.blas_ws, b.blas_ws_bytes, stream);
    constexpr int32_t kDim = 8192;
    c.fp8_flops_per_s = 2.0 * double(kDim) * kDim * kDim /
                        (dense_gemm_ms(b.blas, b.blas_ws, b.blas_ws_bytes, CUDA_R_8F_E4M3, kDim, stream) * 1e-3);
    return c;
}

struct result {
    int32_t tokens = 0, active_experts = 0;
    bool bf16_decode = false, fp8_decode = false;
    double bf16_hot_ms = 0, bf16_cold_ms = 0, fp8_hot_ms = 0, fp8_cold_ms = 0;
    double fp8_gate_up_ms = -1, fp8_down_ms = -1, gemm_flops = 0;  // < 0: the FP8 decode path (no GEMMs)
    double bf16_bytes = 0, fp8_bytes = 0, bf16_floor_ms = 0, fp8_floor_ms = 0, fp8_mem_floor_ms = 0;
    double peer_ms = -1;
    std::vector<double> fp8_stage_ms;    // per moe_stage, stream-ordered; -1 where not run
    double decode_kernels_ms = -1;       // the FP8 few-token kernels alone, cold graph, per layer
    double decode_kernels_bulk_ms = -1;  // the same, the gate/up kernel staging its weights by bulk copies
    double fp8_unfused_cold_ms = -1;     // one token: the layer as the router launch + the two few-token launches
    double bf16_unfused_cold_ms = -1;    // one token: the BF16 layer with the router GEMV launched before moe_decode
    std::vector<double> fp8_unfused_stage_ms;  // its stages (router GEMV, top-k, the two launches)
    double fp8_forced_decode_cold_ms = -1;     // FP8 on the few-token one launch where automatic takes the grouped path
    double bf16_one_launch_cold_ms = -1;  // BF16 on the few-token one launch (detail::launch_moe_decode_one_launch)
};

}  // namespace

int main(int argc, char** argv) {
    std::vector<int32_t> token_counts{1, 32, 64, 128, 256, 512, 8192, 16384};
    int iters = 20, warmup = 5, cold_layers = 4;
    std::string json_path, peer_cmd;
    std::vector<zmoe::kernels::fp8_gemm_tiles> tile_variants;
    std::vector<std::string> tile_names;
    std::vector<bool> tile_gather;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--tokens" && i + 1 < argc)
            token_counts = parse_list(argv[++i]);
        else if (a == "--iters" && i + 1 < argc)
            iters = std::stoi(argv[++i]);
        else if (a == "--warmup" && i + 1 < argc)
            warmup = std::stoi(argv[++i]);
        else if (a == "--cold" && i + 1 < argc)
            cold_layers = std::max(1, std::stoi(argv[++i]));
        else if (a == "--fp8-align" && i + 1 < argc)
            g_fp8_align = std::stoi(argv[++i]);
        else if (a == "--json" && i + 1 < argc)
            json_path = argv[++i];
        else if (a == "--fp8-tiles" && i + 1 < argc) {
            std::stringstream ss(argv[++i]);
            for (std::string item; std::getline(ss, item, ',');) {
                zmoe::kernels::fp8_gemm_tiles t{};
                const size_t slash = item.find('/');
                const std::string tiles = item.substr(0, slash),
                                  option = slash == std::string::npos ? "" : item.substr(slash);
                if (!parse_tiles(tiles, t) || (!option.empty() && option != "/gather" && option != "/nogather"))
                    return std::fprintf(stderr, "%s: unknown --fp8-tiles value '%s'\n", argv[0], item.c_str()), 2;
                tile_variants.push_back(t);
                tile_names.push_back(item);
                tile_gather.push_back(option == "/gather");
            }
        } else if (a == "--peer" && i + 1 < argc)
            peer_cmd = argv[++i];
        else
            return std::fprintf(
                       stderr,
                       "usage: %s [--tokens 1,32,...] [--iters N] [--warmup N] [--cold N] [--fp8-align N] [--peer CMD] "
                       "[--fp8-tiles LIST] [--json PATH]\n",
                       argv[0]),
                   2;
    }
    if (!tile_variants.empty()) {
        g_fp8_tiles = tile_variants[0];
        g_fp8_gather = tile_gather[0];
    }
    const int32_t max_tokens = *std::max_element(token_counts.begin(), token_counts.end());
    const int32_t max_rows = zmoe::kernels::moe_permuted_rows_bound(max_tokens, kTopK, kExperts, 128);
    const int32_t ld = zmoe::kernels::fp8_scale_ld(max_rows);
    cudaDeviceProp prop{};
    ZMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t stream;
    ZMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    buffers b{};
    b.x = device_alloc<bf16>(size_t(max_tokens) * kHidden);
    b.gate_w = device_alloc<bf16>(size_t(kExperts) * kHidden);
    b.act = device_alloc<bf16>(size_t(max_rows) * kInter);
    b.y = device_alloc<bf16>(size_t(max_rows) * kHidden);
    b.out = device_alloc<bf16>(size_t(max_tokens) * kHidden);
    b.logits = device_alloc<float>(size_t(max_tokens) * kExperts);
    b.weights = device_alloc<float>(size_t(max_tokens) * kTopK);
    b.ids = device_alloc<int32_t>(size_t(max_tokens) * kTopK);
    b.slots = device_alloc<int32_t>(size_t(max_tokens) * kTopK);
    b.counts = device_alloc<int32_t>(kExperts);
    b.offsets = device_alloc<int32_t>(kExperts + 1);
    b.dest = device_alloc<int32_t>(size_t(max_tokens) * kTopK);
    b.row_token = device_alloc<int32_t>(max_rows);
    b.max_rows = max_rows;
    b.permute_ws = device_alloc<uint8_t>(zmoe::kernels::moe_permute_workspace_bytes(max_tokens, kTopK, kExperts));
    b.x_q = device_alloc<uint8_t>(size_t(max_rows) * kHidden);
    b.act_q = device_alloc<uint8_t>(size_t(max_rows) * kInter);
    b.x_s = device_alloc<float>(size_t(kKbH) * ld);
    b.act_s = device_alloc<float>(size_t(kKbI) * ld);
    {
        std::vector<int32_t> offsets(kExperts + 1), slots(kExperts);
        for (int32_t e = 0; e <= kExperts; ++e) offsets[e] = e;
        for (int32_t e = 0; e < kExperts; ++e) slots[e] = e;
        b.replica_offsets = device_alloc<int32_t>(offsets.size());
        b.replica_slots = device_alloc<int32_t>(slots.size());
        ZMOE_CUDA_CHECK(cudaMemcpy(b.replica_offsets, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
        ZMOE_CUDA_CHECK(cudaMemcpy(b.replica_slots, slots.data(), slots.size() * 4, cudaMemcpyHostToDevice));
        const size_t scratch_ints = zmoe::kernels::moe_decode_scratch_ints(zmoe::kernels::kMoeDecodeMaxTokens, kTopK);
        b.decode_scratch = device_alloc<int32_t>(scratch_ints);
        ZMOE_CUDA_CHECK(cudaMemset(b.decode_scratch, 0, scratch_ints * sizeof(int32_t)));
    }
    b.blas_ws_bytes = 32u << 20;
    b.blas_ws = device_alloc<uint8_t>(b.blas_ws_bytes);
    ZMOE_CUBLAS_CHECK(cublasLtCreate(&b.blas));
    fill(b.x, size_t(max_tokens) * kHidden, 1.f, 1);
    fill(b.gate_w, size_t(kExperts) * kHidden, 0.05f, 2);
    ZMOE_CUDA_CHECK(cudaMemset(b.counts, 0, sizeof(int32_t) * kExperts));

    // Expert weights: random BF16; their FP8 form takes codes from launch_fp8_quantize of the BF16 rows (valid,
    // varied e4m3 codes) and block scales giving the BF16 weights' magnitude (0.03 / 448, +-50%).
    std::vector<expert_weights> layers(static_cast<size_t>(cold_layers));
    {
        std::vector<float> s1(kS1), s2(kS2);
        for (size_t i = 0; i < kS1; ++i) s1[i] = 0.03f / 448.f * (0.5f + float(i % 97) / 97.f);
        for (size_t i = 0; i < kS2; ++i) s2[i] = 0.03f / 448.f * (0.5f + float(i % 89) / 89.f);
        float* row_scales = device_alloc<float>(size_t(kExperts) * 2 * kInter * kKbH);
        for (size_t l = 0; l < layers.size(); ++l) {
            expert_weights& w = layers[l];
            w.w1 = device_alloc<bf16>(kW1);
            w.w2 = device_alloc<bf16>(kW2);
            w.q1 = device_alloc<uint8_t>(kW1);
            w.q2 = device_alloc<uint8_t>(kW2);
            w.s1 = device_alloc<float>(kS1);
            w.s2 = device_alloc<float>(kS2);
            fill(w.w1, kW1, 0.03f, 3 + 10 * uint32_t(l), stream);
            fill(w.w2, kW2, 0.03f, 4 + 10 * uint32_t(l), stream);
            zmoe::kernels::launch_fp8_quantize({.x = w.w1,
                                                .q = w.q1,
                                                .scales = row_scales,
                                                .num_tokens = kExperts * 2 * kInter,
                                                .cols = kHidden,
                                                .scale_ld = kExperts * 2 * kInter},
                                               stream);
            ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));  // row_scales is reused
            zmoe::kernels::launch_fp8_quantize({.x = w.w2,
                                                .q = w.q2,
                                                .scales = row_scales,
                                                .num_tokens = kExperts * kHidden,
                                                .cols = kInter,
                                                .scale_ld = kExperts * kHidden},
                                               stream);
            ZMOE_CUDA_CHECK(cudaMemcpy(w.s1, s1.data(), kS1 * 4, cudaMemcpyHostToDevice));
            ZMOE_CUDA_CHECK(cudaMemcpy(w.s2, s2.data(), kS2 * 4, cudaMemcpyHostToDevice));
            ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
        }
        ZMOE_CUDA_CHECK(cudaFree(row_scales));
    }
    std::vector<zmoe::kernels::moe_fp8_experts> fp8(layers.size());
    for (size_t l = 0; l < layers.size(); ++l) fp8[l] = fp8_of(b, layers[l]);
    ZMOE_CUDA_CHECK(cudaDeviceSynchronize());

    const ceilings peak = measure_ceilings(b, stream);
    std::printf(
        "measured: copy %.0f GB/s, dense BF16 GEMM %.0f TFLOP/s, dense FP8 GEMM %.0f TFLOP/s (cuBLASLt 8192^3)\n",
        peak.bytes_per_s * 1e-9, peak.bf16_flops_per_s * 1e-12, peak.fp8_flops_per_s * 1e-12);

    std::vector<result> results;
    for (const int32_t tokens : token_counts) {
        result r;
        r.tokens = tokens;
        r.bf16_decode = zmoe::kernels::moe_layer_uses_decode_path(layer_params(b, layers[0], tokens, nullptr));
        const auto enqueue = [&](cudaStream_t s, size_t n, bool use_fp8) {
            for (size_t l = 0; l < n; ++l)
                zmoe::kernels::launch_moe_layer(layer_params(b, layers[l], tokens, use_fp8 ? &fp8[l] : nullptr), s);
        };
        r.bf16_hot_ms = time_graph_ms([&](cudaStream_t s) { enqueue(s, 1, false); }, stream, warmup, iters);
        r.fp8_hot_ms = time_graph_ms([&](cudaStream_t s) { enqueue(s, 1, true); }, stream, warmup, iters);
        r.bf16_cold_ms =
            time_graph_ms([&](cudaStream_t s) { enqueue(s, layers.size(), false); }, stream, warmup, iters) /
            double(layers.size());
        r.fp8_cold_ms = time_graph_ms([&](cudaStream_t s) { enqueue(s, layers.size(), true); }, stream, warmup, iters) /
                        double(layers.size());
        r.fp8_decode = zmoe::kernels::moe_layer_uses_decode_path(layer_params(b, layers[0], tokens, &fp8[0]));
        if (!r.fp8_decode && zmoe::kernels::moe_layer_uses_decode_path(
                                 layer_params(b, layers[0], tokens, &fp8[0], true, zmoe::kernels::moe_path::decode)))
            r.fp8_forced_decode_cold_ms =
                time_graph_ms(
                    [&](cudaStream_t s) {
                        for (size_t l = 0; l < layers.size(); ++l)
                            zmoe::kernels::launch_moe_layer(
                                layer_params(b, layers[l], tokens, &fp8[l], true, zmoe::kernels::moe_path::decode), s);
                    },
                    stream, warmup, iters) /
                double(layers.size());
        if (zmoe::kernels::detail::moe_decode_one_launch_supported(tokens, kTopK, kExperts, kHidden, kInter, false))
            r.bf16_one_launch_cold_ms =
                time_graph_ms(
                    [&](cudaStream_t s) {
                        for (size_t l = 0; l < layers.size(); ++l)
                            zmoe::kernels::detail::launch_moe_decode_one_launch({.router_w = b.gate_w,
                                                                                 .router_logits = b.logits,
                                                                                 .replica_offsets = b.replica_offsets,
                                                                                 .replica_slots = b.replica_slots,
                                                                                 .x = b.x,
                                                                                 .w_gate_up = layers[l].w1,
                                                                                 .w_down = layers[l].w2,
                                                                                 .topk_weights = b.weights,
                                                                                 .slot_ids = b.slots,
                                                                                 .expert_counts = b.counts,
                                                                                 .scratch = b.decode_scratch,
                                                                                 .act = b.act,
                                                                                 .out = b.out,
                                                                                 .num_tokens = tokens,
                                                                                 .top_k = kTopK,
                                                                                 .num_experts = kExperts,
                                                                                 .hidden = kHidden,
                                                                                 .inter = kInter,
                                                                                 .renormalize = true},
                                                                                s);
                    },
                    stream, warmup, iters) /
                double(layers.size());
        if (r.fp8_decode && r.bf16_decode) {  // A/B in the same run: the router fused into the layer's launch or not
            const auto unfused = [&](bool use_fp8) {
                return time_graph_ms(
                           [&](cudaStream_t s) {
                               for (size_t l = 0; l < layers.size(); ++l)
                                   zmoe::kernels::launch_moe_layer(
                                       layer_params(b, layers[l], tokens, use_fp8 ? &fp8[l] : nullptr, false), s);
                           },
                           stream, warmup, iters) /
                       double(layers.size());
            };
            r.fp8_unfused_cold_ms = unfused(true);
            r.fp8_unfused_stage_ms =
                stage_ms(layer_params(b, layers[0], tokens, &fp8[0], false), stream, warmup, iters);
            r.bf16_unfused_cold_ms = unfused(false);
        }
        r.fp8_stage_ms = stage_ms(layer_params(b, layers[0], tokens, &fp8[0]), stream, warmup, iters);
        if (r.fp8_decode) {  // the few-token kernels alone (after the router of the runs above), cold
            const auto kernels_alone = [&](bool bulk) {
                return time_graph_ms(
                           [&](cudaStream_t s) {
                               for (size_t l = 0; l < layers.size(); ++l)
                                   zmoe::kernels::detail::launch_moe_decode_fp8(
                                       {.x = b.x,
                                        .slot_ids = b.slots,
                                        .topk_weights = b.weights,
                                        .fp8 = fp8[l],
                                        .act = reinterpret_cast<float*>(b.act_q),
                                        .out = b.out,
                                        .num_tokens = tokens,
                                        .top_k = kTopK,
                                        .hidden = kHidden,
                                        .inter = kInter,
                                        .bulk_weights = bulk},
                                       s);
                           },
                           stream, warmup, iters) /
                       double(layers.size());
            };
            r.decode_kernels_ms = kernels_alone(false);  // the default
            r.decode_kernels_bulk_ms = kernels_alone(true);
        }
        if (!r.fp8_decode) {  // the few-token kernels have no GEMM stages
            r.fp8_gate_up_ms = r.fp8_stage_ms[int(zmoe::kernels::moe_stage::gemm_gate_up)];
            r.fp8_down_ms = r.fp8_stage_ms[int(zmoe::kernels::moe_stage::gemm_down)];
        }

        std::vector<int32_t> counts(kExperts);
        ZMOE_CUDA_CHECK(cudaMemcpy(counts.data(), b.counts, sizeof(int32_t) * kExperts, cudaMemcpyDeviceToHost));
        r.active_experts = int32_t(std::count_if(counts.begin(), counts.end(), [](int32_t c) { return c > 0; }));
        const double scale_bytes = double(2 * kKbI * kKbH + kKbH * kKbI) * 4;  // one expert's block scales
        const zmoe::bench::moe_layer_cost bf16_cost =
            zmoe::bench::moe_layer_cost_of(tokens, r.active_experts, kExperts, kHidden, kInter, kTopK, 2.0);
        const zmoe::bench::moe_layer_cost fp8_cost = zmoe::bench::moe_layer_cost_of(
            tokens, r.active_experts, kExperts, kHidden, kInter, kTopK, 1.0, scale_bytes);
        r.bf16_bytes = bf16_cost.bytes;
        r.fp8_bytes = fp8_cost.bytes;
        r.gemm_flops = fp8_cost.expert_flops;
        r.bf16_floor_ms =
            zmoe::bench::floor_ms(bf16_cost.bytes, bf16_cost.flops, peak.bytes_per_s, peak.bf16_flops_per_s);
        r.fp8_mem_floor_ms = fp8_cost.bytes / peak.bytes_per_s * 1e3;
        r.fp8_floor_ms = zmoe::bench::floor_ms(fp8_cost.bytes, fp8_cost.flops, peak.bytes_per_s, peak.fp8_flops_per_s);
        results.push_back(r);
    }

    std::string peer_raw;
    if (!peer_cmd.empty()) {
        const auto rows = zmoe::bench::run_peer(peer_cmd, peer_raw, "moe_fp8_bench");
        for (auto& r : results)
            for (const auto& [tokens, ms] : rows)
                if (tokens == r.tokens) r.peer_ms = ms;
        std::printf("%s", peer_raw.c_str());
    }

    std::printf(
        "MoE layer, hidden %d, %d experts, top-%d, expert FFN %d on %s (graph replays, median of %d; cold: %d layers "
        "with their own weights, per layer)\n",
        kHidden, kExperts, kTopK, kInter, prop.name, iters, cold_layers);
    std::printf("%7s %6s %6s %6s %9s %9s %9s %9s %7s %9s %9s %9s %8s %6s %9s %9s %9s\n", "tokens", "bf16", "fp8",
                "active", "bf16_hot", "bf16_cold", "fp8_hot", "fp8_cold", "ratio", "peer_ms", "fp8_gu", "fp8_dn",
                "gemmTF/s", "%peak", "bf16_flr", "fp8_flr", "fp8_mflr");
    for (const auto& r : results) {
        const double gemm_tf = r.fp8_decode ? 0.0 : r.gemm_flops / ((r.fp8_gate_up_ms + r.fp8_down_ms) * 1e-3) * 1e-12;
        std::printf(
            "%7d %6s %6s %6d %9.4f %9.4f %9.4f %9.4f %6.2fx %9.4f %9.4f %9.4f %8.1f %5.1f%% %9.4f %9.4f %9.4f\n",
            r.tokens, r.bf16_decode ? "decode" : "grpd", r.fp8_decode ? "decode" : "grpd", r.active_experts,
            r.bf16_hot_ms, r.bf16_cold_ms, r.fp8_hot_ms, r.fp8_cold_ms, r.bf16_cold_ms / r.fp8_cold_ms, r.peer_ms,
            r.fp8_gate_up_ms, r.fp8_down_ms, gemm_tf, 100.0 * gemm_tf * 1e12 / peak.fp8_flops_per_s, r.bf16_floor_ms,
            r.fp8_floor_ms, r.fp8_mem_floor_ms);
    }
    std::printf("FP8 layer per stage (stream-ordered, ms; permute includes the quantization):\n%7s", "tokens");
    for (int s = 0; s + 1 < kStages; ++s) std::printf(" %12s", kStageNames[s]);
    std::printf("\n");
    for (const auto& r : results) {
        std::printf("%7d", r.tokens);
        for (int s = 0; s + 1 < kStages; ++s) std::printf(" %12.4f", r.fp8_stage_ms[s]);
        std::printf("\n");
    }
    for (const auto& r : results) {  // the router launched before the few-token kernels (fuse_router = false)
        if (r.fp8_unfused_stage_ms.empty()) continue;
        std::printf("%6du", r.tokens);
        for (int s = 0; s + 1 < kStages; ++s) std::printf(" %12.4f", r.fp8_unfused_stage_ms[s]);
        std::printf("\n");
    }
    // Each stage against its own floor: the GEMMs' routed-row FLOPs at the measured dense FP8 peak (and the
    // weight bytes of the active experts at the copy bandwidth, whichever is longer); permute + quantization and the
    // combine by the bytes they must move (x read once, e4m3 rows + scales written top-k times; y read, out written).
    std::printf(
        "FP8 stages against their floors (ms; floor ms; %% of floor reached; GEMM TFLOP/s on routed rows):\n"
        "%7s %26s %26s %26s %26s\n",
        "tokens", "permute+quant", "gate/up", "down", "combine");
    for (const auto& r : results) {
        if (r.fp8_decode) continue;
        const double rows = double(r.tokens) * kTopK, bw = peak.bytes_per_s, pk = peak.fp8_flops_per_s;
        const double gu_flops = 2.0 * rows * 2.0 * kInter * kHidden, dn_flops = 2.0 * rows * kHidden * kInter;
        const double gu_w = double(r.active_experts) * 2.0 * kInter * kHidden,
                     dn_w = double(r.active_experts) * kHidden * kInter;
        const double stage[4] = {r.fp8_stage_ms[int(zmoe::kernels::moe_stage::permute)], r.fp8_gate_up_ms,
                                 r.fp8_down_ms, r.fp8_stage_ms[int(zmoe::kernels::moe_stage::combine)]};
        const double floor[4] = {
            (double(r.tokens) * kHidden * 2 + rows * (kHidden + kKbH * 4.0)) / bw * 1e3,
            std::max(gu_flops / pk, (gu_w + rows * (kHidden + kInter + (kKbH + kKbI) * 4.0)) / bw) * 1e3,
            std::max(dn_flops / pk, (dn_w + rows * (kInter + kKbI * 4.0 + 2.0 * kHidden)) / bw) * 1e3,
            (rows * kHidden * 2 + double(r.tokens) * kHidden * 2) / bw * 1e3};
        std::printf("%7d", r.tokens);
        for (int i = 0; i < 4; ++i) {
            char cell[64];
            if (i == 1 || i == 2)
                std::snprintf(cell, sizeof cell, "%.4f; %.4f; %3.0f%%; %4.0f", stage[i], floor[i],
                              100.0 * floor[i] / stage[i], (i == 1 ? gu_flops : dn_flops) / (stage[i] * 1e-3) * 1e-12);
            else
                std::snprintf(cell, sizeof cell, "%.4f; %.4f; %3.0f%%", stage[i], floor[i],
                              100.0 * floor[i] / stage[i]);
            std::printf(" %26s", cell);
        }
        std::printf("\n");
    }
    for (const auto& r : results)
        if (r.fp8_decode)
            std::printf(
                "FP8 few-token kernels alone at %d tokens (cold graph, per layer): %.4f ms (16-byte loads, the "
                "default), %.4f ms (weights staged by bulk copies)\n",
                r.tokens, r.decode_kernels_ms, r.decode_kernels_bulk_ms);
    for (const auto& r : results)
        if (r.bf16_one_launch_cold_ms >= 0)
            std::printf(
                "At %d token(s), cold per layer: BF16 few-token one launch %.4f ms (%.0f%% of the byte floor) vs the "
                "automatic path (%s) %.4f ms (%.0f%%)\n",
                r.tokens, r.bf16_one_launch_cold_ms, 100.0 * r.bf16_floor_ms / r.bf16_one_launch_cold_ms,
                r.bf16_decode ? "moe_decode" : "grouped", r.bf16_cold_ms, 100.0 * r.bf16_floor_ms / r.bf16_cold_ms);
    for (const auto& r : results)
        if (r.fp8_forced_decode_cold_ms >= 0)
            std::printf(
                "At %d tokens, cold per layer: FP8 few-token one launch (forced) %.4f ms (%.0f%% of the byte floor) vs "
                "the grouped path %.4f ms (%.0f%%)\n",
                r.tokens, r.fp8_forced_decode_cold_ms, 100.0 * r.fp8_mem_floor_ms / r.fp8_forced_decode_cold_ms,
                r.fp8_cold_ms, 100.0 * r.fp8_mem_floor_ms / r.fp8_cold_ms);
    for (const auto& r : results)
        if (r.fp8_unfused_cold_ms >= 0)
            std::printf(
                "At %d token(s), cold per layer: FP8 one launch %.4f ms vs router + two launches %.4f ms; BF16 router "
                "fused %.4f ms vs router GEMV launched first %.4f ms\n",
                r.tokens, r.fp8_cold_ms, r.fp8_unfused_cold_ms, r.bf16_cold_ms, r.bf16_unfused_cold_ms);
    if (tile_variants.size() > 1) {
        std::printf("FP8 GEMM tiles (grouped path only; layer cold ms, gate/up and down stage ms, GEMM TFLOP/s):\n");
        std::printf("%7s %24s %9s %9s %9s %9s %8s\n", "tokens", "tiles", "fp8_cold", "fp8_perm", "fp8_gu", "fp8_dn",
                    "gemmTF/s");
        for (const int32_t tokens : token_counts) {
            if (zmoe::kernels::moe_layer_uses_decode_path(layer_params(b, layers[0], tokens, &fp8[0]))) continue;
            for (size_t v = 0; v < tile_variants.size(); ++v) {
                g_fp8_tiles = tile_variants[v];
                g_fp8_gather = tile_gather[v];
                const double cold =
                    time_graph_ms(
                        [&](cudaStream_t s) {
                            for (size_t l = 0; l < layers.size(); ++l)
                                zmoe::kernels::launch_moe_layer(layer_params(b, layers[l], tokens, &fp8[l]), s);
                        },
                        stream, warmup, iters) /
                    double(layers.size());
                const std::vector<double> st =
                    stage_ms(layer_params(b, layers[0], tokens, &fp8[0]), stream, warmup, iters);
                const double gu = st[int(zmoe::kernels::moe_stage::gemm_gate_up)];
                const double dn = st[int(zmoe::kernels::moe_stage::gemm_down)];
                const double flops = 2.0 * tokens * kTopK * 3.0 * kHidden * kInter;
                std::printf("%7d %24s %9.4f %9.4f %9.4f %9.4f %8.1f\n", tokens, tile_names[v].c_str(), cold,
                            st[int(zmoe::kernels::moe_stage::permute)], gu, dn, flops / ((gu + dn) * 1e-3) * 1e-12);
            }
        }
        g_fp8_tiles = tile_variants[0];
        g_fp8_gather = tile_gather[0];
    }
    std::printf(
        "(ratio: bf16_cold / fp8_cold; fp8_gu / fp8_dn: the FP8 gate/up and down GEMM stages, stream-ordered; "
        "gemmTF/s: their useful FLOPs (routed rows) per second, %%peak of the measured dense FP8 GEMM; floors: bytes "
        "at the copy bandwidth or FLOPs at the dense peak of the precision, fp8_mflr the bytes alone)\n");

    if (!json_path.empty()) {
        char date[32];
        const std::time_t now = std::time(nullptr);
        std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
        std::ofstream f(json_path);
        f << "{\"bench\":\"moe_fp8\",\"device\":\"" << prop.name << "\",\"date\":\"" << date
          << "\",\"shape\":{\"hidden\":" << kHidden << ",\"experts\":" << kExperts << ",\"top_k\":" << kTopK
          << ",\"inter\":" << kInter << "},\"measured\":{\"copy_bytes_per_s\":" << peak.bytes_per_s
          << ",\"bf16_gemm_flops_per_s\":" << peak.bf16_flops_per_s
          << ",\"fp8_gemm_flops_per_s\":" << peak.fp8_flops_per_s << "},\"iters\":" << iters
          << ",\"cold_layers\":" << cold_layers << ",\"fp8_align\":" << g_fp8_align << ",\"peer_cmd\":\""
          << json_escape(peer_cmd) << "\",\"peer_output\":\"" << json_escape(peer_raw) << "\",\"results\":[";
        for (size_t i = 0; i < results.size(); ++i) {
            const auto& r = results[i];
            f << (i ? "," : "") << "{\"tokens\":" << r.tokens << ",\"bf16_path\":\""
              << (r.bf16_decode ? "decode" : "grouped") << "\",\"fp8_path\":\"" << (r.fp8_decode ? "decode" : "grouped")
              << "\",\"active_experts\":" << r.active_experts << ",\"bf16_hot_ms\":" << r.bf16_hot_ms
              << ",\"bf16_cold_ms\":" << r.bf16_cold_ms << ",\"fp8_hot_ms\":" << r.fp8_hot_ms
              << ",\"fp8_cold_ms\":" << r.fp8_cold_ms << ",\"ratio_cold\":" << r.bf16_cold_ms / r.fp8_cold_ms
              << ",\"peer_ms\":" << r.peer_ms << ",\"fp8_gate_up_ms\":" << r.fp8_gate_up_ms
              << ",\"fp8_down_ms\":" << r.fp8_down_ms << ",\"gemm_flops\":" << r.gemm_flops
              << ",\"bf16_bytes\":" << r.bf16_bytes << ",\"fp8_bytes\":" << r.fp8_bytes
              << ",\"bf16_floor_ms\":" << r.bf16_floor_ms << ",\"fp8_floor_ms\":" << r.fp8_floor_ms
              << ",\"fp8_mem_floor_ms\":" << r.fp8_mem_floor_ms << ",\"decode_kernels_ms\":" << r.decode_kernels_ms
              << ",\"decode_kernels_bulk_ms\":" << r.decode_kernels_bulk_ms
              << ",\"fp8_unfused_cold_ms\":" << r.fp8_unfused_cold_ms
              << ",\"bf16_unfused_cold_ms\":" << r.bf16_unfused_cold_ms
              << ",\"fp8_forced_decode_cold_ms\":" << r.fp8_forced_decode_cold_ms
              << ",\"bf16_one_launch_cold_ms\":" << r.bf16_one_launch_cold_ms << ",\"fp8_stages_ms\":{";
            bool first = true;
            for (int s = 0; s + 1 < kStages; ++s)
                if (r.fp8_stage_ms[s] >= 0) {
                    f << (first ? "" : ",") << "\"" << kStageNames[s] << "\":" << r.fp8_stage_ms[s];
                    first = false;
                }
            f << "}}";
        }
        f << "]}\n";
        std::printf("wrote %s\n", json_path.c_str());
    }
    return 0;
}
