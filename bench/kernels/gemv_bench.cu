// The decode step's dense GEMVs at Qwen3-30B-A3B shapes: launch_gemv_bf16 against cuBLASLt (launch_gemm_bf16, the
// peer) and the floor (the bytes moved at the device's copy bandwidth, measured in the same run).
//
// Each shape runs as the step runs it: a CUDA graph of `layers` launches back to back (one per layer), each on its
// own copy of the weights (so that no launch finds its weights in L2), replayed --iters times; the median replay
// over `layers` is the time per launch. Rows:
//   gemv            launch_gemv_bf16 alone (programmatically dependent launches, as in the step)
//   norm+gemv       launch_rms_norm then launch_gemv_bf16 (the unfused QKV of a layer)
//   gemv(norm)      launch_gemv_bf16 with the RMSNorm fused into its prologue
//   gemv(norm,rope) the same with RoPE + q/k norm + KV write fused into its epilogue (the step's QKV)
//   norm+gemv+rope  launch_rms_norm, launch_gemv_bf16, launch_rope_qk_norm_kv (the QKV before the fusion)
//   cublaslt        launch_gemm_bf16 (no bias), the peer
// TB/s = weight bytes / time; floor = (weights + x + y bytes) / copy bandwidth.
//
//   gemv_bench [--rows 1,8] [--iters N] [--json PATH]

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

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace {

using zmoe::kernels::bf16;

__global__ void fill_kernel(bf16* p, size_t n, float scale, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        h ^= h >> 15;
        p[i] = __float2bfloat16(scale * (float(h & 0xffff) / 32768.f - 1.f));
    }
}

template <typename T>
T* device_alloc(size_t n) {
    void* p = nullptr;
    ZMOE_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    return static_cast<T*>(p);
}

void fill(bf16* p, size_t n, float scale, uint32_t seed) {
    fill_kernel<<<1024, 256>>>(p, n, scale, seed);
    ZMOE_CUDA_CHECK_LAUNCH();
}

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
    std::vector<float> ms;
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
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    return ms[ms.size() / 2];
}

double copy_bandwidth(cudaStream_t stream) {
    const size_t n = size_t(1) << 30;
    void* src = device_alloc<char>(n);
    void* dst = device_alloc<char>(n);
    ZMOE_CUDA_CHECK(cudaMemsetAsync(src, 1, n, stream));
    const double ms = time_graph_ms(
        [&] { ZMOE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream)); }, stream, 10);
    ZMOE_CUDA_CHECK(cudaFree(src));
    ZMOE_CUDA_CHECK(cudaFree(dst));
    return 2.0 * double(n) / (ms * 1e-3);
}

struct shape {
    const char* name;
    int32_t n, k;
    bool f32;
    bool qkv;  // the QKV projection: the fused norm / RoPE rows too
};

