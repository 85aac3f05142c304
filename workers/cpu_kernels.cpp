#include "workers/cpu_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "workers/fp8.hpp"

namespace zmoe {
namespace {

// Every row of x [num_tokens, cols] (row stride x_stride) quantized per 128-channel group into xq / xs.
void quantize_rows(const float* x, int64_t num_tokens, int64_t x_stride, int64_t cols, std::vector<float>& xq,
                   std::vector<float>& xs) {
    const int64_t kb = fp8_blocks(cols);
    xq.resize(static_cast<size_t>(num_tokens * cols));
    xs.resize(static_cast<size_t>(num_tokens * kb));
    for (int64_t t = 0; t < num_tokens; ++t)
        quantize_fp8_activation_row(x + t * x_stride, cols, xq.data() + t * cols, xs.data() + t * kb);
}

}  // namespace

void linear_rows_fp8(const float* xq, const float* xs, int64_t num_tokens, const matrix_view& w, int64_t row_begin,
                     int64_t row_end, const float* bias, float* y, int64_t y_stride, float* scratch) {
    const int64_t in = w.cols, kb = fp8_blocks(in);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kLinearRowBlock) {
        const int64_t r1 = std::min(row_end, r0 + kLinearRowBlock);
        // The e4m3 values of the rows, unscaled (the scales apply per block below).
        for (int64_t r = r0; r < r1; ++r)
            convert_to_f32(dtype::f8_e4m3, w.data + static_cast<size_t>(r * in), scratch + (r - r0) * in,
                           static_cast<size_t>(in));
        for (int64_t t = 0; t < num_tokens; ++t) {
            const float* xt = xq + t * in;
            const float* st = xs + t * kb;
            float* yt = y + t * y_stride;
            for (int64_t r = r0; r < r1; ++r) {
                const float* wr = scratch + (r - r0) * in;
                const float* ws = w.row_scales(r);
                float acc = 0.f;
                for (int64_t b = 0; b < kb; ++b) {
                    const int64_t k0 = b * kFp8Block;
                    const float part = dot_f32(xt + k0, wr + k0, std::min(kFp8Block, in - k0));
                    acc += part * (st[b] * ws[b]);
                }
                yt[r - row_begin] = bias ? acc + bias[r] : acc;
            }
        }
    }
}

void linear_rows(const float* x, int64_t num_tokens, int64_t x_stride, const matrix_view& w, int64_t row_begin,
                 int64_t row_end, const float* bias, float* y, int64_t y_stride, float* scratch) {
    if (w.type == dtype::f8_e4m3) {
        thread_local std::vector<float> xq, xs;
        quantize_rows(x, num_tokens, x_stride, w.cols, xq, xs);
        linear_rows_fp8(xq.data(), xs.data(), num_tokens, w, row_begin, row_end, bias, y, y_stride, scratch);
        return;
    }
    const int64_t in = w.cols;
    const auto* wf = reinterpret_cast<const float*>(w.data);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kLinearRowBlock) {
        const int64_t r1 = std::min(row_end, r0 + kLinearRowBlock);
        const float* rows;
        if (w.type == dtype::f32 && reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0) {
            rows = wf + r0 * in;
        } else {
            for (int64_t r = r0; r < r1; ++r) w.row_to_f32(r, scratch + (r - r0) * in);
            rows = scratch;
        }
        for (int64_t t = 0; t < num_tokens; ++t) {
            const float* xt = x + t * x_stride;
            float* yt = y + t * y_stride;
            for (int64_t r = r0; r < r1; ++r) {
                const float v = dot_f32(xt, rows + (r - r0) * in, in);
                yt[r - row_begin] = bias ? v + bias[r] : v;
            }
        }
    }
}

void linear(thread_pool& pool, const float* x, int64_t num_tokens, const matrix_view& w, const float* bias, float* y) {
    if (num_tokens <= 0 || w.rows <= 0) return;
    const int64_t num_blocks = (w.rows + kLinearRowBlock - 1) / kLinearRowBlock;
    // Small products are not worth waking the pool for.
    const int64_t work_per_block = num_tokens * kLinearRowBlock * w.cols;
    const int64_t min_blocks = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, work_per_block));
    if (w.type == dtype::f8_e4m3) {
        // Quantize the activations once (each row independently: the same values linear_rows would compute).
        const int64_t in = w.cols, kb = fp8_blocks(in);
        std::vector<float> xq(static_cast<size_t>(num_tokens * in)), xs(static_cast<size_t>(num_tokens * kb));
        pool.parallel_for(
            num_tokens,
            [&](int64_t t0, int64_t t1) {
                for (int64_t t = t0; t < t1; ++t)
                    quantize_fp8_activation_row(x + t * in, in, xq.data() + t * in, xs.data() + t * kb);
            },
            std::max<int64_t>(1, 4096 / std::max<int64_t>(1, in)));
        pool.parallel_for(
            num_blocks,
            [&](int64_t b0, int64_t b1) {
                thread_local std::vector<float> scratch;
                scratch.resize(static_cast<size_t>(kLinearRowBlock * in));
                const int64_t r0 = b0 * kLinearRowBlock;
                linear_rows_fp8(xq.data(), xs.data(), num_tokens, w, r0, std::min(w.rows, b1 * kLinearRowBlock), bias,
                                y + r0, w.rows, scratch.data());
            },
            min_blocks);
        return;
    }
    pool.parallel_for(
        num_blocks,
        [&](int64_t b0, int64_t b1) {
            thread_local std::vector<float> scratch;
            scratch.resize(static_cast<size_t>(kLinearRowBlock * w.cols));
            const int64_t r0 = b0 * kLinearRowBlock;
            linear_rows(x, num_tokens, w.cols, w, r0, std::min(w.rows, b1 * kLinearRowBlock), bias, y + r0, w.rows,
                        scratch.data());
        },
        min_blocks);
}

void rmsnorm_row(const float* x, const float* weight, int64_t n, float eps, float* y) {
    const float mean_sq = dot_f32(x, x, n) / static_cast<float>(n);
    const float inv = 1.0f / std::sqrt(mean_sq + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = weight[i] * (x[i] * inv);
}

void rmsnorm(thread_pool& pool, const float* x, const float* weight, int64_t num_rows, int64_t n, float eps, float* y) {
    pool.parallel_for(
        num_rows,
        [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) rmsnorm_row(x + r * n, weight, n, eps, y + r * n);
        },
        std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n)));
}

void rope_cos_sin(int64_t position, int64_t dim, double theta, float* cos_out, float* sin_out) {
    const float pos = static_cast<float>(position);
    for (int64_t i = 0; i < dim / 2; ++i) {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
        const float inv_freq = 1.0f / static_cast<float>(std::pow(theta, static_cast<double>(exponent)));
        const float angle = pos * inv_freq;
        cos_out[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
        sin_out[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

void activation_rounding::round_to_bf16(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

}  // namespace zmoe
