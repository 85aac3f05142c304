#include "workers/fp8.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace zmoe {
namespace {

std::array<float, 256> make_table() {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) {
        const int exp = (c >> 3) & 0xf, mant = c & 0x7;
        float v;
        if (exp == 0xf && mant == 0x7) {
            v = std::numeric_limits<float>::quiet_NaN();
        } else if (exp == 0) {
            v = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant / 8 * 2^-6
        } else {
            v = std::ldexp(static_cast<float>(8 + mant), exp - 10);  // (1 + mant / 8) * 2^(exp - 7)
        }
        t[static_cast<size_t>(c)] = (c & 0x80) ? -v : v;
    }
    return t;
}

const std::array<float, 256> kTable = make_table();

}  // namespace

float e4m3_to_f32(uint8_t code) { return kTable[code]; }

const float* e4m3_table() { return kTable.data(); }

uint8_t f32_to_e4m3(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
    const uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);   // NaN
    if (abs >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 (inf included): saturate
    if (abs < 0x3c800000u) {
        // Below 2^-6, e4m3's smallest normal: a multiple of the subnormal step 2^-9. Round |x| * 2^9 to the nearest
        // integer, ties to even: std::nearbyint in the default rounding mode, exact here (|x| * 2^9 < 8 is an exact
        // product and a float with spare precision). 8 (= 2^-6) carries into the first normal code, 0x08.
        float a;
        std::memcpy(&a, &abs, sizeof a);
        const auto m = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, 9)));
        return static_cast<uint8_t>(sign | m);
    }
    // Normal: keep 3 of fp32's 23 mantissa bits, rounding the dropped 20 to nearest even; a carry out of the mantissa
    // bumps the exponent, as it should. Exponent rebias 127 -> 7.
    uint32_t r = abs - (120u << 23);
    r += 0x7ffffu + ((r >> 20) & 1u);
    r >>= 20;  // at most 0x7e: everything from 448 - half a step up was saturated above
    return static_cast<uint8_t>(sign | r);
}

void quantize_fp8_blocks(const float* w, int64_t rows, int64_t cols, int64_t stride, uint8_t* codes, float* scales) {
    const int64_t kb = fp8_blocks(cols);
    for (int64_t r0 = 0; r0 < rows; r0 += kFp8Block) {
        const int64_t r1 = std::min(rows, r0 + kFp8Block);
        for (int64_t c0 = 0; c0 < cols; c0 += kFp8Block) {
            const int64_t c1 = std::min(cols, c0 + kFp8Block);
            float amax = 0.f;
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * stride + c]));
            const float scale = fp8_block_scale(amax);
            scales[(r0 / kFp8Block) * kb + c0 / kFp8Block] = scale;
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = c0; c < c1; ++c) codes[r * cols + c] = f32_to_e4m3(w[r * stride + c] / scale);
        }
    }
}

void quantize_fp8_activation_row(const float* x, int64_t n, float* q, float* scales) {
    for (int64_t g0 = 0; g0 < n; g0 += kFp8Block) {
        const int64_t g1 = std::min(n, g0 + kFp8Block);
        float amax = 0.f;
        for (int64_t i = g0; i < g1; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float scale = fp8_block_scale(amax);
        scales[g0 / kFp8Block] = scale;
        for (int64_t i = g0; i < g1; ++i) q[i] = kTable[f32_to_e4m3(x[i] / scale)];
    }
}

}  // namespace zmoe