std::vector<int32_t> parse_list(const std::string& s) {
    std::vector<int32_t> v;
    std::stringstream ss(s);
    for (std::string t; std::getline(ss, t, ',');) v.push_back(std::stoi(t));
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int32_t> rows = {1, 8};
    int iters = 20;
    std::string json_path;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--rows" && i + 1 < argc)
            rows = parse_list(argv[++i]);
        else if (a == "--iters" && i + 1 < argc)
            iters = std::stoi(argv[++i]);
        else if (a == "--json" && i + 1 < argc)
            json_path = argv[++i];
        else
            return std::fprintf(stderr, "usage: gemv_bench [--rows 1,8] [--iters N] [--json PATH]\n"), 2;
    }
    // Qwen3-30B-A3B: hidden 2048, 32 query / 4 KV heads of 128, 128 experts, vocabulary 151 669.
    constexpr int32_t kHidden = 2048, kHq = 32, kHkv = 4, kHd = 128, kBlock = 16;
    const std::vector<shape> shapes = {{"qkv", (kHq + 2 * kHkv) * kHd, kHidden, false, true},
                                       {"o", kHidden, kHq * kHd, false, false},
                                       {"router", 128, kHidden, true, false},
                                       {"lm_head", 151669, kHidden, true, false}};
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

    // Inputs shared by every shape: x and its residual, norm weights, positions and slots, a KV cache.
    const int32_t max_m = *std::max_element(rows.begin(), rows.end());
    bf16* x = device_alloc<bf16>(size_t(max_m) * kHq * kHd);
    bf16* residual = device_alloc<bf16>(size_t(max_m) * kHidden);
    bf16* residual_out = device_alloc<bf16>(size_t(max_m) * kHidden);
    bf16* xn = device_alloc<bf16>(size_t(max_m) * kHidden);
    bf16* norm_w = device_alloc<bf16>(kHidden);
    bf16* qk_w = device_alloc<bf16>(kHd);
    fill(x, size_t(max_m) * kHq * kHd, 1.f, 1);
    fill(residual, size_t(max_m) * kHidden, 1.f, 2);
    fill(norm_w, kHidden, 1.f, 3);
    fill(qk_w, kHd, 1.f, 4);
    std::vector<int32_t> host_pos(max_m), host_slots(max_m);
    for (int32_t i = 0; i < max_m; ++i) host_pos[i] = 128 + i, host_slots[i] = i * kBlock;
    int32_t* positions = device_alloc<int32_t>(max_m);
    int32_t* slots = device_alloc<int32_t>(max_m);
    int32_t* counters = device_alloc<int32_t>(kHq + kHkv);
    ZMOE_CUDA_CHECK(cudaMemcpy(positions, host_pos.data(), max_m * 4, cudaMemcpyHostToDevice));
    ZMOE_CUDA_CHECK(cudaMemcpy(slots, host_slots.data(), max_m * 4, cudaMemcpyHostToDevice));
    ZMOE_CUDA_CHECK(cudaMemset(counters, 0, (kHq + kHkv) * 4));
    const size_t cache_elems = size_t(max_m) * kBlock * kHkv * kHd;
    bf16* k_cache = device_alloc<bf16>(cache_elems);
    bf16* v_cache = device_alloc<bf16>(cache_elems);
    bf16* q_out = device_alloc<bf16>(size_t(max_m) * kHq * kHd);

    std::ostringstream json;
    json << "{\"device\": \"" << prop.name << "\", \"copy_bytes_per_s\": " << bw << ", \"rows\": [";
    bool first_row = true;
    std::printf("%-8s %2s %-16s %8s %7s %9s %7s\n", "shape", "m", "variant", "us", "TB/s", "floor us", "floor%");
    for (const shape& sh : shapes) {
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
            zmoe::kernels::rope_qk_norm_kv_params rope{.positions = positions,
                                                       .slot_mapping = slots,
                                                       .q_norm_weight = qk_w,
                                                       .k_norm_weight = qk_w,
                                                       .q_out = q_out,
                                                       .k_cache = k_cache,
                                                       .v_cache = v_cache,
                                                       .num_tokens = m,
                                                       .num_q_heads = kHq,
                                                       .num_kv_heads = kHkv,
                                                       .head_dim = kHd,
                                                       .block_size = kBlock,
                                                       .rope_theta = 1e6f,
                                                       .eps = 1e-6f,
                                                       .norm = zmoe::kernels::qk_norm_mode::per_head};
            auto gemv = [&](int l, bool norm, bool fused_rope) {
                zmoe::kernels::gemv_bf16_params p{
                    .x = x, .w = w[l], .y = y, .m = m, .n = sh.n, .k = sh.k, .y_fp32 = sh.f32};
                if (norm) {
                    p.norm_weight = norm_w;
                    p.residual = residual;
                    p.residual_out = residual_out;
                }
                if (fused_rope) {
                    p.rope = rope;
                    p.rope_counters = counters;
                }
                zmoe::kernels::launch_gemv_bf16(p, stream);
            };
            auto rms = [&] {
                zmoe::kernels::launch_rms_norm({.x = x,
                                                .residual = residual,
                                                .weight = norm_w,
                                                .out = xn,
                                                .num_tokens = m,
                                                .hidden = kHidden,
                                                .eps = 1e-6f,
                                                .residual_out = residual_out},
                                               stream);
            };
            std::vector<std::pair<std::string, std::function<void(int)>>> variants;
            variants.emplace_back("gemv", [&](int l) { gemv(l, false, false); });
            if (sh.qkv) {
                variants.emplace_back("norm+gemv", [&](int l) {
                    rms();
                    gemv(l, false, false);
                });
                variants.emplace_back("gemv(norm)", [&](int l) { gemv(l, true, false); });
                variants.emplace_back("norm+gemv+rope", [&](int l) {
                    rms();
                    gemv(l, false, false);
                    rope.qkv = static_cast<const bf16*>(y);
                    zmoe::kernels::launch_rope_qk_norm_kv(rope, stream);
                });
                variants.emplace_back("gemv(norm,rope)", [&](int l) { gemv(l, true, true); });
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
                std::printf("%-8s %2d %-16s %8.2f %7.2f %9.2f %6.0f%%\n", sh.name, m, name.c_str(), us, tbs, floor_us,
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
