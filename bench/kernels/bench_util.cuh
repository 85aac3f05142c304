#pragma once
// Helpers shared by the kernel benchmarks: device allocation, random BF16 fills (never zeros: they can run faster
// than real data), the comma-separated size lists of the command lines, event timing (marks, single operations,
// CUDA graphs), the device's measured ceilings (copy bandwidth, dense BF16 GEMM rate), an MoE layer's floor, the
// peer runner and JSON string escaping of the benchmarks that compare with another engine; then the attention
// benchmarks' own.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/stats.hpp"
#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::bench {

/// out[i] = uniform in [-scale, scale) from a hash of (i, seed).
__global__ void fill_uniform(__nv_bfloat16* out, size_t n, float scale, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 0x9e3779b9u ^ seed ^ uint32_t(i >> 32) * 0x85ebca6bu;
        h ^= h >> 16;
        h *= 0x7feb352du;
        h ^= h >> 15;
        h *= 0x846ca68bu;
        h ^= h >> 16;
        out[i] = __float2bfloat16((float(h >> 8) * (1.f / 16777216.f) * 2.f - 1.f) * scale);
    }
}

/// n elements of T on the device (at least one), freed by the process's exit or cudaFree.
template <typename T>
T* device_alloc(size_t n) {
    void* p = nullptr;
    ZMOE_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    return static_cast<T*>(p);
}

inline void fill(__nv_bfloat16* p, size_t n, float scale, uint32_t seed, cudaStream_t stream = nullptr) {
    fill_uniform<<<1024, 256, 0, stream>>>(p, n, scale, seed);
    ZMOE_CUDA_CHECK_LAUNCH();
}

/// "1,8,64" -> {1, 8, 64}.
inline std::vector<int32_t> parse_list(const char* s) {
    std::vector<int32_t> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
    return out;
}

/// Runs `run(mark)` warmup times untimed, then iters times with events recorded at mark(0) .. mark(num_marks - 1)
/// (the first mark and the last bound a run); returns the median of each of the num_marks - 1 intervals and, last,
/// of the whole run.
template <typename F>
std::vector<double> time_ms(F&& run, cudaStream_t stream, int warmup, int iters, int num_marks) {
    std::vector<cudaEvent_t> events(num_marks);
    for (auto& e : events) ZMOE_CUDA_CHECK(cudaEventCreate(&e));
    const auto no_mark = [](int) {};
    for (int i = 0; i < warmup; ++i) run(no_mark);
    std::vector<std::vector<double>> ms(num_marks);
    const auto mark = [&](int i) { ZMOE_CUDA_CHECK(cudaEventRecord(events[i], stream)); };
    for (int i = 0; i < iters; ++i) {
        run(mark);
        ZMOE_CUDA_CHECK(cudaEventSynchronize(events.back()));
        for (int m = 0; m + 1 < num_marks; ++m) {
            float t = 0;
            ZMOE_CUDA_CHECK(cudaEventElapsedTime(&t, events[m], events[m + 1]));
            ms[m].push_back(t);
        }
        float t = 0;
        ZMOE_CUDA_CHECK(cudaEventElapsedTime(&t, events.front(), events.back()));
        ms.back().push_back(t);
    }
    for (auto& e : events) ZMOE_CUDA_CHECK(cudaEventDestroy(e));
    std::vector<double> out;
    for (auto& v : ms) out.push_back(zmoe::median(v));
    return out;
}

/// Median milliseconds of one enqueued operation (`run()`), timed as above.
template <typename F>
double time_op_ms(F&& run, cudaStream_t stream, int warmup, int iters) {
    return time_ms(
               [&](auto&& mark) {
                   mark(0);
                   run();
                   mark(1);
               },
               stream, warmup, iters, 2)
        .back();
}

/// Median milliseconds of a CUDA graph of what enqueue(stream) enqueues.
template <typename F>
double time_graph_ms(F&& enqueue, cudaStream_t stream, int warmup, int iters) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ZMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    enqueue(stream);
    ZMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    ZMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const double ms = time_op_ms([&] { ZMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, stream, warmup, iters);
    ZMOE_CUDA_CHECK(cudaGraphExecDestroy(exec));
    ZMOE_CUDA_CHECK(cudaGraphDestroy(graph));
    return ms;
}

