// The e4m3 codec, the block quantization of weights and activations, and the CPU W8A8 product (workers/fp8.hpp,
// workers/cpu_kernels.hpp), against independent references: the format's definition by enumeration, a brute-force
// nearest-value search, and the block-scaled product evaluated in double.

#include "workers/fp8.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "workers/cpu_kernels.hpp"

namespace zmoe {
namespace {

uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

// The value of code c from the format's definition, written independently of workers/fp8.cpp.
double definition_value(int c) {
    const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    const double mag = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1 + m / 8.0) * std::pow(2.0, e - 7);
    return s ? -mag : mag;
}

// Nearest e4m3 code by exhaustive search (ties to the even code), saturating beyond 448.
uint8_t brute_force_encode(float x) {
    if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
    const double v = std::clamp(static_cast<double>(x), -448.0, 448.0);
    int best = -1;
    double best_d = 0;
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue;
        if ((c & 0x80) != (std::signbit(x) ? 0x80 : 0)) continue;  // same sign (keeps -0 for tiny negatives)
        const double d = std::abs(definition_value(c) - v);
        if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
            best = c;
            best_d = d;
        }
    }
    return static_cast<uint8_t>(best);
}

TEST(Fp8E4m3, DecodesAll256CodesAsTheFormatDefines) {
    for (int c = 0; c < 256; ++c) {
        const float v = e4m3_to_f32(static_cast<uint8_t>(c));
        if ((c & 0x7f) == 0x7f) {
            EXPECT_TRUE(std::isnan(v)) << c;
            continue;
        }
        EXPECT_EQ(static_cast<double>(v), definition_value(c)) << "code " << c;
        EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << c;  // 0x80 is -0
    }
    EXPECT_EQ(e4m3_to_f32(0x7e), 448.f);
    EXPECT_EQ(e4m3_to_f32(0x38), 1.f);
    EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.f, -6));      // smallest normal
    EXPECT_EQ(e4m3_to_f32(0x07), 7 * std::ldexp(1.f, -9));  // largest subnormal
    EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.f, -9));      // smallest subnormal
    EXPECT_EQ(e4m3_to_f32(0xfe), -448.f);
}

TEST(Fp8E4m3, EveryFiniteCodeRoundTrips) {
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue;
        EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(c))), c) << "code " << c;
    }
}

TEST(Fp8E4m3, TiesRoundToEvenAndNeighboursToNearest) {
    // Between each pair of consecutive codes of one sign (subnormals included): the midpoint goes to the even code,
    // one fp32 ulp either side to the nearer code.
    for (int sign : {0, 0x80}) {
        for (int c = 0; c < 0x7e; ++c) {
            const float a = e4m3_to_f32(static_cast<uint8_t>(sign | c));
            const float b = e4m3_to_f32(static_cast<uint8_t>(sign | (c + 1)));
            const float mid = (a + b) / 2;  // exact: the codes have 4 significant bits
            ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(a) + b) / 2);
            const int even = (c % 2 == 0) ? c : c + 1;
            EXPECT_EQ(f32_to_e4m3(mid), sign | even) << "midpoint of codes " << c << ", " << c + 1;
            EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, a)), sign | c) << c;
            EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, b)), sign | (c + 1)) << c;
        }
    }
}

TEST(Fp8E4m3, SaturatesInfinityAndOverflowAndKeepsNan) {
    EXPECT_EQ(f32_to_e4m3(448.f), 0x7e);
    EXPECT_EQ(f32_to_e4m3(460.f), 0x7e);  // would round to 448 anyway
    EXPECT_EQ(f32_to_e4m3(464.f), 0x7e);  // the tie with 480 (not a code): saturates
    EXPECT_EQ(f32_to_e4m3(1e30f), 0x7e);
    EXPECT_EQ(f32_to_e4m3(-1e30f), 0xfe);
    EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
    EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
    EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
    EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0xff);
    EXPECT_TRUE(std::isnan(e4m3_to_f32(f32_to_e4m3(std::nanf("")))));
}

TEST(Fp8E4m3, UnderflowAndSignedZero) {
    const float step = std::ldexp(1.f, -9);
    EXPECT_EQ(f32_to_e4m3(0.f), 0x00);
    EXPECT_EQ(f32_to_e4m3(-0.f), 0x80);
    EXPECT_EQ(f32_to_e4m3(step / 2), 0x00);  // tie between 0 and the smallest subnormal: even (0)
    EXPECT_EQ(f32_to_e4m3(std::nextafter(step / 2, 1.f)), 0x01);
    EXPECT_EQ(f32_to_e4m3(-step / 4), 0x80);
    EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
    EXPECT_EQ(f32_to_e4m3(1.5f * step), 0x02);                    // tie 1 / 2 subnormal steps: even
    EXPECT_EQ(f32_to_e4m3(7.5f * step), 0x08);                    // tie largest subnormal / smallest normal
    EXPECT_EQ(f32_to_e4m3(std::ldexp(1.f, -6) * 1.0625f), 0x08);  // tie 2^-6 / 2^-6 * 1.125: even
}

