// The absorbed MLA decode of one layer at DeepSeek-V2-Lite's attention shape (16 heads, kv_lora_rank 512, rope 64,
// nope 128, v 128, BF16 latents, 16-key cache blocks in shuffled physical order, every sequence at the same context):
// the launches the decode step runs between the q / kv_a projections and the O projection: the latent norm + RoPE +
// cache write, q absorb, the split pass and its combine, v up.
//
// For each batch x context x kind x split count: the median time of one layer, from a CUDA graph of back-to-back
// layers that cycles over enough copies of kv_b and the cache (distinct weights, blocks and block tables) that each
// layer reads them from memory, as the step's layers do. Kinds: gemm (launch_mla_rope_kv, the batched cuBLASLt
// GEMMs around launch_mla_decode_bf16), gemv (the same with the streaming few-token kernels, where they take the
// batch), fused (what the step runs at a few tokens: launch_mla_rope_q_absorb_gemv and launch_mla_decode_v_up_gemv,
// the RoPE in the absorb kernel and the combine in the v_up kernel), attention (the split pass and its combine
// alone). Beside it the floor: the bytes one layer must move (W_k and W_v, the latent cache rows, the query and
// output rows) at the device's copy bandwidth, measured in the same run.
//
// usage: mla_decode_bench [--batches 1,4] [--contexts 1024,32000] [--splits LIST] [--iters 20] [--json PATH]
//        (--splits adds rows at those split counts beside the step's, mla_decode_splits)

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench/kernels/bench_util.cuh"
#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/mla_gemm.hpp"

