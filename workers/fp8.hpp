#pragma once
// FP8 E4M3 ("float8_e4m3fn": 1 sign, 4 exponent bits biased by 7, 3 mantissa bits; no infinities, S.1111.111 is
// NaN, largest finite 448, smallest subnormal 2^-9) and the block-scaled FP8 format of DeepSeek-V3 / Qwen3-FP8
// checkpoints: a weight [N, K] stored as e4m3 codes with one fp32 scale per 128 x 128 block ("weight_scale_inv",
// [ceil(N / 128), ceil(K / 128)], ragged edge blocks included), w ~ e4m3 * scale; activations quantized at run
// time per token and 128-channel group ("dynamic"). These are the exact CPU reference of the format's arithmetic.

#include <cstdint>
#include <vector>

namespace zmoe {

/// Channels (and rows) per FP8 scale block.
constexpr int64_t kFp8Block = 128;
/// Largest finite e4m3 magnitude.
constexpr float kE4m3Max = 448.0f;

/// The value of e4m3 code `code`: exact in fp32 (NaN for 0x7f / 0xff).
float e4m3_to_f32(uint8_t code);

/// The 256 code values (e4m3_to_f32 of each code), for decoding loops.
const float* e4m3_table();

/// fp32 to the nearest e4m3 code, ties to even, saturating: finite values and infinities beyond the largest finite
/// magnitude become +-448 (as a clamp to [-448, 448] before rounding would give); NaN becomes a NaN code (sign kept).
/// Magnitudes below the smallest subnormal's half round to (signed) zero.
uint8_t f32_to_e4m3(float x);

/// The scale of a block whose largest magnitude is `amax`: amax / 448 in fp32, or 1 for an all-zero block (whose
/// codes are then all zero). Callers pass a finite amax.
inline float fp8_block_scale(float amax) { return amax > 0.f ? amax / kE4m3Max : 1.0f; }

/// Number of 128-blocks covering `n` elements.
inline int64_t fp8_blocks(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

/// Quantizes `w` [rows, cols] (row-major fp32, row stride `stride`) to the block format: codes [rows, cols] and
/// scales [fp8_blocks(rows), fp8_blocks(cols)], per 128 x 128 block scale = fp8_block_scale(amax), code =
/// f32_to_e4m3(w / scale). The same bits as scripts/make_model_fixtures.py's quantize_weight.
void quantize_fp8_blocks(const float* w, int64_t rows, int64_t cols, int64_t stride, uint8_t* codes, float* scales);

/// Quantizes one activation row x [n] per 128-channel group: scales[g] = fp8_block_scale(amax of group g) and
/// q[i] = e4m3_to_f32(f32_to_e4m3(x[i] / scales[g])), the e4m3 value (unscaled) as a float. q: [n],
/// scales: [fp8_blocks(n)].
void quantize_fp8_activation_row(const float* x, int64_t n, float* q, float* scales);

}  // namespace zmoe
