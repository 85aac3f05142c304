#pragma once
// BF16 as raw bits on the host, for the CPU references: round-to-nearest-even conversion, as CUDA's
// __float2bfloat16 does.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zmoe::kernels::ref {

using bf16_bits = uint16_t;

inline float bf16_to_float(bf16_bits b) { return std::bit_cast<float>(uint32_t(b) << 16); }

inline bf16_bits float_to_bf16(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_bits((u >> 16) | 0x40);  // NaN stays a quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return bf16_bits(u >> 16);
}

/// The value after a round trip through BF16: what a kernel that stores an intermediate in BF16 sees.
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

inline std::vector<float> to_float(const std::vector<bf16_bits>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(v[i]);
    return out;
}

}  // namespace zmoe::kernels::ref
