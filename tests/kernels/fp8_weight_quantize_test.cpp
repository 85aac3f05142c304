// launch_fp8_weight_quantize (the device quantization of FP8 dummy weights) against quantize_fp8_blocks
// (workers/fp8.hpp, the CPU backend's --quantization fp8): codes and block scales bit for bit for the same BF16
// values, over ragged shapes (partial 128-blocks in both dimensions), blocks of very different magnitudes, an
// all-zero block (scale 1), values at e4m3 rounding ties, subnormal codes, and a codes row stride wider than the
// matrix (the padded layouts of the CUDA executor), whose padding must stay untouched.

#include "kernels/fp8_weight_quantize.hpp"

#include <cstring>

#include "tests/kernels/test_util.hpp"
#include "workers/fp8.hpp"

namespace zmoe::kernels::test {
namespace {

TEST(Fp8WeightQuantize, BitIdenticalToTheCpuBlockQuantization) {
    struct shape {
        int64_t rows;
        int32_t cols, ld;
    };
    for (const shape s :
         {shape{136, 144, 144}, shape{300, 200, 208}, shape{128, 128, 128}, shape{7, 5, 16}, shape{768, 2048, 2048}}) {
        SCOPED_TRACE(make_name("rows ", s.rows, " cols ", s.cols, " ld ", s.ld));
        std::mt19937 rng(static_cast<uint32_t>(s.rows * 7 + s.cols));
        std::vector<float> w = random_bf16(size_t(s.rows) * s.cols, 1.f, rng);
        for (int64_t r = 0; r < s.rows; ++r)
            for (int32_t c = 0; c < s.cols; ++c) {
                float& v = w[size_t(r) * s.cols + c];
                // Per-block magnitudes 2^-12 .. 2^6; the block (0, 1) all zero when it exists.
                const int block = int(r / 128) * 3 + c / 128;
                v = (r < 128 && c >= 128 && c < 256) ? 0.f : ref::round_bf16(std::ldexp(v, block % 19 - 12));
            }
        // A block whose amax is 448 exactly (scale 1): its values land on e4m3 codes and rounding ties as given.
        if (s.rows >= 4 && s.cols >= 4 && s.cols <= 128) {
            for (int64_t r = 0; r < std::min<int64_t>(s.rows, 128); ++r)
                for (int32_t c = 0; c < std::min(s.cols, 128); ++c) w[size_t(r) * s.cols + c] = 0.f;
            w[0] = 448.f;
            w[1] = 1.0625f;                         // halfway between 1 and 1.125: ties to even (1)
            w[2] = 1.1875f;                         // halfway between 1.125 and 1.25: ties to even (1.25)
            w[3] = -0.0029296875f;                  // 1.5 * 2^-9: a subnormal tie (to 2^-8)
            w[size_t(s.cols)] = 3.0517578125e-05f;  // below half the smallest subnormal: zero
        }
        const int64_t nb = fp8_blocks(s.rows), kb = fp8_blocks(s.cols);
        std::vector<uint8_t> want_codes(size_t(s.rows) * s.cols);
        std::vector<float> want_scales(size_t(nb * kb));
        quantize_fp8_blocks(w.data(), s.rows, s.cols, s.cols, want_codes.data(), want_scales.data());

        auto d_w = upload_bf16(w);
        device_buffer<uint8_t> d_codes(size_t(s.rows) * s.ld);
        device_buffer<float> d_scales(size_t(nb * kb));
        d_codes.poison(0x5a);
        d_scales.poison();
        launch_fp8_weight_quantize({.w = d_w.get(),
                                    .rows = s.rows,
                                    .cols = s.cols,
                                    .codes = d_codes.get(),
                                    .codes_ld = s.ld,
                                    .scales = d_scales.get()},
                                   nullptr);
        sync_and_check();
        const std::vector<uint8_t> codes = download(d_codes);
        const std::vector<float> scales = download(d_scales);
        for (size_t i = 0; i < scales.size(); ++i)
            ASSERT_EQ(std::memcmp(&scales[i], &want_scales[i], 4), 0)
                << "scale block " << i << ": " << scales[i] << " vs " << want_scales[i];
        for (int64_t r = 0; r < s.rows; ++r) {
            for (int32_t c = 0; c < s.cols; ++c)
                ASSERT_EQ(codes[size_t(r) * s.ld + c], want_codes[size_t(r) * s.cols + c])
                    << "row " << r << " col " << c << " value " << w[size_t(r) * s.cols + c];
            for (int32_t c = s.cols; c < s.ld; ++c)
                ASSERT_EQ(codes[size_t(r) * s.ld + c], 0x5a) << "padding written at row " << r << " col " << c;
        }
    }
}

// The way back (MLA's kv_b of an FP8 model): bf16(e4m3 value * block scale), the product in fp32, as the CPU's
// dequantization rounded to BF16.
TEST(Fp8WeightQuantize, DequantizeIsTheCpusFp32ProductRoundedToBf16) {
    const int64_t rows = 300;
    const int32_t cols = 200;
    std::mt19937 rng(5);
    const std::vector<float> w = random_bf16(size_t(rows) * cols, 3.f, rng);
    const int64_t nb = fp8_blocks(rows), kb = fp8_blocks(cols);
    std::vector<uint8_t> codes(size_t(rows) * cols);
    std::vector<float> scales(size_t(nb * kb));
    quantize_fp8_blocks(w.data(), rows, cols, cols, codes.data(), scales.data());
    auto d_codes = upload(codes);
    auto d_scales = upload(scales);
    device_buffer<bf16> d_w(size_t(rows) * cols);
    d_w.poison();
    launch_fp8_weight_dequantize(
        {.codes = d_codes.get(), .scales = d_scales.get(), .rows = rows, .cols = cols, .w = d_w.get()}, nullptr);
    sync_and_check();
    const std::vector<float> got = download_bf16(d_w);
    for (int64_t r = 0; r < rows; ++r)
        for (int32_t c = 0; c < cols; ++c) {
            const size_t i = size_t(r) * cols + c;
            const float want = ref::round_bf16(e4m3_to_f32(codes[i]) * scales[size_t((r / 128) * kb + c / 128)]);
            ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0) << "row " << r << " col " << c;
        }
}

}  // namespace
}  // namespace zmoe::kernels::test
