// The decode step's dense GEMVs at Qwen3-30B-A3B shapes: launch_gemv_bf16 against cuBLASLt (launch_gemm_bf16, the
// peer) and the floor (the bytes moved at the device's copy bandwidth, measured in the same run).
//
// Each shape runs as the step runs it: a CUDA graph of `layers` launches back to back (one per layer), each on its
// own copy of the weights (so that no launch finds its weights in L2), replayed --iters times; the median replay
// over `layers` is the time per launch. Rows: gemv (launch_gemv_bf16, programmatically dependent launches as in the
// step), skinny (launch_skinny_gemm_bf16, the tensor-core path for up to 64 rows, with its own split choice; and
// skinny_sN with N CTAs per cluster for each N of --splits) and cublaslt (launch_gemm_bf16). Each variant runs where
// it supports m. TB/s = weight bytes / time; floor = (weights + x + y bytes) / copy bandwidth (device-to-device
// copies, bytes read + written, best of 6).
//
//   gemv_bench [--rows 1,2,4,8] [--splits 2,4,8] [--shapes qkv,o,router,lm_head] [--iters N] [--json PATH]

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "base/stats.hpp"
#include "bench/kernels/bench_util.cuh"
#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace {

using zmoe::bench::device_alloc;
using zmoe::bench::fill;
using zmoe::bench::parse_list;
using zmoe::kernels::bf16;

