#pragma once
// Non-owning views of checkpoint tensors. Weights stay in their checkpoint dtype (usually BF16) inside the
// memory-mapped file; kernels widen them to fp32 as they read, so a large model costs its on-disk size in memory.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace zmoe {

/// Element types a weight may have. Others in a checkpoint are reported as unsupported when asked for.
/// f8_e4m3: FP8 codes (workers/fp8.hpp); a matrix of them carries its block scales (matrix_view::scale).
enum class dtype : uint8_t { f32, f16, bf16, f8_e4m3 };

/// Bytes per element of `t`.
size_t dtype_size(dtype t);
/// The safetensors spelling ("F32", "F16", "BF16", "F8_E4M3").
const char* dtype_name(dtype t);

/// bfloat16 bits to fp32: exact (the top 16 bits of an fp32).
inline float bf16_to_f32(uint16_t bits) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

/// IEEE half bits to fp32: exact, subnormals and inf/nan included.
float f16_to_f32(uint16_t bits);

/// fp32 to bfloat16 bits, round to nearest even (NaN stays NaN). Used to write test checkpoints.
uint16_t f32_to_bf16(float f);
/// fp32 to IEEE half bits, round to nearest even.
uint16_t f32_to_f16(float f);

/// Widens `n` elements of type `t` starting at `src` into `dst` (f8_e4m3: the code values, unscaled).
void convert_to_f32(dtype t, const void* src, float* dst, size_t n);

/// A tensor inside a checkpoint: dtype, shape and a pointer into the mapped file.
struct tensor_view {
    dtype type = dtype::f32;
    std::vector<int64_t> shape;
    const std::byte* data = nullptr;

    int64_t numel() const;
    /// All elements widened to fp32.
    std::vector<float> to_f32() const;
};

/// A row-major 2D weight [rows, cols] (a Linear's [out_features, in_features]) in its checkpoint dtype.
/// f8_e4m3 weights are block-scaled (workers/fp8.hpp): `scale` points at the fp32 scale grid of the matrix they
/// were quantized as, [fp8_blocks(scale_row0 + rows) or more, fp8_blocks(cols)], and row r of this view is row
/// scale_row0 + r of that grid's matrix (a view sliced out of a larger block-quantized matrix keeps its blocks).
struct matrix_view {
    dtype type = dtype::f32;
    const std::byte* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    const float* scale = nullptr;  ///< f8_e4m3 only
    int64_t scale_row0 = 0;        ///< f8_e4m3 only

    bool empty() const { return data == nullptr; }
    /// The fp32 block scales of row `r` ([fp8_blocks(cols)], one per 128 columns); f8_e4m3 only.
    const float* row_scales(int64_t r) const;
    /// Row `r` widened to fp32 into `dst[0, cols)` (f8_e4m3: dequantized, code value * its block's scale in fp32).
    void row_to_f32(int64_t r, float* dst) const {
        convert_to_f32(type, data + static_cast<size_t>(r * cols) * dtype_size(type), dst, static_cast<size_t>(cols));
        if (type == dtype::f8_e4m3) scale_row(r, dst);
    }
    /// Rows [first, first + count) as their own view.
    matrix_view slice_rows(int64_t first, int64_t count) const;

  private:
    void scale_row(int64_t r, float* dst) const;
};

/// Renders a shape as "[a, b, c]" for error messages.
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace zmoe
