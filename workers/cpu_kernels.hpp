#pragma once
// fp32 CPU kernels of the forward pass: the numerical reference for the CUDA kernels.
//
// Determinism contract: every output element is computed by one thread with a summation order fixed by the
// element's own inputs (8 interleaved partial sums combined in a fixed tree, then the tail). Results therefore
// do not depend on the thread count, on how work is chunked, or on which other tokens share the batch.

#include <cstdint>

#include "workers/tensor_view.hpp"
#include "workers/thread_pool.hpp"

namespace zmoe {

/// sum_i a[i] * b[i] in the fixed order described above.
inline float dot_f32(const float* a, const float* b, int64_t n) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
    float tail = 0.f;
    for (; i < n; ++i) tail += a[i] * b[i];
    return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
}

/// Rows [row_begin, row_end) of y = x W^T (+ bias) on the calling thread.
/// A block-scaled FP8 W (dtype f8_e4m3, workers/fp8.hpp) runs the format's W8A8 arithmetic, the reference of the
/// CUDA FP8 GEMMs: each token's row of x is quantized per 128-channel group to e4m3 (quantize_fp8_activation_row),
/// and y[t, n] = sum over K blocks kb of dot(x_q[t, kb], w_q[n, kb]) * (x_scale[t, kb] * w_scale[n / 128, kb]),
/// each block's dot in fp32 over the e4m3 values (DeepGEMM's promotion of the accumulator per 128-wide K block),
/// the blocks accumulated in fp32 in order.
/// x: [num_tokens, w.cols] with row stride x_stride; y: [num_tokens, row_end - row_begin] with row stride y_stride
/// (output row r of W lands in column r - row_begin); bias: [w.rows] or null. `scratch` holds at least kLinearRowBlock
/// * w.cols floats.
void linear_rows(const float* x, int64_t num_tokens, int64_t x_stride, const matrix_view& w, int64_t row_begin,
                 int64_t row_end, const float* bias, float* y, int64_t y_stride, float* scratch);

/// Rows of an FP8 W [row_begin, row_end) times activations already quantized by quantize_fp8_activation_row:
/// xq [num_tokens, w.cols] (e4m3 values), xs [num_tokens, fp8_blocks(w.cols)] (their group scales). As linear_rows.
void linear_rows_fp8(const float* xq, const float* xs, int64_t num_tokens, const matrix_view& w, int64_t row_begin,
                     int64_t row_end, const float* bias, float* y, int64_t y_stride, float* scratch);

/// Rows of W widened per block in linear_rows.
constexpr int64_t kLinearRowBlock = 8;

/// y[t, :] = x[t, :] W^T (+ bias), parallel over W's rows. x: [num_tokens, w.cols], y: [num_tokens, w.rows],
/// both dense. FP8 W: as linear_rows (the activations are quantized once, the same values).
void linear(thread_pool& pool, const float* x, int64_t num_tokens, const matrix_view& w, const float* bias, float* y);

/// RMSNorm of one row: y = weight * (x / sqrt(mean(x^2) + eps)). x and y may alias.
void rmsnorm_row(const float* x, const float* weight, int64_t n, float eps, float* y);

/// RMSNorm of every row of x [num_rows, n] into y (may alias), parallel over rows.
void rmsnorm(thread_pool& pool, const float* x, const float* weight, int64_t num_rows, int64_t n, float eps, float* y);

/// The rotation angles' cos/sin for `position`, as HF computes them in fp32: inv_freq[i] = 1 / theta^(2i/dim),
/// angle = position * inv_freq[i]. cos_out/sin_out: [dim / 2].
void rope_cos_sin(int64_t position, int64_t dim, double theta, float* cos_out, float* sin_out);

/// Rotates one head vector x [dim] in place, neox style (rotate_half: pairs (i, i + dim/2)).
inline void rope_apply(float* x, const float* cos_v, const float* sin_v, int64_t dim) {
    const int64_t half = dim / 2;
    for (int64_t i = 0; i < half; ++i) {
        const float x1 = x[i];
        const float x2 = x[i + half];
        x[i] = x1 * cos_v[i] - x2 * sin_v[i];
        x[i + half] = x2 * cos_v[i] + x1 * sin_v[i];
    }
}

/// SiLU(x) = x * sigmoid(x).
float silu(float x);

/// Where the forward pass rounds its activations: nowhere (fp32 throughout, the reference of transformers' fp32
/// model), or to BF16 (round to nearest even) at every point where the CUDA executor stores an activation in BF16:
/// the residual stream, the norms' outputs, each linear's output, q/k after their norm and RoPE, the KV cache, the
/// attention output, each expert's output and the combine (runner_options::bf16_activations). With block-scaled FP8
/// this is what the CUDA path's arithmetic is compared with: FP8 quantizes those BF16 values, and a BF16 rounding
/// that crosses an e4m3 rounding boundary moves the element by a whole e4m3 step (docs/fp8.md, "Reference and
/// accuracy"), so the fp32 reference is not the CUDA path's.
struct activation_rounding {
    bool bf16 = false;
    /// x[0, n) rounded in place (a no-op unless bf16).
    void operator()(float* x, int64_t n) const {
        if (bf16) round_to_bf16(x, n);
    }
    static void round_to_bf16(float* x, int64_t n);
};

}  // namespace zmoe