TEST(Fp8E4m3, MatchesBruteForceNearestOnRandomAndEdgeValues) {
    std::mt19937 rng(42);
    std::uniform_int_distribution<uint32_t> any_bits;
    std::uniform_real_distribution<float> exponent(-14.f, 10.f);
    int checked = 0;
    for (int i = 0; i < 200000; ++i) {
        float x;
        if (i % 2 == 0) {
            const uint32_t u = any_bits(rng);
            std::memcpy(&x, &u, sizeof x);
            if (std::isnan(x)) continue;
        } else {
            x = std::exp2(exponent(rng)) * ((i & 2) ? -1.f : 1.f);
        }
        ASSERT_EQ(f32_to_e4m3(x), brute_force_encode(x)) << "x = " << x << " bits " << std::hex << bits_of(x);
        ++checked;
    }
    EXPECT_GT(checked, 150000);
}

TEST(Fp8Blocks, WeightQuantizationPerRaggedBlock) {
    const int64_t rows = 130, cols = 200;  // blocks: 2 x 2, the last ones ragged (2 rows, 72 columns)
    std::mt19937 rng(7);
    std::normal_distribution<float> n(0.f, 0.05f);
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (float& v : w) v = n(rng);
    for (int64_t r = 0; r < 128; ++r)
        for (int64_t c = 128; c < cols; ++c) w[r * cols + c] = 0.f;  // an all-zero block: scale 1, codes 0
    w[129 * cols + 3] = 2.5f;                                        // the amax of block (1, 0)
    std::vector<uint8_t> codes(w.size());
    std::vector<float> scales(4);
    quantize_fp8_blocks(w.data(), rows, cols, cols, codes.data(), scales.data());
    EXPECT_EQ(scales[1], 1.f);
    EXPECT_EQ(scales[2], 2.5f / 448.f);
    EXPECT_EQ(codes[129 * cols + 3], 0x7e);  // amax / scale = 448
    std::vector<float> amax(4, 0.f);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            amax[(r / 128) * 2 + c / 128] = std::max(amax[(r / 128) * 2 + c / 128], std::fabs(w[r * cols + c]));
    for (int b = 0; b < 4; ++b) EXPECT_EQ(scales[b], amax[b] > 0 ? amax[b] / 448.f : 1.f) << b;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t b = (r / 128) * 2 + c / 128;
            const float x = w[r * cols + c];
            ASSERT_EQ(codes[r * cols + c], brute_force_encode(x / scales[b])) << r << "," << c;
            // Relative error of a normal e4m3 value: at most half its 3-bit mantissa step, 2^-4.
            const float back = e4m3_to_f32(codes[r * cols + c]) * scales[b];
            ASSERT_LE(std::fabs(back - x), std::max(std::fabs(x) * 0.0625f, scales[b] * std::ldexp(1.f, -10)));
        }
    }
}

TEST(Fp8Blocks, ActivationRowPerGroup) {
    std::vector<float> x(300);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * (i < 128 ? 3.f : 0.01f);
    std::fill(x.begin() + 256, x.end(), 0.f);  // a zero group
    std::vector<float> q(x.size()), s(3);
    quantize_fp8_activation_row(x.data(), static_cast<int64_t>(x.size()), q.data(), s.data());
    for (int g = 0; g < 3; ++g) {
        float amax = 0;
        for (int i = g * 128; i < std::min<int>(300, g * 128 + 128); ++i) amax = std::max(amax, std::fabs(x[i]));
        EXPECT_EQ(s[g], amax > 0 ? amax / 448.f : 1.f);
    }
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(q[i], e4m3_to_f32(brute_force_encode(x[i] / s[i / 128]))) << i;
}

