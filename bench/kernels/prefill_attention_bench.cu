// Prefill attention (launch_paged_attention) at Qwen3-30B-A3B's attention shape (--shape qwen3: 32 query / 4 KV heads
// of 128) or DeepSeek's expanded MLA prefill (--shape dsv2: 16 heads, no GQA, Q/K 192, V 128, as DeepSeek-V2-Lite;
// --shape dsv3: 128 such heads), BF16, causal, one sequence per length. Three layouts per length S:
//   contiguous: the whole KV in one cache block (block size = S), queries at positions 0..S-1;
//   paged:      16-key blocks (--paged-block: DeepSeek's expanded rows come in blocks of 64) in shuffled physical
//               order, queries at 0..S-1;
//   prefix:     paged blocks, shuffled, with a cached prefix of --prefix keys: S queries at positions P..P+S-1
//               attending to all P cached keys and causally to their own.
// Each time is the median of --iters launches (events around each launch, two warm-up launches first). FLOPs count
// QK^T and PV, causal half of the square, as the peer (../shared/peers/attention_prefill_peer.py) counts them:
// 2 * S^2 * H * (D + Dv) / 2, plus 2 * S * P * H * (D + Dv) for the prefix (D = Dv: 4 * H * D * (S^2 / 2 + S P)).
// Beside them: the device's BF16 matrix rate, measured in the same run (cuBLASLt, 8192^3, median of 20), so that each
// rate reads as a fraction of the chip. Each shape runs on each kernel of --impls: mma (mma.sync), wgmma_64 / wgmma_128
// (the Hopper kernel over 64- or 128-row work items), automatic (what launch_paged_attention runs for the executor: ws
// on Hopper), ws* (the warp-specialised kernel's variants, detail::paged_attention_ws_variants).
//
// usage: prefill_attention_bench [--seqs 1024,2048,4096,8192,16384,32768] [--prefix 4096] [--layouts
//                                contiguous,paged,prefix] [--impls mma,wgmma_64,wgmma_128,automatic] [--iters 10]
//                                [--shape qwen3|dsv2|dsv3] [--paged-block 16] [--json PATH] [--peer CMD]
// (dsv2 / dsv3 take mma, automatic and the ws* variants: the wgmma_* kernels have no separate V head dim.)
// --peer CMD runs after the measurements and its output is echoed (../shared/peers/attention_prefill_peer.py).

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/stats.hpp"
#include "bench/kernels/bench_util.cuh"
#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/paged_attention_sm90.hpp"

