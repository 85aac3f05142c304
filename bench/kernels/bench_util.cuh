#pragma once
// Helpers shared by the kernel benchmarks: device allocation, random BF16 fills (never zeros: they can run faster
// than real data) and the comma-separated size lists of the command lines.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

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

}  // namespace zmoe::bench
