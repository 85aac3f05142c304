// One MoE layer at Qwen3-30B-A3B shapes (hidden 2048, 128 experts, top-8, expert FFN 768, BF16) for 1..16384
// tokens through kernels::launch_moe_layer, the call the CUDA executor makes per MoE layer, so the bench times the
// executor's launch sequence and path choice (kernels::moe_use_decode_path): one token runs launch_moe_decode
// (router GEMV, routing, gate|up with SiLU*up, down and the weighted sum in three launches); larger batches run the
// router GEMM (fp32 logits) + softmax/top-k with the replica choice + permutation + gate/up GEMM with SiLU*up + down
// GEMM + weighted combine, the grouped GEMM kernel chosen by moe_row_align_for. Timed with CUDA events (warm-up,
// then the median of --iters runs), once launched stream-ordered (with a per-stage split from the launcher's stage
// marks) and once as a CUDA graph replay, beside the floor: the bytes the layer must move (expert weights touched,
// activations in and out) at the device's copy bandwidth, or its FLOPs at the device's dense BF16 GEMM rate,
// whichever is longer. Both ceilings are measured in the same run (a 1 GiB device-to-device copy counting bytes
// read + written; an 8192^3 cuBLASLt BF16 GEMM).
//   moe_layer_bench [--tokens 1,8,...] [--iters N] [--warmup N] [--path auto|decode|grouped]
//                   [--decode-router fused|gemm] [--align 8|16|32|64|128] [--impl auto|mma|wgmma|small] [--no-gather]
//                   [--peer CMD] [--json PATH]
// --path forces the expert path (decode: only where moe_decode_supported); --decode-router gemm runs the decode path
// after the router GEMM instead of fusing the router GEMV; --align forces the row alignment (hence
// the grouped GEMM kernel and its tile height) instead of moe_row_align_for's; --impl forces the grouped GEMM
// kernel. By default the permute only plans (offsets, destinations, row_token) and the gate/up GEMM reads x through
// row_token; --no-gather permutes x into a copy first. --peer runs CMD after zmoe's measurements (the GPU otherwise
// idle) and reads from its standard output the rows "<tokens> <milliseconds> ..." (the first two fields; other lines
// are ignored): the table and the JSON then compare zmoe with that peer at the same token counts. A second table
// times the router alone (kernels::launch_moe_router: GEMM + softmax top-k + replica choice) as a graph on each of
// its GEMM kernels (moe_router_impl; launch_moe_layer lets it choose).
// --cold N (default 4; 1 turns it off): a third timing, "cold_ms", replays a graph of N layers back to back, each
// with its own copy of the expert weights, and divides by N. Replaying one layer alone, the expert rows read at a few
// tokens (75 MB at one token) may partly stay in the 50 MB L2 from one replay to the next (the more so for rows a
// kernel prefetches with evict-last priority, as moe_decode did before 2026-11-27); in a decode step every layer reads
// other weights. The cold column is that case, and the one the step sees.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "base/stats.hpp"
#include "bench/kernels/bench_util.cuh"
#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace {

using zmoe::bench::device_alloc;
using zmoe::bench::fill;
using zmoe::bench::json_escape;
using zmoe::bench::parse_list;
using zmoe::bench::time_graph_ms;
using zmoe::bench::time_ms;
using zmoe::bench::time_op_ms;
using zmoe::kernels::bf16;

constexpr int32_t kHidden = 2048, kExperts = 128, kTopK = 8, kInter = 768;
int32_t g_forced_align = 0;  // --align: 0 picks moe_row_align_for
zmoe::kernels::grouped_gemm_impl g_impl = zmoe::kernels::grouped_gemm_impl::automatic;  // --impl
bool g_gather = true;  // --no-gather: permute x into a copy instead of gate/up reading it through row_token
zmoe::kernels::moe_path g_path = zmoe::kernels::moe_path::automatic;  // --path
bool g_fused_router = true;  // --decode-router gemm: the decode path with the cuBLASLt router GEMM before it
int g_cold_layers = 4;       // --cold: layers (each with its own expert weights) in the cold graph

