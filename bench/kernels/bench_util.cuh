#pragma once
// Helpers shared by the kernel benchmarks: device allocation, random BF16 fills (never zeros: they can run faster
// than real data) and the comma-separated size lists of the command lines; then the attention benchmarks' own.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/stats.hpp"
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
