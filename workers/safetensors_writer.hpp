#pragma once
// Writes safetensors files. zmoe serves checkpoints it did not write; this exists so that tests and benchmarks
// can build synthetic checkpoints (including deliberately broken ones) without Python.

#include <cstdint>
#include <string>
#include <vector>

#include "workers/tensor_view.hpp"

namespace zmoe {

/// One tensor to write: values given in fp32 and stored as `type` (rounded to nearest even; f8_e4m3: f32_to_e4m3,
/// unscaled, so pass the e4m3 values themselves).
struct tensor_to_write {
    std::string name;
    dtype type = dtype::bf16;
    std::vector<int64_t> shape;
    std::vector<float> values;  ///< numel(shape) values, row-major
};

/// Writes `tensors` to `path` (header sorted by name, data in the given order). Throws zmoe::error(io) on failure.
void write_safetensors(const std::string& path, const std::vector<tensor_to_write>& tensors);

/// The bytes write_safetensors would write (for tests that corrupt them before writing).
std::string encode_safetensors(const std::vector<tensor_to_write>& tensors);

}  // namespace zmoe