int32_t row_align_for(int32_t num_tokens) {
    return g_forced_align ? g_forced_align : zmoe::kernels::moe_row_align_for(num_tokens, kTopK, kExperts);
}

const std::vector<const char*> kGroupedStages = {"router_gemm",  "router_topk", "permute",
                                                 "gemm_gate_up", "gemm_down",   "combine"};
const std::vector<const char*> kDecodeStages = {"moe_decode"};  // the router GEMV fused in, as in the executor
const std::vector<const char*> kDecodeGemmStages = {"router_gemm", "moe_decode"};

struct layer_buffers {
    bf16 *x, *gate_w, *w1, *w2, *xp, *act, *y, *out;
    float *logits, *weights;
    int32_t *ids, *slots, *counts, *offsets, *dest, *row_token;
    int32_t *replica_offsets, *replica_slots, *decode_scratch;  // one slot per expert
    int32_t max_rows;
    void *permute_ws, *blas_ws;
    size_t blas_ws_bytes;
    cublasLtHandle_t blas;
};

/// The layer's params as the executor fills them (kernels::launch_moe_layer), with the bench's overrides.
zmoe::kernels::moe_layer_params layer_params(const layer_buffers& b, int32_t num_tokens) {
    using namespace zmoe::kernels;
    return {.experts = {.x = b.x,
                        .w_gate_up = b.w1,
                        .w_down = b.w2,
                        .out = b.out,
                        .expert_offsets = b.offsets,
                        .dest_rows = b.dest,
                        .row_token = b.row_token,
                        .permute_workspace = b.permute_ws,
                        .x_permuted = g_gather ? nullptr : b.xp,
                        .act = b.act,
                        .y = b.y,
                        .max_rows = b.max_rows,
                        .num_tokens = num_tokens,
                        .top_k = kTopK,
                        .num_slots = kExperts,
                        .hidden = kHidden,
                        .inter = kInter,
                        .row_align = g_forced_align,
                        .impl = g_impl},
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
            .path = g_path,
            .fuse_router = g_fused_router};
}

/// Enqueues the layer for num_tokens tokens through kernels::launch_moe_layer (the executor's call); calls mark(i)
/// before its i-th stage and once more at the end.
template <typename Mark>
void enqueue_layer(const layer_buffers& b, int32_t num_tokens, cudaStream_t stream, Mark&& mark) {
    using mark_type = std::remove_reference_t<Mark>;
    struct marker {
        mark_type* mark;
        int next = 0;
    } m{&mark};
    zmoe::kernels::moe_layer_params p = layer_params(b, num_tokens);
    p.experts.mark = [](void* context, zmoe::kernels::moe_stage) {
        auto* self = static_cast<marker*>(context);
        (*self->mark)(self->next++);
    };
    p.experts.mark_context = &m;
    zmoe::kernels::launch_moe_layer(p, stream);
}

struct result {
    int32_t tokens = 0, row_align = 0, active_experts = 0;
    bool decode_path = false;
    double median_ms = 0, graph_median_ms = 0, floor_ms = 0, bytes = 0, flops = 0;
    double cold_ms = -1;  // a graph of g_cold_layers layers with their own weights, per layer (< 0: not run)
    std::vector<const char*> stage_names;
    std::vector<double> stage_ms;
    double peer_ms = -1;  // < 0: no peer row for this token count
    // The router alone (GEMM + softmax top-k + replica choice, kernels::launch_moe_router) as a graph, per GEMM
    // kernel; < 0 where that kernel does not take the batch.
    double router_gemv_ms = -1, router_mma_ms = -1, router_blas_ms = -1;
};