/// The device's copy bandwidth, measured now: 1 GiB device to device, bytes read + written per second.
inline double copy_bytes_per_s(cudaStream_t stream) {
    const size_t bytes = size_t(1) << 30;
    void* src = device_alloc<uint8_t>(bytes);
    void* dst = device_alloc<uint8_t>(bytes);
    ZMOE_CUDA_CHECK(cudaMemsetAsync(src, 0x3c, bytes, stream));
    const double ms = time_op_ms(
        [&] { ZMOE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream)); }, stream, 3, 20);
    ZMOE_CUDA_CHECK(cudaFree(src));
    ZMOE_CUDA_CHECK(cudaFree(dst));
    return 2.0 * double(bytes) / (ms * 1e-3);
}

/// The dense BF16 GEMM rate, measured now: kernels::launch_gemm_bf16 (cuBLASLt), 8192 x 8192 x 8192, random inputs.
inline double bf16_gemm_flops_per_s(cublasLtHandle_t blas, void* workspace, size_t workspace_bytes,
                                    cudaStream_t stream) {
    constexpr int32_t kDim = 8192;
    __nv_bfloat16* x = device_alloc<__nv_bfloat16>(size_t(kDim) * kDim);
    __nv_bfloat16* w = device_alloc<__nv_bfloat16>(size_t(kDim) * kDim);
    __nv_bfloat16* y = device_alloc<__nv_bfloat16>(size_t(kDim) * kDim);
    fill(x, size_t(kDim) * kDim, 1.f, 11, stream);
    fill(w, size_t(kDim) * kDim, 0.02f, 12, stream);
    const double ms = time_op_ms(
        [&] {
            zmoe::kernels::launch_gemm_bf16({.handle = blas,
                                             .workspace = workspace,
                                             .workspace_bytes = workspace_bytes,
                                             .x = x,
                                             .w = w,
                                             .y = y,
                                             .m = kDim,
                                             .n = kDim,
                                             .k = kDim},
                                            stream);
        },
        stream, 3, 20);
    for (void* p : {static_cast<void*>(x), static_cast<void*>(w), static_cast<void*>(y)}) ZMOE_CUDA_CHECK(cudaFree(p));
    return 2.0 * double(kDim) * kDim * kDim / (ms * 1e-3);
}

/// What one MoE layer (router + routed experts) must do at `tokens` tokens: the fewest bytes (each touched expert's
/// gate, up and down weights once at weight_bytes per element plus expert_scale_bytes, the BF16 router weights, x
/// in and the output out in BF16) and the FLOPs (the experts' GEMMs on the routed rows, expert_flops, plus the
/// router's).
struct moe_layer_cost {
    double bytes = 0, flops = 0, expert_flops = 0;
};

inline moe_layer_cost moe_layer_cost_of(int32_t tokens, int32_t active_experts, int32_t experts, int32_t hidden,
                                        int32_t inter, int32_t top_k, double weight_bytes,
                                        double expert_scale_bytes = 0) {
    const double per_expert = 3.0 * hidden * inter;  // weight elements of one expert
    moe_layer_cost c;
    c.bytes = active_experts * (per_expert * weight_bytes + expert_scale_bytes) + double(experts) * hidden * 2 +
              2.0 * tokens * hidden * 2;
    c.expert_flops = 2.0 * tokens * top_k * per_expert;
    c.flops = c.expert_flops + 2.0 * tokens * hidden * experts;
    return c;
}

/// The floor in milliseconds: the bytes at bytes_per_s or the FLOPs at flops_per_s, whichever takes longer.
inline double floor_ms(double bytes, double flops, double bytes_per_s, double flops_per_s) {
    return std::max(bytes / bytes_per_s, flops / flops_per_s) * 1e3;
}

/// Runs the peer command and returns its "<tokens> <ms>" rows (lines whose first field is an integer and second a
/// number); its whole output goes to raw. `who` names the benchmark in messages.
inline std::vector<std::pair<int32_t, double>> run_peer(const std::string& cmd, std::string& raw, const char* who) {
    std::vector<std::pair<int32_t, double>> rows;
    std::fflush(stdout);
    FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) {
        std::fprintf(stderr, "%s: could not run the peer: %s\n", who, cmd.c_str());
        return rows;
    }
    char line[4096];
    while (std::fgets(line, sizeof line, pipe)) {
        raw += line;
        std::istringstream is(line);
        std::string first;
        double ms = 0;
        if (!(is >> first >> ms) || first.empty() || first.find_first_not_of("0123456789") != std::string::npos)
            continue;
        rows.emplace_back(std::stoi(first), ms);
    }
    const int rc = pclose(pipe);
    if (rc != 0) std::fprintf(stderr, "%s: the peer exited with status %d\n", who, rc);
    return rows;
}

