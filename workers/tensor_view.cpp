#include "workers/tensor_view.hpp"

#include <cmath>

#include "base/check.hpp"
#include "workers/fp8.hpp"

namespace zmoe {

size_t dtype_size(dtype t) {
    switch (t) {
        case dtype::f32:
            return 4;
        case dtype::f16:
        case dtype::bf16:
            return 2;
        case dtype::f8_e4m3:
            return 1;
    }
    return 0;
}

const char* dtype_name(dtype t) {
    switch (t) {
        case dtype::f32:
            return "F32";
        case dtype::f16:
            return "F16";
        case dtype::bf16:
            return "BF16";
        case dtype::f8_e4m3:
            return "F8_E4M3";
    }
    return "?";
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        u = sign;
    } else {
        // Subnormal half: normalise the mantissa into an fp32 normal.
        int e = -1;
        do {
            ++e;
            mant <<= 1;
        } while ((mant & 0x400u) == 0);
        u = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past the largest half
    if (abs < 0x38800000u) {
        // Half subnormal (or zero): shift the implicit-one mantissa into place, rounding to nearest even.
        if (abs < 0x33000000u) return sign;
        const uint32_t e = abs >> 23;
        const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e;  // 14..24
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) ++r;
        return static_cast<uint16_t>(sign | r);
    }
    uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
}

void convert_to_f32(dtype t, const void* src, float* dst, size_t n) {
    switch (t) {
        case dtype::f32:
            std::memcpy(dst, src, n * sizeof(float));
            return;
        // Element reads go through memcpy: safetensors does not promise aligned tensor data.
        case dtype::bf16: {
            const auto* s = static_cast<const std::byte*>(src);
            for (size_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, s + 2 * i, 2);
                dst[i] = bf16_to_f32(h);
            }
            return;
        }
        case dtype::f16: {
            const auto* s = static_cast<const std::byte*>(src);
            for (size_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, s + 2 * i, 2);
                dst[i] = f16_to_f32(h);
            }
            return;
        }
        case dtype::f8_e4m3: {
            const auto* s = static_cast<const uint8_t*>(src);
            const float* table = e4m3_table();
            for (size_t i = 0; i < n; ++i) dst[i] = table[s[i]];
            return;
        }
    }
}

int64_t tensor_view::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::vector<float> tensor_view::to_f32() const {
    std::vector<float> out(static_cast<size_t>(numel()));
    convert_to_f32(type, data, out.data(), out.size());
    return out;
}

matrix_view matrix_view::slice_rows(int64_t first, int64_t count) const {
    ZMOE_CHECK(first >= 0 && count >= 0 && first + count <= rows,
               "slice_rows [" << first << ", " << first + count << ") of " << rows << " rows");
    matrix_view v = *this;
    v.data = data + static_cast<size_t>(first * cols) * dtype_size(type);
    v.rows = count;
    v.scale_row0 = scale_row0 + first;
    return v;
}

const float* matrix_view::row_scales(int64_t r) const {
    ZMOE_CHECK(type == dtype::f8_e4m3 && scale != nullptr, "row_scales of a matrix without FP8 block scales");
    return scale + ((scale_row0 + r) / kFp8Block) * fp8_blocks(cols);
}

void matrix_view::scale_row(int64_t r, float* dst) const {
    const float* s = row_scales(r);
    for (int64_t c = 0; c < cols; ++c) dst[c] *= s[c / kFp8Block];
}

std::string shape_string(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

}  // namespace zmoe