/// The router of the layer (kernels::launch_moe_router, as launch_moe_layer fills it) on the given GEMM kernel, as a
/// graph.
double time_router_ms(const layer_buffers& b, int32_t num_tokens, zmoe::kernels::moe_router_impl impl,
                      cudaStream_t stream, int warmup, int iters) {
    return time_graph_ms(
        [&](cudaStream_t s) {
            zmoe::kernels::launch_moe_router({.x = b.x,
                                              .router_w = b.gate_w,
                                              .router_logits = b.logits,
                                              .blas = b.blas,
                                              .blas_workspace = b.blas_ws,
                                              .blas_workspace_bytes = b.blas_ws_bytes,
                                              .topk_ids = b.ids,
                                              .topk_weights = b.weights,
                                              .replica_offsets = b.replica_offsets,
                                              .replica_slots = b.replica_slots,
                                              .slot_ids = b.slots,
                                              .load_counts = b.counts,
                                              .num_tokens = num_tokens,
                                              .num_experts = kExperts,
                                              .hidden = kHidden,
                                              .top_k = kTopK,
                                              .renormalize = true,
                                              .impl = impl},
                                             s);
        },
        stream, warmup, iters);
}

struct ceilings {
    double bytes_per_s = 0, flops_per_s = 0;
};