/// s as the inside of a JSON string: quotes and backslashes escaped, newlines as \n, other control characters
/// dropped.
inline std::string json_escape(const std::string& s) {
    std::string out;
    for (const char ch : s) {
        if (ch == '"' || ch == '\\')
            out += std::string("\\") + ch;
        else if (ch == '\n')
            out += "\\n";
        else if (static_cast<unsigned char>(ch) >= 0x20)
            out += ch;
    }
    return out;
}

// ---------------------------------------------------------------------------------------------------------
// Attention benchmarks (prefill_attention_bench, decode_attention_bench): timing, block tables, buffers, the peer.

/// Milliseconds between two events around fn(), the median of `iters` runs after two warm-up runs.
template <typename Fn>
double event_median_ms(Fn&& fn, cudaStream_t stream, int iters) {
    cudaEvent_t start, stop;
    ZMOE_CUDA_CHECK(cudaEventCreate(&start));
    ZMOE_CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> ms;
    for (int i = -2; i < iters; ++i) {
        ZMOE_CUDA_CHECK(cudaEventRecord(start, stream));
        fn();
        ZMOE_CUDA_CHECK(cudaEventRecord(stop, stream));
        ZMOE_CUDA_CHECK(cudaEventSynchronize(stop));
        float t = 0;
        ZMOE_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        if (i >= 0) ms.push_back(t);
    }
    ZMOE_CUDA_CHECK(cudaEventDestroy(start));
    ZMOE_CUDA_CHECK(cudaEventDestroy(stop));
    return zmoe::median(ms);
}

/// v on the device (freed by cudaFree).
inline int32_t* upload_ints(const std::vector<int32_t>& v) {
    int32_t* d = device_alloc<int32_t>(v.size());
    if (!v.empty()) ZMOE_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    return d;
}

/// Physical block ids 0 .. n - 1 in an order shuffled by seed: block tables whose consecutive blocks are not
/// neighbours in memory.
inline std::vector<int32_t> shuffled_blocks(size_t n, uint32_t seed) {
    std::vector<int32_t> blocks(n);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(seed));
    return blocks;
}

/// The BF16 query, K and V caches and output of an attention benchmark; q, k and v random in [-1, 1) (seeds 1, 2,
/// 3), out uninitialised.
struct attention_buffers {
    __nv_bfloat16 *q = nullptr, *k_cache = nullptr, *v_cache = nullptr, *out = nullptr;

    attention_buffers(size_t q_elems, size_t cache_elems, cudaStream_t stream)
        : q(device_alloc<__nv_bfloat16>(q_elems)),
          k_cache(device_alloc<__nv_bfloat16>(cache_elems)),
          v_cache(device_alloc<__nv_bfloat16>(cache_elems)),
          out(device_alloc<__nv_bfloat16>(q_elems)) {
        fill(q, q_elems, 1.f, 1, stream);
        fill(k_cache, cache_elems, 1.f, 2, stream);
        fill(v_cache, cache_elems, 1.f, 3, stream);
    }
    attention_buffers(const attention_buffers&) = delete;
    attention_buffers& operator=(const attention_buffers&) = delete;
    ~attention_buffers() {
        for (void* p : {(void*)q, (void*)k_cache, (void*)v_cache, (void*)out}) ZMOE_CUDA_CHECK(cudaFree(p));
    }
};

/// Runs cmd (a peer benchmark, after zmoe's measurements, the GPU otherwise idle) and hands each line of its output
/// to on_line; false when it could not be started or exited with an error.
template <typename Fn>
bool run_peer(const std::string& cmd, Fn&& on_line) {
    std::fflush(stdout);
    FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) return false;
    char line[1024];
    while (std::fgets(line, sizeof line, pipe)) on_line(line);
    return pclose(pipe) == 0;
}

}  // namespace zmoe::bench
