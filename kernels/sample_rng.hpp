#pragma once
// The counter-based random numbers of sampling, shared by the CUDA kernel and its CPU reference so that both
// draw the same uniforms: a pure function of (seed, counter, token index), no state.

#include <cstdint>

#if defined(__CUDACC__)
#define ZMOE_HOST_DEVICE __host__ __device__
#else
#define ZMOE_HOST_DEVICE
#endif

namespace zmoe::kernels {

/// splitmix64's finaliser: a bijection on 64 bits with full avalanche.
ZMOE_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/// Uniform in the open interval (0, 1) with 24 random bits, exactly representable in fp32.
ZMOE_HOST_DEVICE inline float sample_uniform(uint64_t seed, uint32_t counter, uint32_t index) {
    const uint64_t h = mix64(mix64(seed ^ 0x9e3779b97f4a7c15ull) + ((uint64_t(counter) << 32) | index));
    return (float(uint32_t(h >> 40)) + 0.5f) * (1.0f / 16777216.0f);
}

}  // namespace zmoe::kernels