/// The device's copy bandwidth and dense BF16 GEMM rate, measured now (bench_util.cuh).
ceilings measure_ceilings(cublasLtHandle_t blas, void* blas_ws, size_t blas_ws_bytes, cudaStream_t stream) {
    return {.bytes_per_s = zmoe::bench::copy_bytes_per_s(stream),
            .flops_per_s = zmoe::bench::bf16_gemm_flops_per_s(blas, blas_ws, blas_ws_bytes, stream)};
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int32_t> token_counts{1, 8, 32, 128, 256, 512, 2048, 8192, 16384};
    int iters = 20, warmup = 5;
    std::string json_path, peer_cmd;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--tokens" && i + 1 < argc)
            token_counts = parse_list(argv[++i]);
        else if (a == "--iters" && i + 1 < argc)
            iters = std::stoi(argv[++i]);
        else if (a == "--warmup" && i + 1 < argc)
            warmup = std::stoi(argv[++i]);
        else if (a == "--json" && i + 1 < argc)
            json_path = argv[++i];
        else if (a == "--align" && i + 1 < argc)
            g_forced_align = std::stoi(argv[++i]);
        else if (a == "--cold" && i + 1 < argc)
            g_cold_layers = std::max(1, std::stoi(argv[++i]));
        else if (a == "--no-gather")
            g_gather = false;
        else if (a == "--peer" && i + 1 < argc)
            peer_cmd = argv[++i];
        else if (a == "--impl" && i + 1 < argc) {
            const std::string v = argv[++i];
            if (v == "auto")
                g_impl = zmoe::kernels::grouped_gemm_impl::automatic;
            else if (v == "mma")
                g_impl = zmoe::kernels::grouped_gemm_impl::mma_sync;
            else if (v == "wgmma")
                g_impl = zmoe::kernels::grouped_gemm_impl::wgmma;
            else if (v == "small")
                g_impl = zmoe::kernels::grouped_gemm_impl::small;
            else
                return std::fprintf(stderr, "--impl: auto, mma, wgmma or small\n"), 2;
        } else if (a == "--decode-router" && i + 1 < argc) {
            const std::string v = argv[++i];
            if (v != "fused" && v != "gemm") return std::fprintf(stderr, "--decode-router: fused or gemm\n"), 2;
            g_fused_router = v == "fused";
        } else if (a == "--path" && i + 1 < argc) {
            const std::string v = argv[++i];
            if (v == "auto")
                g_path = zmoe::kernels::moe_path::automatic;
            else if (v == "decode")
                g_path = zmoe::kernels::moe_path::decode;
            else if (v == "grouped")
                g_path = zmoe::kernels::moe_path::grouped;
            else
                return std::fprintf(stderr, "--path: auto, decode or grouped\n"), 2;
        } else {
            std::fprintf(stderr,
                         "usage: %s [--tokens 1,8,...] [--iters N] [--warmup N] [--path auto|decode|grouped] "
                         "[--decode-router fused|gemm] "
                         "[--align 8|16|32|64|128] [--impl auto|mma|wgmma|small] [--no-gather] [--cold N] "
                         "[--peer CMD] [--json PATH]\n",
                         argv[0]);
            return 2;
        }
    }
    const int32_t max_tokens = *std::max_element(token_counts.begin(), token_counts.end());
    const int32_t max_rows = zmoe::kernels::moe_permuted_rows_bound(max_tokens, kTopK, kExperts, 128);

    cudaDeviceProp prop{};
    ZMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    layer_buffers b{};
    b.x = device_alloc<bf16>(size_t(max_tokens) * kHidden);
    b.gate_w = device_alloc<bf16>(size_t(kExperts) * kHidden);
    b.w1 = device_alloc<bf16>(size_t(kExperts) * 2 * kInter * kHidden);
    b.w2 = device_alloc<bf16>(size_t(kExperts) * kHidden * kInter);
    b.xp = device_alloc<bf16>(size_t(max_rows) * kHidden);
    b.act = device_alloc<bf16>(size_t(max_rows) * kInter);
    b.y = device_alloc<bf16>(size_t(max_rows) * kHidden);
    b.out = device_alloc<bf16>(size_t(max_tokens) * kHidden);
    b.logits = device_alloc<float>(size_t(max_tokens) * kExperts);
    b.weights = device_alloc<float>(size_t(max_tokens) * kTopK);
    b.ids = device_alloc<int32_t>(size_t(max_tokens) * kTopK);
    b.slots = device_alloc<int32_t>(size_t(max_tokens) * kTopK);
    b.max_rows = max_rows;
    b.counts = device_alloc<int32_t>(kExperts);
    b.offsets = device_alloc<int32_t>(kExperts + 1);
    b.dest = device_alloc<int32_t>(size_t(max_tokens) * kTopK);
    b.row_token = device_alloc<int32_t>(max_rows);
    b.permute_ws = device_alloc<uint8_t>(zmoe::kernels::moe_permute_workspace_bytes(max_tokens, kTopK, kExperts));
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
        ZMOE_CUDA_CHECK(cudaMemset(b.decode_scratch, 0, scratch_ints * sizeof(int32_t)));  // zero before first use
    }
    b.blas_ws_bytes = 32u << 20;
    b.blas_ws = device_alloc<uint8_t>(b.blas_ws_bytes);
    ZMOE_CUBLAS_CHECK(cublasLtCreate(&b.blas));
    fill(b.x, size_t(max_tokens) * kHidden, 1.f, 1);
    fill(b.gate_w, size_t(kExperts) * kHidden, 0.05f, 2);
    fill(b.w1, size_t(kExperts) * 2 * kInter * kHidden, 0.03f, 3);
    fill(b.w2, size_t(kExperts) * kHidden * kInter, 0.03f, 4);
    ZMOE_CUDA_CHECK(cudaMemset(b.counts, 0, sizeof(int32_t) * kExperts));  // += per run: only > 0 is read
    // The cold graph's layers: the same buffers with copies of the expert weights (the same routing and results).
    std::vector<layer_buffers> cold(size_t(g_cold_layers), b);
    for (size_t l = 1; l < cold.size(); ++l) {
        const size_t n1 = size_t(kExperts) * 2 * kInter * kHidden, n2 = size_t(kExperts) * kHidden * kInter;
        cold[l].w1 = device_alloc<bf16>(n1);
        cold[l].w2 = device_alloc<bf16>(n2);
        ZMOE_CUDA_CHECK(cudaMemcpy(cold[l].w1, b.w1, n1 * sizeof(bf16), cudaMemcpyDeviceToDevice));
        ZMOE_CUDA_CHECK(cudaMemcpy(cold[l].w2, b.w2, n2 * sizeof(bf16), cudaMemcpyDeviceToDevice));
    }
    ZMOE_CUDA_CHECK(cudaDeviceSynchronize());

    cudaStream_t stream;
    ZMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const ceilings peak = measure_ceilings(b.blas, b.blas_ws, b.blas_ws_bytes, stream);
    std::printf("measured: copy %.0f GB/s, dense BF16 GEMM %.0f TFLOP/s\n", peak.bytes_per_s * 1e-9,
                peak.flops_per_s * 1e-12);
    std::vector<result> results;
    for (int32_t tokens : token_counts) {
        result r;
        r.tokens = tokens;
        r.decode_path = zmoe::kernels::moe_layer_uses_decode_path(layer_params(b, tokens));
        r.row_align = r.decode_path ? 0 : row_align_for(tokens);
        r.stage_names = !r.decode_path ? kGroupedStages : g_fused_router ? kDecodeStages : kDecodeGemmStages;
        const int num_marks = int(r.stage_names.size()) + 1;
        r.stage_ms =
            time_ms([&](auto&& mark) { enqueue_layer(b, tokens, stream, mark); }, stream, warmup, iters, num_marks);
        r.median_ms = r.stage_ms.back();
        r.stage_ms.pop_back();

        r.graph_median_ms =
            time_graph_ms([&](cudaStream_t s) { enqueue_layer(b, tokens, s, [](int) {}); }, stream, warmup, iters);
        if (cold.size() > 1)
            r.cold_ms = time_graph_ms(
                            [&](cudaStream_t s) {
                                for (const auto& layer : cold) enqueue_layer(layer, tokens, s, [](int) {});
                            },
                            stream, warmup, iters) /
                        double(cold.size());
        using zmoe::kernels::moe_router_impl;
        if (tokens <= zmoe::kernels::kGemvMaxRows)
            r.router_gemv_ms = time_router_ms(b, tokens, moe_router_impl::gemv, stream, warmup, iters);
        r.router_mma_ms = time_router_ms(b, tokens, moe_router_impl::mma, stream, warmup, iters);
        r.router_blas_ms = time_router_ms(b, tokens, moe_router_impl::cublaslt, stream, warmup, iters);

        std::vector<int32_t> counts(kExperts);
        ZMOE_CUDA_CHECK(cudaMemcpy(counts.data(), b.counts, sizeof(int32_t) * kExperts, cudaMemcpyDeviceToHost));
        r.active_experts = int32_t(std::count_if(counts.begin(), counts.end(), [](int32_t c) { return c > 0; }));
        const zmoe::bench::moe_layer_cost cost =
            zmoe::bench::moe_layer_cost_of(tokens, r.active_experts, kExperts, kHidden, kInter, kTopK, 2.0);
        r.bytes = cost.bytes;
        r.flops = cost.flops;
        r.floor_ms = zmoe::bench::floor_ms(r.bytes, r.flops, peak.bytes_per_s, peak.flops_per_s);
        results.push_back(r);
    }

    std::string peer_raw;
    if (!peer_cmd.empty()) {
        const auto rows = zmoe::bench::run_peer(peer_cmd, peer_raw, "moe_layer_bench");
        for (auto& r : results)
            for (const auto& [tokens, ms] : rows)
                if (tokens == r.tokens) r.peer_ms = ms;
        std::printf("%s", peer_raw.c_str());
    }

    std::printf(
        "MoE layer, hidden %d, %d experts, top-%d, expert FFN %d, BF16 on %s (median of %d); floor at the "
        "measured %.0f GB/s and %.0f TFLOP/s\n",
        kHidden, kExperts, kTopK, kInter, prop.name, iters, peak.bytes_per_s * 1e-9, peak.flops_per_s * 1e-12);
    std::printf("%7s %7s %5s %6s %10s %10s %9s %9s %10s %7s %8s %8s %9s | %s\n", "tokens", "path", "align", "active",
                "median_ms", "graph_ms", "cold_ms", "peer_ms", "floor_ms", "floor%", "TFLOP/s", "GB/s", "vs_peer",
                "stages ms");
    for (const auto& r : results) {
        const double best = std::min(r.median_ms, r.graph_median_ms);
        char vs[32] = "-";
        if (r.peer_ms > 0) std::snprintf(vs, sizeof vs, "%.2fx", r.peer_ms / best);
        std::printf("%7d %7s %5d %6d %10.4f %10.4f %9.4f %9.4f %10.4f %6.1f%% %8.1f %8.0f %9s |", r.tokens,
                    r.decode_path ? "decode" : "grouped", r.row_align, r.active_experts, r.median_ms, r.graph_median_ms,
                    r.cold_ms, r.peer_ms, r.floor_ms, 100.0 * r.floor_ms / best, r.flops / best * 1e-9,
                    r.bytes / best * 1e-6, vs);
        for (size_t s = 0; s < r.stage_ms.size(); ++s) std::printf(" %s %.4f", r.stage_names[s], r.stage_ms[s]);
        std::printf("\n");
    }
    std::printf(
        "(vs_peer: peer ms / zmoe's best of stream and graph; > 1 means zmoe is faster; cold_ms: a graph of %d "
        "layers with their own expert weights, per layer)\n",
        g_cold_layers);
    std::printf(
        "router alone (launch_moe_router: GEMM + softmax top-k + replica choice), graph ms per GEMM kernel\n"
        "(mma_fused: GEMM and top-k in one launch; the others: then launch_router_topk):\n");
    std::printf("%7s %10s %10s %10s\n", "tokens", "gemv", "mma_fused", "cublaslt");
    for (const auto& r : results)
        std::printf("%7d %10.4f %10.4f %10.4f\n", r.tokens, r.router_gemv_ms, r.router_mma_ms, r.router_blas_ms);

    if (!json_path.empty()) {
        char date[32];
        const std::time_t now = std::time(nullptr);
        std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
        std::ofstream f(json_path);
        f << "{\"bench\":\"moe_layer\",\"impl\":\"zmoe\",\"device\":\"" << prop.name << "\",\"date\":\"" << date
          << "\",\"shape\":{\"hidden\":" << kHidden << ",\"experts\":" << kExperts << ",\"top_k\":" << kTopK
          << ",\"inter\":" << kInter << ",\"dtype\":\"bf16\"},\"measured\":{\"copy_bytes_per_s\":" << peak.bytes_per_s
          << ",\"bf16_gemm_flops_per_s\":" << peak.flops_per_s << "},\"iters\":" << iters << ",\"gemm_impl\":\""
          << (g_impl == zmoe::kernels::grouped_gemm_impl::automatic ? "auto"
              : g_impl == zmoe::kernels::grouped_gemm_impl::wgmma   ? "wgmma"
              : g_impl == zmoe::kernels::grouped_gemm_impl::small   ? "small"
                                                                    : "mma")
          << "\",\"path\":\""
          << (g_path == zmoe::kernels::moe_path::automatic ? "auto"
              : g_path == zmoe::kernels::moe_path::decode  ? "decode"
                                                           : "grouped")
          << "\",\"gather\":" << (g_gather ? "true" : "false") << ",\"forced_align\":" << g_forced_align
          << ",\"peer_cmd\":\"" << json_escape(peer_cmd) << "\",\"peer_output\":\"" << json_escape(peer_raw)
          << "\",\"results\":[";
        for (size_t i = 0; i < results.size(); ++i) {
            const auto& r = results[i];
            f << (i ? "," : "") << "{\"tokens\":" << r.tokens << ",\"median_ms\":" << r.median_ms
              << ",\"graph_median_ms\":" << r.graph_median_ms << ",\"cold_graph_ms\":" << r.cold_ms
              << ",\"cold_layers\":" << g_cold_layers << ",\"peer_ms\":" << r.peer_ms << ",\"floor_ms\":" << r.floor_ms
              << ",\"bytes\":" << r.bytes << ",\"flops\":" << r.flops << ",\"active_experts\":" << r.active_experts
              << ",\"path\":\"" << (r.decode_path ? "decode" : "grouped") << "\",\"row_align\":" << r.row_align
              << ",\"router_graph_ms\":{\"gemv\":" << r.router_gemv_ms << ",\"mma\":" << r.router_mma_ms
              << ",\"cublaslt\":" << r.router_blas_ms << "},\"stages_ms\":{";
            for (size_t s = 0; s < r.stage_ms.size(); ++s)
                f << (s ? "," : "") << "\"" << r.stage_names[s] << "\":" << r.stage_ms[s];
            f << "}}";
        }
        f << "]}\n";
        std::printf("wrote %s\n", json_path.c_str());
    }
    return 0;
}
