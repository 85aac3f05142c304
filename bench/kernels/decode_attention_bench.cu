// Decode attention (launch_decode_attention) at Qwen3-30B-A3B's attention shape: 32 query / 4 KV heads of 128, BF16,
// a paged KV cache of 16-key blocks in shuffled physical order, every sequence at the same context length.
//
// For each batch x context: the median time of one launch, from a CUDA graph of back-to-back launches (programmatic
// dependent launch, as the decode step runs them) that cycles over enough copies of the KV cache (distinct blocks,
// distinct block tables) that each launch reads its KV from memory, not from the L2 of the launch before. Beside it:
//   floor: the bytes one launch must move (K, V, the query, the output, the block table) at the device's copy
//          bandwidth, measured in the same run (1 GiB device to device, bytes read + written);
//   peer:  --peer CMD runs after zmoe's measurements (the GPU otherwise idle) and prints "<batch> <context> <ms>" rows
//          for the same shapes (bench/kernels/decode_attention_peer.py: PyTorch's scaled_dot_product_attention with
//          enable_gqa over a contiguous KV cache); other lines are echoed.
//
// The split count is the one the decode step takes (decode_attention_splits for the batch, sized for --max-kv-len
// keys, default the context); --splits 1,8,... times those counts too, each a row; --stages 2,4 times the step's
// split count with those K/V tiles in flight per warp (decode_attention_params::num_stages), each a row.
//
// --isolated adds a column "alone": the same graph with a one-thread kernel, launched without programmatic
// dependence, before every launch (its own graph's time subtracted), so a launch cannot overlap the one before it
// (back to back, the next launch's block-table reads and early K/V tiles run under this launch's tail; in the decode
// step the kernel before it is the RoPE/KV-write kernel, and the split that wins back to back need not win there).
//
// usage: decode_attention_bench [--batches 1,64,256] [--contexts 128,1024,4096] [--iters 20] [--splits LIST]
//                               [--stages LIST] [--max-kv-len N] [--isolated] [--peer CMD] [--json PATH]

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/stats.hpp"
#include "bench/kernels/bench_util.cuh"
#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/decode_attention.hpp"

namespace {

using zmoe::bench::attention_buffers;
using zmoe::bench::device_alloc;
using zmoe::bench::event_median_ms;
using zmoe::bench::parse_list;
using zmoe::bench::upload_ints;
using zmoe::kernels::bf16;

constexpr int32_t kQHeads = 32, kKvHeads = 4, kHeadDim = 128, kBlockSize = 16;
constexpr size_t kColdBytes = size_t(256) << 20;  // KV bytes a graph cycles over, at least: well past the 50 MB L2

struct row {
    int32_t batch = 0, context = 0, copies = 0, splits = 0, stages = 0;  // stages 0: the launch's own choice
    bool automatic = true;                                               // the split the decode step takes
    double ms = 0, floor_ms = 0, bytes = 0, peer_ms = -1;                // peer_ms < 0: no peer row for this shape
    double alone_ms = -1;                                                // --isolated: < 0 when not measured
};

/// The separator of --isolated: launched plainly, it ends before the next (programmatically dependent) launch starts.
__global__ void separator_kernel() {}

row measure(int32_t batch, int32_t context, int32_t splits, int32_t stages, bool automatic, int iters, bool isolated,
            cudaStream_t stream) {
    row r{.batch = batch, .context = context, .splits = splits, .stages = stages, .automatic = automatic};
    const int32_t blocks_per_seq = (context + kBlockSize - 1) / kBlockSize;
    const size_t block_bytes = size_t(kBlockSize) * kKvHeads * kHeadDim * sizeof(bf16);  // K or V
    const size_t kv_bytes = 2 * size_t(batch) * blocks_per_seq * block_bytes;
    r.copies = int32_t(std::clamp<size_t>((kColdBytes + kv_bytes - 1) / kv_bytes, 1, 1024));
    const size_t num_blocks = size_t(r.copies) * batch * blocks_per_seq;
    const size_t q_elems = size_t(batch) * kQHeads * kHeadDim;

    const attention_buffers buf(q_elems, num_blocks * block_bytes / sizeof(bf16), stream);

    // Copy c's block tables: [copies][batch][blocks_per_seq], physical blocks shuffled over the whole cache.
    int32_t* d_tables = upload_ints(zmoe::bench::shuffled_blocks(num_blocks, uint32_t(batch * 7 + context)));
    int32_t* d_start = upload_ints(std::vector<int32_t>(batch, context - 1));

    float* workspace = device_alloc<float>(
        std::max<size_t>(zmoe::kernels::decode_attention_workspace_bytes(batch, kQHeads, kHeadDim, splits), 4) /
        sizeof(float));
    auto launch = [&](int32_t copy) {
        const zmoe::kernels::decode_attention_params p{.q = buf.q,
                                                       .k_cache = buf.k_cache,
                                                       .v_cache = buf.v_cache,
                                                       .block_tables = d_tables + size_t(copy) * batch * blocks_per_seq,
                                                       .start_pos = d_start,
                                                       .workspace = workspace,
                                                       .out = buf.out,
                                                       .num_seqs = batch,
                                                       .num_q_heads = kQHeads,
                                                       .num_kv_heads = kKvHeads,
                                                       .head_dim = kHeadDim,
                                                       .block_size = kBlockSize,
                                                       .max_blocks_per_seq = blocks_per_seq,
                                                       .num_splits = r.splits,
                                                       .scale = 1.f / std::sqrt(float(kHeadDim))};
        if (r.stages > 0)
            zmoe::kernels::launch_decode_attention_stages(p, r.stages, stream);
        else
            zmoe::kernels::launch_decode_attention(p, stream);
    };
    launch(0);  // outside the capture: sets the kernel's shared-memory limit
    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));

    const int32_t launches = std::max(r.copies, 16);
    // The median time of one graph of `launches` rounds of body(i).
    auto graph_ms = [&](auto&& body) {
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        ZMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int32_t i = 0; i < launches; ++i) body(i);
        ZMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        ZMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        const double ms = event_median_ms([&] { ZMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, stream, iters);
        ZMOE_CUDA_CHECK(cudaGraphExecDestroy(exec));
        ZMOE_CUDA_CHECK(cudaGraphDestroy(graph));
        return ms;
    };
    r.ms = graph_ms([&](int32_t i) { launch(i % r.copies); }) / launches;
    if (isolated) {
        auto separator = [&] {
            separator_kernel<<<1, 1, 0, stream>>>();
            ZMOE_CUDA_CHECK(cudaGetLastError());
        };
        const double both = graph_ms([&](int32_t i) {
            separator();
            launch(i % r.copies);
        });
        const double alone = graph_ms([&](int32_t) { separator(); });
        r.alone_ms = (both - alone) / launches;
    }
    r.bytes = double(batch) * (double(context) * kKvHeads * kHeadDim * 2 * sizeof(bf16) +
                               2.0 * kQHeads * kHeadDim * sizeof(bf16) + blocks_per_seq * 4.0);

    for (void* p : {(void*)d_tables, (void*)d_start, (void*)workspace}) ZMOE_CUDA_CHECK(cudaFree(p));
    return r;
}