/// Median ms of `iters` replays of a graph holding what `enqueue` launches on `stream`.
double time_graph_ms(const std::function<void()>& enqueue, cudaStream_t stream, int iters) {
    enqueue();  // outside the capture: attributes, cuBLASLt plans
    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ZMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    enqueue();
    ZMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    ZMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t a = nullptr, b = nullptr;
    ZMOE_CUDA_CHECK(cudaEventCreate(&a));
    ZMOE_CUDA_CHECK(cudaEventCreate(&b));
    std::vector<double> ms;
    for (int i = 0; i < iters + 3; ++i) {
        ZMOE_CUDA_CHECK(cudaEventRecord(a, stream));
        ZMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        ZMOE_CUDA_CHECK(cudaEventRecord(b, stream));
        ZMOE_CUDA_CHECK(cudaEventSynchronize(b));
        float t = 0;
        ZMOE_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
        if (i >= 3) ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return zmoe::median(ms);
}

double copy_bandwidth(cudaStream_t stream) {
    const size_t n = size_t(1) << 30;
    void* src = device_alloc<char>(n);
    void* dst = device_alloc<char>(n);
    ZMOE_CUDA_CHECK(cudaMemsetAsync(src, 1, n, stream));
    cudaEvent_t a = nullptr, b = nullptr;
    ZMOE_CUDA_CHECK(cudaEventCreate(&a));
    ZMOE_CUDA_CHECK(cudaEventCreate(&b));
    double best = 0;
    for (int i = 0; i < 6; ++i) {
        ZMOE_CUDA_CHECK(cudaEventRecord(a, stream));
        ZMOE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
        ZMOE_CUDA_CHECK(cudaEventRecord(b, stream));
        ZMOE_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        ZMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        if (i > 0) best = std::max(best, 2.0 * double(n) / (ms * 1e-3));
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    ZMOE_CUDA_CHECK(cudaFree(src));
    ZMOE_CUDA_CHECK(cudaFree(dst));
    return best;
}

struct shape {
    const char* name;
    int32_t n, k;
    bool f32;
};

}  // namespace

int main(int argc, char** argv) {
    std::vector<int32_t> rows = {1, 2, 4, 8};
    std::vector<int32_t> splits;
    std::string only;  // comma-separated shape names, empty: all
    int iters = 20;
    std::string json_path;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--rows" && i + 1 < argc)
            rows = parse_list(argv[++i]);
        else if (a == "--splits" && i + 1 < argc)
            splits = parse_list(argv[++i]);
        else if (a == "--shapes" && i + 1 < argc)
            only = "," + std::string(argv[++i]) + ",";
        else if (a == "--iters" && i + 1 < argc)
            iters = std::stoi(argv[++i]);
        else if (a == "--json" && i + 1 < argc)
            json_path = argv[++i];
        else
            return std::fprintf(stderr,
                                "usage: gemv_bench [--rows 1,2,4,8] [--splits 2,4,8] [--shapes qkv,o,router,lm_head] "
                                "[--iters N] [--json PATH]\n"),
                   2;
    }
    // Qwen3-30B-A3B: hidden 2048, 32 query / 4 KV heads of 128, 128 experts, vocabulary 151 669.
    constexpr int32_t kHidden = 2048, kHq = 32, kHkv = 4, kHd = 128;
    const std::vector<shape> shapes = {{"qkv", (kHq + 2 * kHkv) * kHd, kHidden, false},
                                       {"o", kHidden, kHq * kHd, false},
                                       {"router", 128, kHidden, true},
                                       {"lm_head", 151669, kHidden, true}};
    cudaStream_t stream = nullptr;
    ZMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasLtHandle_t blas = nullptr;
    ZMOE_CUBLAS_CHECK(cublasLtCreate(&blas));
    const size_t blas_ws_bytes = 32u << 20;
    void* blas_ws = device_alloc<char>(blas_ws_bytes);
    cudaDeviceProp prop{};
    ZMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const double bw = copy_bandwidth(stream);
    std::printf("device %s, copy bandwidth %.0f GB/s (read + write)\n", prop.name, bw / 1e9);

    const int32_t max_m = *std::max_element(rows.begin(), rows.end());
    bf16* x = device_alloc<bf16>(size_t(max_m) * kHq * kHd);
    fill(x, size_t(max_m) * kHq * kHd, 1.f, 1);

    std::ostringstream json;
    json << "{\"device\": \"" << prop.name << "\", \"copy_bytes_per_s\": " << bw << ", \"rows\": [";
    bool first_row = true;
    std::printf("%-8s %3s %-10s %8s %7s %9s %7s\n", "shape", "m", "variant", "us", "TB/s", "floor us", "floor%");
    for (const shape& sh : shapes) {
        if (!only.empty() && only.find("," + std::string(sh.name) + ",") == std::string::npos) continue;
        const size_t w_elems = size_t(sh.n) * sh.k, w_bytes = w_elems * sizeof(bf16);
        // As many weight copies as one step has layers, fewer where they would not fit next to each other in 4 GB.
        const int layers = int(std::clamp<size_t>((size_t(4) << 30) / w_bytes, 1, 48));
        std::vector<bf16*> w(layers);
        for (int l = 0; l < layers; ++l) {
            w[l] = device_alloc<bf16>(w_elems);
            fill(w[l], w_elems, 1.f / std::sqrt(float(sh.k)), 100 + l);
        }
        void* y = device_alloc<float>(size_t(max_m) * sh.n);
        for (int32_t m : rows) {
            const size_t y_bytes = size_t(m) * sh.n * (sh.f32 ? 4 : 2);
            const double floor_us = double(w_bytes + size_t(m) * sh.k * 2 + y_bytes) / bw * 1e6;
            std::vector<std::pair<std::string, std::function<void(int)>>> variants;
            if (zmoe::kernels::gemv_bf16_supported(m, sh.n, sh.k))
                variants.emplace_back("gemv", [&](int l) {
                    zmoe::kernels::launch_gemv_bf16(
                        {.x = x, .w = w[l], .y = y, .m = m, .n = sh.n, .k = sh.k, .y_fp32 = sh.f32}, stream);
                });
            if (zmoe::kernels::skinny_gemm_bf16_supported(m, sh.n, sh.k)) {
                std::vector<int32_t> split_list = {0};
                split_list.insert(split_list.end(), splits.begin(), splits.end());
                for (int32_t sp : split_list)
                    variants.emplace_back(sp == 0 ? std::string("skinny") : "skinny_s" + std::to_string(sp),
                                          [&, sp](int l) {
                                              zmoe::kernels::launch_skinny_gemm_bf16({.x = x,
                                                                                      .w = w[l],
                                                                                      .y = y,
                                                                                      .m = m,
                                                                                      .n = sh.n,
                                                                                      .k = sh.k,
                                                                                      .y_fp32 = sh.f32,
                                                                                      .splits = sp},
                                                                                     stream);
                                          });
            }
            variants.emplace_back("cublaslt", [&](int l) {
                zmoe::kernels::launch_gemm_bf16({.handle = blas,
                                                 .workspace = blas_ws,
                                                 .workspace_bytes = blas_ws_bytes,
                                                 .x = x,
                                                 .w = w[l],
                                                 .y = y,
                                                 .m = m,
                                                 .n = sh.n,
                                                 .k = sh.k,
                                                 .y_fp32 = sh.f32},
                                                stream);
            });
            for (const auto& [name, launch] : variants) {
                const double ms = time_graph_ms(
                    [&] {
                        for (int l = 0; l < layers; ++l) launch(l);
                    },
                    stream, iters);
                const double us = ms * 1e3 / layers;
                const double tbs = double(w_bytes) / (us * 1e-6) / 1e12;
                std::printf("%-8s %3d %-10s %8.2f %7.2f %9.2f %6.0f%%\n", sh.name, m, name.c_str(), us, tbs, floor_us,
                            100.0 * floor_us / us);
                json << (first_row ? "" : ", ") << "{\"shape\": \"" << sh.name << "\", \"m\": " << m
                     << ", \"n\": " << sh.n << ", \"k\": " << sh.k << ", \"variant\": \"" << name
                     << "\", \"layers\": " << layers << ", \"us\": " << us << ", \"weight_tb_per_s\": " << tbs
                     << ", \"floor_us\": " << floor_us << "}";
                first_row = false;
            }
        }
        for (bf16* p : w) ZMOE_CUDA_CHECK(cudaFree(p));
        ZMOE_CUDA_CHECK(cudaFree(y));
    }
    json << "]}\n";
    if (!json_path.empty()) std::ofstream(json_path) << json.str();
    cublasLtDestroy(blas);
    return 0;
}