namespace {

using zmoe::bench::device_alloc;
using zmoe::bench::parse_list;
using zmoe::bench::upload_ints;
using zmoe::kernels::bf16;

constexpr int32_t kHeads = 16, kRank = 512, kRope = 64, kNope = 128, kV = 128, kBlockSize = 16;
constexpr int32_t kWidth = kRank + kRope, kQk = kNope + kRope;
constexpr size_t kColdBytes = size_t(256) << 20;  // bytes a graph cycles over, at least: well past the 50 MB L2

struct row {
    int32_t batch = 0, context = 0, copies = 0, splits = 0;
    std::string kind;       // "gemm" | "gemv" | "attention" (the split pass alone)
    bool automatic = true;  // the split count the step takes
    double ms = 0, floor_ms = 0, bytes = 0;
};

row measure(int32_t batch, int32_t context, int32_t splits, const std::string& kind, bool automatic, int iters,
            cublasLtHandle_t blas, void* blas_ws, size_t blas_ws_bytes, cudaStream_t stream) {
    row r{.batch = batch, .context = context, .splits = splits, .kind = kind, .automatic = automatic};
    const int32_t blocks_per_seq = (context + kBlockSize - 1) / kBlockSize;
    const size_t kv_b_elems = size_t(kHeads) * (kNope + kV) * kRank;
    const size_t cache_elems = size_t(batch) * blocks_per_seq * kBlockSize * kWidth;
    const size_t layer_bytes = (kv_b_elems + cache_elems) * sizeof(bf16);
    r.copies = int32_t(std::clamp<size_t>((kColdBytes + layer_bytes - 1) / layer_bytes, 1, 512));
    bf16* kv_b = device_alloc<bf16>(kv_b_elems * r.copies);
    bf16* cache = device_alloc<bf16>(cache_elems * r.copies);
    zmoe::bench::fill(kv_b, kv_b_elems * r.copies, 0.05f, 11, stream);
    zmoe::bench::fill(cache, cache_elems * r.copies, 1.f, 12, stream);
    bf16* q = device_alloc<bf16>(size_t(batch) * kHeads * kQk);
    zmoe::bench::fill(q, size_t(batch) * kHeads * kQk, 1.f, 13, stream);
    bf16* q_lat = device_alloc<bf16>(size_t(batch) * kHeads * kRank);
    bf16* o_lat = device_alloc<bf16>(size_t(batch) * kHeads * kRank);
    bf16* out = device_alloc<bf16>(size_t(batch) * kHeads * kV);
    const size_t num_blocks = size_t(r.copies) * batch * blocks_per_seq;
    const std::vector<int32_t> host_tables = zmoe::bench::shuffled_blocks(num_blocks, uint32_t(batch * 7 + context));
    int32_t* tables = upload_ints(host_tables);
    int32_t* start = upload_ints(std::vector<int32_t>(batch, context - 1));
    // The RoPE's inputs: each copy's newest rows (position context - 1 of every sequence) are its cache writes.
    std::vector<int32_t> host_slots;
    for (int32_t c = 0; c < r.copies; ++c)
        for (int32_t b = 0; b < batch; ++b)
            host_slots.push_back(host_tables[(size_t(c) * batch + b) * blocks_per_seq + (context - 1) / kBlockSize] *
                                     kBlockSize +
                                 (context - 1) % kBlockSize);
    int32_t* slots = upload_ints(host_slots);
    int32_t* positions = upload_ints(std::vector<int32_t>(batch, context - 1));
    bf16* kv = device_alloc<bf16>(size_t(batch) * kWidth);
    zmoe::bench::fill(kv, size_t(batch) * kWidth, 1.f, 15, stream);
    bf16* kv_norm = device_alloc<bf16>(kRank);
    zmoe::bench::fill(kv_norm, kRank, 1.f, 16, stream);
    std::vector<float> host_inv_freq(kRope / 2);
    for (int32_t i = 0; i < kRope / 2; ++i) host_inv_freq[i] = float(std::pow(10000.0, -2.0 * i / kRope));
    float* inv_freq = device_alloc<float>(kRope / 2);
    ZMOE_CUDA_CHECK(
        cudaMemcpy(inv_freq, host_inv_freq.data(), sizeof(float) * host_inv_freq.size(), cudaMemcpyHostToDevice));
    float* ws =
        device_alloc<float>(std::max<size_t>(zmoe::kernels::mla_decode_workspace_floats(batch, kHeads, splits), 1));
    if (kind == "attention") zmoe::bench::fill(q_lat, size_t(batch) * kHeads * kRank, 1.f, 14, stream);

    auto launch = [&](int32_t copy) {
        const zmoe::kernels::mla_rope_kv_params rope{.q = q,
                                                     .kv = kv,
                                                     .kv_norm_weight = kv_norm,
                                                     .positions = positions,
                                                     .slot_mapping = slots + size_t(copy) * batch,
                                                     .inv_freq = inv_freq,
                                                     .cache = cache,
                                                     .num_tokens = batch,
                                                     .num_heads = kHeads,
                                                     .nope_dim = kNope,
                                                     .rope_dim = kRope,
                                                     .kv_lora_rank = kRank,
                                                     .block_size = kBlockSize};
        zmoe::kernels::mla_absorb_gemm_params ab{.handle = blas,
                                                 .workspace = blas_ws,
                                                 .workspace_bytes = blas_ws_bytes,
                                                 .kv_b = kv_b + kv_b_elems * copy,
                                                 .in = q,
                                                 .out = q_lat,
                                                 .num_tokens = batch,
                                                 .num_heads = kHeads,
                                                 .nope_dim = kNope,
                                                 .rope_dim = kRope,
                                                 .v_dim = kV,
                                                 .kv_lora_rank = kRank};
        const zmoe::kernels::mla_decode_params dp{.q = q,
                                                  .cache = cache,
                                                  .block_tables = tables + size_t(copy) * batch * blocks_per_seq,
                                                  .start_pos = start,
                                                  .workspace = ws,
                                                  .num_seqs = batch,
                                                  .num_heads = kHeads,
                                                  .nope_dim = kNope,
                                                  .rope_dim = kRope,
                                                  .kv_lora_rank = kRank,
                                                  .block_size = kBlockSize,
                                                  .max_blocks_per_seq = blocks_per_seq,
                                                  .num_splits = splits,
                                                  .scale = 0.0625f};
        const zmoe::kernels::mla_latents_bf16 lat{.q = q_lat, .o = o_lat};
        if (kind == "fused") {
            zmoe::kernels::launch_mla_rope_q_absorb_gemv(rope, ab, stream);
            ab.in = o_lat;
            ab.out = out;
            zmoe::kernels::launch_mla_decode_v_up_gemv(dp, lat, ab, stream);
            return;
        }
        if (kind != "attention") zmoe::kernels::launch_mla_rope_kv(rope, stream);
        if (kind == "gemv")
            zmoe::kernels::launch_mla_q_absorb_gemv(ab, stream);
        else if (kind == "gemm")
            zmoe::kernels::launch_mla_q_absorb_gemm(ab, stream);
        zmoe::kernels::launch_mla_decode_bf16(dp, lat, stream);
        ab.in = o_lat;
        ab.out = out;
        if (kind == "gemv")
            zmoe::kernels::launch_mla_v_up_gemv(ab, stream);
        else if (kind == "gemm")
            zmoe::kernels::launch_mla_v_up_gemm(ab, stream);
    };
    launch(0);  // outside the capture: the kernels' attributes and the GEMM plans
    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const int32_t launches = std::max(r.copies, 16);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ZMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int32_t i = 0; i < launches; ++i) launch(i % r.copies);
    ZMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    ZMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    r.ms =
        zmoe::bench::event_median_ms([&] { ZMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, stream, iters) / launches;
    const double weights = kind == "attention" ? 0.0 : double(kv_b_elems) * sizeof(bf16);
    r.bytes = weights + double(batch) * (double(context) * kWidth * sizeof(bf16) +
                                         double(kHeads) * (kQk + kV) * sizeof(bf16) + blocks_per_seq * 4.0);
    ZMOE_CUDA_CHECK(cudaGraphExecDestroy(exec));
    ZMOE_CUDA_CHECK(cudaGraphDestroy(graph));
    for (void* p :
         {(void*)kv_b, (void*)cache, (void*)q, (void*)q_lat, (void*)o_lat, (void*)out, (void*)tables, (void*)start,
          (void*)ws, (void*)slots, (void*)positions, (void*)kv, (void*)kv_norm, (void*)inv_freq})
        ZMOE_CUDA_CHECK(cudaFree(p));
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int32_t> batches{1, 4}, contexts{1024, 32000}, splits;
    int iters = 20;
    std::string json;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "--batches" && has_value)
            batches = parse_list(argv[++i]);
        else if (a == "--contexts" && has_value)
            contexts = parse_list(argv[++i]);
        else if (a == "--splits" && has_value)
            splits = parse_list(argv[++i]);
        else if (a == "--iters" && has_value)
            iters = std::max(1, std::stoi(argv[++i]));
        else if (a == "--json" && has_value)
            json = argv[++i];
        else {
            std::fprintf(
                stderr, "usage: %s [--batches 1,4] [--contexts 1024,32000] [--splits LIST] [--iters N] [--json PATH]\n",
                argv[0]);
            return 2;
        }
    }
    cudaStream_t stream;
    ZMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaDeviceProp prop{};
    ZMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    cublasLtHandle_t blas;
    ZMOE_CUBLAS_CHECK(cublasLtCreate(&blas));
    const size_t blas_ws_bytes = size_t(32) << 20;
    void* blas_ws = device_alloc<char>(blas_ws_bytes);
    const double bandwidth = zmoe::bench::copy_bytes_per_s(stream);

    std::vector<row> rows;
    for (int32_t b : batches)
        for (int32_t c : contexts) {
            const int32_t chosen = zmoe::kernels::mla_decode_splits(b, kHeads, prop.multiProcessorCount);
            std::vector<std::string> kinds{"attention", "gemm"};
            if (zmoe::kernels::mla_absorb_gemv_supported(b, kNope, kV, kRank)) {
                kinds.push_back("gemv");
                kinds.push_back("fused");
            }
            for (const std::string& kind : kinds) {
                rows.push_back(measure(b, c, chosen, kind, true, iters, blas, blas_ws, blas_ws_bytes, stream));
                for (int32_t s : splits)
                    if (s != chosen)
                        rows.push_back(measure(b, c, s, kind, false, iters, blas, blas_ws, blas_ws_bytes, stream));
            }
        }
    for (row& r : rows) r.floor_ms = r.bytes / bandwidth * 1e3;

    std::printf(
        "\nMLA decode layer (RoPE, q absorb, attention, v up), %d heads, rank %d + rope %d, nope %d, v %d, on %s; copy "
        "bandwidth %.0f GB/s\n",
        kHeads, kRank, kRope, kNope, kV, prop.name, bandwidth * 1e-9);
    std::printf("%6s %8s %7s %8s %10s %10s %10s %7s\n", "batch", "context", "copies", "splits", "kind", "us",
                "floor us", "floor%");
    for (const row& r : rows)
        std::printf("%6d %8d %7d %7d%c %10s %10.2f %10.2f %6.0f%%\n", r.batch, r.context, r.copies, r.splits,
                    r.automatic ? '*' : ' ', r.kind.c_str(), r.ms * 1e3, r.floor_ms * 1e3, 100.0 * r.floor_ms / r.ms);
    std::printf(
        "(splits *: the decode step's choice; kind attention: the split pass and its combine alone; floor: "
        "kv_b (not for attention), cache rows, query and output at the copy bandwidth)\n");
    if (!json.empty()) {
        std::ofstream f(json);
        f << "{\"bench\":\"mla_decode\",\"device\":\"" << prop.name << "\",\"copy_bytes_per_s\":" << bandwidth
          << ",\"iters\":" << iters << ",\"rows\":[";
        for (size_t i = 0; i < rows.size(); ++i) {
            const row& r = rows[i];
            f << (i ? "," : "") << "{\"batch\":" << r.batch << ",\"context\":" << r.context
              << ",\"copies\":" << r.copies << ",\"num_splits\":" << r.splits << ",\"kind\":\"" << r.kind
              << "\",\"automatic\":" << (r.automatic ? "true" : "false") << ",\"ms\":" << r.ms
              << ",\"bytes\":" << r.bytes << ",\"floor_ms\":" << r.floor_ms << "}";
        }
        f << "]}\n";
        std::printf("wrote %s\n", json.c_str());
    }
    ZMOE_CUBLAS_CHECK(cublasLtDestroy(blas));
    ZMOE_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
}