// The W8A8 product of an FP8 matrix against the formula evaluated in double, and its determinism across chunkings.
TEST(Fp8Linear, BlockScaledProductMatchesTheFormula) {
    const int64_t N = 150, K = 300, T = 5;
    std::mt19937 rng(3);
    std::normal_distribution<float> n(0.f, 1.f);
    std::vector<float> w(static_cast<size_t>(N * K)), x(static_cast<size_t>(T * K)), bias(N);
    for (float& v : w) v = 0.05f * n(rng);
    for (float& v : x) v = n(rng);
    for (float& v : bias) v = n(rng);
    for (int64_t k = 0; k < K; ++k) x[2 * K + k] *= 100.f;  // tokens of very different ranges
    std::vector<uint8_t> codes(w.size());
    std::vector<float> scales(static_cast<size_t>(fp8_blocks(N) * fp8_blocks(K)));
    quantize_fp8_blocks(w.data(), N, K, K, codes.data(), scales.data());
    matrix_view m{dtype::f8_e4m3, reinterpret_cast<const std::byte*>(codes.data()), N, K};
    m.scale = scales.data();

    thread_pool pool(3);
    std::vector<float> y(static_cast<size_t>(T * N));
    linear(pool, x.data(), T, m, bias.data(), y.data());

    const int64_t kb = fp8_blocks(K);
    double worst = 0;
    for (int64_t t = 0; t < T; ++t) {
        std::vector<float> xq(K), xs(kb);
        quantize_fp8_activation_row(x.data() + t * K, K, xq.data(), xs.data());
        double plain_max = 0, err_max = 0;
        for (int64_t r = 0; r < N; ++r) {
            double want = bias[r], plain = bias[r];
            for (int64_t b = 0; b < kb; ++b) {
                double part = 0;
                for (int64_t k = b * 128; k < std::min(K, b * 128 + 128); ++k)
                    part += static_cast<double>(xq[k]) * e4m3_to_f32(codes[r * K + k]);
                want += part * xs[b] * scales[(r / 128) * kb + b];
            }
            for (int64_t k = 0; k < K; ++k) plain += static_cast<double>(x[t * K + k]) * w[r * K + k];
            // fp32 accumulation of <= 128 exact products per block, then 3 blocks: a few fp32 ulps of the sum of
            // magnitudes.
            double mag = std::abs(static_cast<double>(bias[r]));
            for (int64_t k = 0; k < K; ++k)
                mag += std::abs(static_cast<double>(xq[k]) * xs[k / 128] * e4m3_to_f32(codes[r * K + k]) *
                                scales[(r / 128) * kb + k / 128]);
            ASSERT_NEAR(y[t * N + r], want, 1e-5 * mag) << "token " << t << " row " << r;
            plain_max = std::max(plain_max, std::abs(plain));
            err_max = std::max(err_max, std::abs(y[t * N + r] - plain));
        }
        worst = std::max(worst, err_max / plain_max);
    }
    // Against the unquantized fp32 product: two e4m3 roundings of <= 2^-4 relative each, random signs averaging
    // most of it out.
    EXPECT_LT(worst, 0.1);
    EXPECT_GT(worst, 1e-4);  // and it is really quantized

    // linear_rows over any row range gives the same bits as linear (one thread, one chunking).
    std::vector<float> y2(static_cast<size_t>(T * N)), scratch(static_cast<size_t>(kLinearRowBlock * K));
    for (int64_t r0 = 0; r0 < N; r0 += 37) {
        const int64_t r1 = std::min(N, r0 + 37);
        linear_rows(x.data(), T, K, m, r0, r1, bias.data(), y2.data() + r0, N, scratch.data());
    }
    EXPECT_EQ(y, y2);
}

TEST(Fp8Linear, SlicedRowsKeepTheirBlockScales) {
    const int64_t N = 300, K = 40;
    std::vector<float> w(static_cast<size_t>(N * K));
    for (size_t i = 0; i < w.size(); ++i)
        w[i] = static_cast<float>((i * 7919) % 1000) / 1000.f * (i / K >= 128 ? 50 : 1);
    std::vector<uint8_t> codes(w.size());
    std::vector<float> scales(static_cast<size_t>(fp8_blocks(N) * fp8_blocks(K)));
    quantize_fp8_blocks(w.data(), N, K, K, codes.data(), scales.data());
    matrix_view m{dtype::f8_e4m3, reinterpret_cast<const std::byte*>(codes.data()), N, K};
    m.scale = scales.data();
    const matrix_view s = m.slice_rows(100, 150);  // straddles the blocks of rows 0-127 and 128-255
    std::vector<float> a(K), b(K);
    for (int64_t r = 0; r < s.rows; ++r) {
        s.row_to_f32(r, a.data());
        m.row_to_f32(100 + r, b.data());
        ASSERT_EQ(a, b) << r;
        for (int64_t k = 0; k < K; ++k)
            ASSERT_EQ(b[k], e4m3_to_f32(codes[(100 + r) * K + k]) * scales[(100 + r) / 128]);
    }
}

}  // namespace
}  // namespace zmoe