namespace {

using zmoe::bench::attention_buffers;
using zmoe::bench::device_alloc;
using zmoe::bench::event_median_ms;
using zmoe::bench::fill;
using zmoe::bench::parse_list;
using zmoe::bench::upload_ints;
using zmoe::kernels::bf16;

int32_t g_paged_block = 16;

/// The attention shape measured: heads, Q/K head dim, V (and output) head dim.
struct attention_shape {
    std::string name;
    int32_t q_heads, kv_heads, head_dim, v_dim;
};
const std::vector<attention_shape> kShapes{
    {"qwen3", 32, 4, 128, 128},  // Qwen3-30B-A3B
    {"dsv2", 16, 16, 192, 128},  // DeepSeek-V2-Lite's expanded MLA prefill
    {"dsv3", 128, 128, 192, 128},
};
attention_shape g_shape = kShapes[0];

struct row {
    std::string layout, impl;
    int32_t seq = 0, prefix = 0, block_size = 0;
    double ms = 0, flops = 0;
};

/// The kernels --impls names: mma, wgmma_64 and wgmma_128 (the wgmma kernel over 64- or 128-row items), automatic
/// (launch_paged_attention's choice with the rows per item paged_attention_rows_per_item gives, as the executor).
/// ws*: the warp-specialised kernel's variants (detail::paged_attention_ws_variants), over 128-row items.
const std::vector<std::string> kImplNames{"mma",       "wgmma_64", "wgmma_128",     "automatic", "ws",
                                          "ws_panels", "ws_k3",    "ws_2",          "ws_box128", "ws_stride",
                                          "ws_tail8",  "ws_split", "ws_split_tail8"};

bool is_ws(const std::string& impl) { return impl.starts_with("ws"); }

int32_t rows_per_item(const std::string& impl) {
    if (impl == "automatic") {
        const int32_t v = g_shape.v_dim == g_shape.head_dim ? 0 : g_shape.v_dim;
        return zmoe::kernels::paged_attention_rows_per_item(g_shape.head_dim, v);
    }
    return impl == "wgmma_128" || is_ws(impl) ? 128 : 64;
}

zmoe::kernels::paged_attention_impl impl_of(const std::string& impl) {
    using zmoe::kernels::paged_attention_impl;
    return impl == "mma"               ? paged_attention_impl::mma
           : impl.starts_with("wgmma") ? paged_attention_impl::wgmma
                                       : paged_attention_impl::automatic;
}

row measure(const std::string& layout, const std::string& impl, int32_t seq, int32_t prefix, int iters,
            cudaStream_t stream) {
    row r{.layout = layout, .impl = impl, .seq = seq, .prefix = layout == "prefix" ? prefix : 0};
    const int32_t q_heads = g_shape.q_heads, kv_heads = g_shape.kv_heads, head_dim = g_shape.head_dim;
    const int32_t v_dim = g_shape.v_dim;
    const int32_t kv_len = r.prefix + seq;
    r.block_size = layout == "contiguous" ? kv_len : g_paged_block;
    const int32_t blocks = (kv_len + r.block_size - 1) / r.block_size;
    // K and V buffers of the same size (V uses v_dim of each slot and head: its first v_dim / head_dim).
    const size_t cache_elems = size_t(blocks) * r.block_size * kv_heads * head_dim;
    const size_t q_elems = size_t(seq) * q_heads * head_dim, out_elems = size_t(seq) * q_heads * v_dim;

    const attention_buffers buf(q_elems, cache_elems, stream);
    const std::vector<int32_t> table = zmoe::bench::shuffled_blocks(blocks, uint32_t(seq * 7 + r.prefix));
    const std::vector<int32_t> query_start{0, seq}, start_pos{r.prefix};
    const auto items = zmoe::kernels::paged_attention_plan(query_start, q_heads, kv_heads, rows_per_item(impl));
    int32_t* d_table = upload_ints(table);
    int32_t* d_qs = upload_ints(query_start);
    int32_t* d_sp = upload_ints(start_pos);
    int32_t* d_items = upload_ints(items);

    const zmoe::kernels::paged_attention_params p{.q = buf.q,
                                                  .k_cache = buf.k_cache,
                                                  .v_cache = buf.v_cache,
                                                  .block_tables = d_table,
                                                  .query_start = d_qs,
                                                  .start_pos = d_sp,
                                                  .work_items = d_items,
                                                  .out = buf.out,
                                                  .num_seqs = 1,
                                                  .num_work_items = int32_t(items.size() / 2),
                                                  .num_q_heads = q_heads,
                                                  .num_kv_heads = kv_heads,
                                                  .head_dim = head_dim,
                                                  .block_size = r.block_size,
                                                  .max_blocks_per_seq = blocks,
                                                  .scale = 1.f / std::sqrt(float(head_dim)),
                                                  .impl = impl_of(impl),
                                                  .rows_per_item = rows_per_item(impl),
                                                  .v_head_dim = v_dim == head_dim ? 0 : v_dim};
    r.ms = event_median_ms(
        [&] {
            if (is_ws(impl))
                zmoe::kernels::detail::launch_paged_attention_ws(p, impl, stream);
            else
                zmoe::kernels::launch_paged_attention(p, stream);
        },
        stream, iters);
    r.flops = 2.0 * q_heads * (head_dim + v_dim) * (double(seq) * seq / 2 + double(seq) * r.prefix);

    // Every output element written and finite (the tests check the values against the CPU reference).
    std::vector<uint16_t> host(out_elems);
    ZMOE_CUDA_CHECK(cudaMemcpy(host.data(), buf.out, out_elems * 2, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (uint16_t h : host) bad += (h & 0x7f80u) == 0x7f80u;  // inf or NaN exponent
    if (bad)
        std::fprintf(stderr, "prefill_attention_bench: %zu non-finite outputs (%s, %d)\n", bad, layout.c_str(), seq);

    for (void* ptr : {(void*)d_table, (void*)d_qs, (void*)d_sp, (void*)d_items}) ZMOE_CUDA_CHECK(cudaFree(ptr));
    return r;
}

/// cuBLASLt BF16 GEMM 8192^3 (fp32 accumulate), FLOP/s: the median of 20 after warm-up, on random inputs.
double gemm_peak(cudaStream_t stream) {
    const int32_t n = 8192;
    bf16* x = device_alloc<bf16>(size_t(n) * n);
    bf16* w = device_alloc<bf16>(size_t(n) * n);
    bf16* y = device_alloc<bf16>(size_t(n) * n);
    fill(x, size_t(n) * n, 1.f, 11, stream);
    fill(w, size_t(n) * n, 1.f, 12, stream);
    const size_t ws_bytes = size_t(64) << 20;
    void* ws = device_alloc<char>(ws_bytes);
    cublasLtHandle_t handle;
    ZMOE_CUBLAS_CHECK(cublasLtCreate(&handle));
    const zmoe::kernels::gemm_bf16_params g{
        .handle = handle, .workspace = ws, .workspace_bytes = ws_bytes, .x = x, .w = w, .y = y, .m = n, .n = n, .k = n};
    const double ms = event_median_ms([&] { zmoe::kernels::launch_gemm_bf16(g, stream); }, stream, 20);
    ZMOE_CUBLAS_CHECK(cublasLtDestroy(handle));
    for (void* ptr : {(void*)x, (void*)w, (void*)y, ws}) ZMOE_CUDA_CHECK(cudaFree(ptr));
    return 2.0 * n * double(n) * n / (ms * 1e-3);
}

std::vector<std::string> parse_names(const std::string& s) {
    std::vector<std::string> out;
    for (size_t b = 0; b <= s.size();) {
        const size_t e = std::min(s.find(',', b), s.size());
        if (e > b) out.push_back(s.substr(b, e - b));
        b = e + 1;
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int32_t> seqs{1024, 2048, 4096, 8192, 16384, 32768};
    std::vector<std::string> layouts{"contiguous", "paged", "prefix"}, impls{"mma", "wgmma_64", "wgmma_128"};
    int32_t prefix = 4096;
    int iters = 10;
    std::string json, peer;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "--seqs" && has_value) {
            seqs = parse_list(argv[++i]);
        } else if (a == "--prefix" && has_value) {
            prefix = std::max(0, std::stoi(argv[++i]));
        } else if (a == "--layouts" && has_value) {
            layouts = parse_names(argv[++i]);
        } else if (a == "--impls" && has_value) {
            impls = parse_names(argv[++i]);
        } else if (a == "--iters" && has_value) {
            iters = std::max(1, std::stoi(argv[++i]));
        } else if (a == "--shape" && has_value) {
            const std::string name = argv[++i];
            const auto it =
                std::find_if(kShapes.begin(), kShapes.end(), [&](const attention_shape& s) { return s.name == name; });
            if (it == kShapes.end()) {
                std::fprintf(stderr, "prefill_attention_bench: unknown shape '%s' (qwen3, dsv2, dsv3)\n", name.c_str());
                return 2;
            }
            g_shape = *it;
        } else if (a == "--paged-block" && has_value) {
            g_paged_block = std::max(1, std::stoi(argv[++i]));
        } else if (a == "--json" && has_value) {
            json = argv[++i];
        } else if (a == "--peer" && has_value) {
            peer = argv[++i];
        } else {
            std::fprintf(stderr,
                         "usage: %s [--seqs 1024,...,32768] [--prefix 4096] [--layouts contiguous,paged,prefix] "
                         "[--impls mma,wgmma_64,wgmma_128,automatic,ws,...] [--iters N] [--shape qwen3|dsv2|dsv3] "
                         "[--paged-block N] [--json PATH] [--peer CMD]\n",
                         argv[0]);
            return 2;
        }
    }
    for (const auto& l : layouts)
        if (l != "contiguous" && l != "paged" && l != "prefix") {
            std::fprintf(stderr, "prefill_attention_bench: unknown layout '%s' (contiguous, paged, prefix)\n",
                         l.c_str());
            return 2;
        }
    for (const auto& m : impls)
        if (std::find(kImplNames.begin(), kImplNames.end(), m) == kImplNames.end()) {
            std::fprintf(stderr, "prefill_attention_bench: unknown impl '%s' (see kImplNames)\n", m.c_str());
            return 2;
        }
    for (const auto& m : impls)
        if (g_shape.v_dim != g_shape.head_dim && m.starts_with("wgmma")) {
            std::fprintf(stderr, "prefill_attention_bench: impl '%s' has no separate V head dim (shape %s)\n",
                         m.c_str(), g_shape.name.c_str());
            return 2;
        }
    cudaStream_t stream;
    ZMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaDeviceProp prop{};
    ZMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const double peak = gemm_peak(stream);

    std::vector<row> rows;
    // Kernel by kernel (each row printed as it is measured), in --impls order.
    for (const auto& m : impls)
        for (int32_t s : seqs)
            for (const auto& l : layouts) {
                rows.push_back(measure(l, m, s, prefix, iters, stream));
                const row& r = rows.back();
                std::printf("measured %s %s %d: %.3f ms, %.1f TFLOP/s\n", r.impl.c_str(), r.layout.c_str(), r.seq, r.ms,
                            r.flops / r.ms * 1e-9);
                std::fflush(stdout);
            }

    std::printf(
        "\nprefill attention (%s), causal, %d query / %d KV heads of %d (V %d), BF16, on %s; cuBLASLt BF16 8192^3: "
        "%.0f TFLOP/s\n",
        g_shape.name.c_str(), g_shape.q_heads, g_shape.kv_heads, g_shape.head_dim, g_shape.v_dim, prop.name,
        peak * 1e-12);
    std::printf("%-11s %-19s %7s %7s %6s %10s %9s %7s\n", "layout", "impl", "seq", "prefix", "block", "ms", "TFLOP/s",
                "%peak");
    for (const row& r : rows)
        std::printf("%-11s %-19s %7d %7d %6d %10.3f %9.1f %6.1f%%\n", r.layout.c_str(), r.impl.c_str(), r.seq, r.prefix,
                    r.block_size, r.ms, r.flops / r.ms * 1e-9, 100.0 * r.flops / (r.ms * 1e-3) / peak);
    std::printf("(FLOPs = 2 * H * (D + Dv) * (S^2 / 2 + S * prefix), H = %d query heads, as the peer counts them)\n",
                g_shape.q_heads);
    if (!peer.empty() && !zmoe::bench::run_peer(peer, [](const char* line) { std::printf("peer: %s", line); }))
        std::fprintf(stderr, "prefill_attention_bench: the peer failed: %s\n", peer.c_str());

    if (!json.empty()) {
        std::ofstream f(json);
        f << "{\"bench\":\"prefill_attention\",\"device\":\"" << prop.name << "\",\"shape\":{\"name\":\""
          << g_shape.name << "\",\"num_q_heads\":" << g_shape.q_heads << ",\"num_kv_heads\":" << g_shape.kv_heads
          << ",\"head_dim\":" << g_shape.head_dim << ",\"v_head_dim\":" << g_shape.v_dim
          << ",\"dtype\":\"bf16\",\"causal\":true},\"gemm_peak_flops\":" << peak << ",\"iters\":" << iters
          << ",\"rows\":[";
        for (size_t i = 0; i < rows.size(); ++i) {
            const row& r = rows[i];
            f << (i ? "," : "") << "{\"layout\":\"" << r.layout << "\",\"impl\":\"" << r.impl << "\",\"seq\":" << r.seq
              << ",\"prefix\":" << r.prefix << ",\"block_size\":" << r.block_size << ",\"ms\":" << r.ms
              << ",\"flops\":" << r.flops << ",\"tflops\":" << r.flops / r.ms * 1e-9 << "}";
        }
        f << "]}\n";
        std::printf("wrote %s\n", json.c_str());
    }
    ZMOE_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
}