/// Device-to-device copy of 1 GiB, bytes read + written per second (the median of 10 copies).
double copy_bandwidth(cudaStream_t stream) {
    const size_t n = size_t(1) << 30;
    char* src = device_alloc<char>(n);
    char* dst = device_alloc<char>(n);
    ZMOE_CUDA_CHECK(cudaMemsetAsync(src, 1, n, stream));
    const double ms = event_median_ms(
        [&] { ZMOE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream)); }, stream, 10);
    ZMOE_CUDA_CHECK(cudaFree(src));
    ZMOE_CUDA_CHECK(cudaFree(dst));
    return 2.0 * double(n) / (ms * 1e-3);
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int32_t> batches{1, 64, 256}, contexts{128, 1024, 4096}, splits, stages;
    int iters = 20, max_kv_len = 0;
    bool isolated = false;
    std::string peer, json;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "--batches" && has_value)
            batches = parse_list(argv[++i]);
        else if (a == "--contexts" && has_value)
            contexts = parse_list(argv[++i]);
        else if (a == "--iters" && has_value)
            iters = std::max(1, std::stoi(argv[++i]));
        else if (a == "--splits" && has_value)
            splits = parse_list(argv[++i]);
        else if (a == "--stages" && has_value)
            stages = parse_list(argv[++i]);
        else if (a == "--max-kv-len" && has_value)
            max_kv_len = std::stoi(argv[++i]);
        else if (a == "--isolated")
            isolated = true;
        else if (a == "--peer" && has_value)
            peer = argv[++i];
        else if (a == "--json" && has_value)
            json = argv[++i];
        else {
            std::fprintf(stderr,
                         "usage: %s [--batches 1,64,256] [--contexts 128,1024,4096] [--iters N] [--splits LIST] "
                         "[--stages LIST] [--max-kv-len N] [--isolated] [--peer CMD] [--json PATH]\n",
                         argv[0]);
            return 2;
        }
    }
    cudaStream_t stream;
    ZMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaDeviceProp prop{};
    ZMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const double bandwidth = copy_bandwidth(stream);

    const int32_t slots = zmoe::kernels::decode_attention_slots(kQHeads, kKvHeads, kHeadDim);
    std::vector<row> rows;
    for (int32_t b : batches)
        for (int32_t c : contexts) {
            const int32_t chosen =
                zmoe::kernels::decode_attention_splits(b, kKvHeads, max_kv_len > 0 ? max_kv_len : c, slots);
            rows.push_back(measure(b, c, chosen, 0, true, iters, isolated, stream));
            for (int32_t st : stages) rows.push_back(measure(b, c, chosen, st, false, iters, isolated, stream));
            for (int32_t s : splits)
                if (s != chosen) rows.push_back(measure(b, c, s, 0, false, iters, isolated, stream));
        }
    for (row& r : rows) r.floor_ms = r.bytes / bandwidth * 1e3;

    std::string peer_name;
    if (!peer.empty()) {
        const bool ok = zmoe::bench::run_peer(peer, [&](const char* line) {
            int32_t b = 0, c = 0;
            double ms = 0;
            char extra = 0;
            if (std::sscanf(line, "%d %d %lf %c", &b, &c, &ms, &extra) == 3) {
                for (row& r : rows)
                    if (r.batch == b && r.context == c) r.peer_ms = ms;
            } else {
                std::printf("peer: %s", line);
                if (peer_name.empty()) peer_name = std::string(line, std::strcspn(line, "\n\"\\"));
            }
        });
        if (!ok) std::fprintf(stderr, "decode_attention_bench: the peer failed: %s\n", peer.c_str());
    }

    std::printf(
        "\ndecode attention, %d query / %d KV heads of %d, BF16, block size %d, on %s; copy bandwidth %.0f GB/s; %d "
        "block slots\n",
        kQHeads, kKvHeads, kHeadDim, kBlockSize, prop.name, bandwidth * 1e-9, slots);
    std::printf("%6s %8s %7s %8s %6s %10s %10s %10s %10s %7s %9s %8s\n", "batch", "context", "copies", "splits",
                "stages", "zmoe us", "alone us", "floor us", "peer us", "floor%", "GB/s", "vs peer");
    for (const row& r : rows) {
        char vs[16] = "-", peer_us[16] = "-";
        if (r.peer_ms > 0) {
            std::snprintf(vs, sizeof vs, "%.2fx", r.peer_ms / r.ms);
            std::snprintf(peer_us, sizeof peer_us, "%.2f", r.peer_ms * 1e3);
        }
        char alone_us[16] = "-";
        if (r.alone_ms >= 0) std::snprintf(alone_us, sizeof alone_us, "%.2f", r.alone_ms * 1e3);
        char stages_s[16] = "auto";
        if (r.stages > 0) std::snprintf(stages_s, sizeof stages_s, "%d", r.stages);
        std::printf("%6d %8d %7d %7d%c %6s %10.2f %10s %10.2f %10s %6.0f%% %9.0f %8s\n", r.batch, r.context, r.copies,
                    r.splits, r.automatic ? '*' : ' ', stages_s, r.ms * 1e3, alone_us, r.floor_ms * 1e3, peer_us,
                    100.0 * r.floor_ms / r.ms, r.bytes / r.ms * 1e-6, vs);
    }
    std::printf(
        "(splits *: the decode step's choice; floor: K + V + query + output + block-table bytes at the copy "
        "bandwidth; alone: --isolated, no overlap with the launch before; vs peer: peer time / zmoe's, > 1 means zmoe "
        "is faster)\n");

    if (!json.empty()) {
        std::ofstream f(json);
        f << "{\"bench\":\"decode_attention\",\"device\":\"" << prop.name << "\",\"shape\":{\"num_q_heads\":" << kQHeads
          << ",\"num_kv_heads\":" << kKvHeads << ",\"head_dim\":" << kHeadDim << ",\"block_size\":" << kBlockSize
          << ",\"dtype\":\"bf16\"},\"copy_bytes_per_s\":" << bandwidth << ",\"block_slots\":" << slots
          << ",\"iters\":" << iters << ",\"peer\":\"" << peer_name << "\",\"rows\":[";
        for (size_t i = 0; i < rows.size(); ++i) {
            const row& r = rows[i];
            f << (i ? "," : "") << "{\"batch\":" << r.batch << ",\"context\":" << r.context
              << ",\"copies\":" << r.copies << ",\"num_splits\":" << r.splits << ",\"num_stages\":" << r.stages
              << ",\"automatic\":" << (r.automatic ? "true" : "false") << ",\"ms\":" << r.ms << ",\"bytes\":" << r.bytes
              << ",\"floor_ms\":" << r.floor_ms << ",\"peer_ms\":" << r.peer_ms << ",\"alone_ms\":" << r.alone_ms
              << "}";
        }
        f << "]}\n";
        std::printf("wrote %s\n", json.c_str());
    }
    ZMOE_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
}
