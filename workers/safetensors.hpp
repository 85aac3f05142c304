#pragma once
// Read-only access to safetensors checkpoints, memory-mapped. A file is an 8-byte little-endian header
// length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then
// the data block the offsets point into. Every header is validated when opened (lengths against the file size,
// offsets against shape x dtype, JSON well-formed), so a truncated or corrupt file is reported at load time
// with its path, never read out of bounds later.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "workers/tensor_view.hpp"

namespace zmoe {

/// One memory-mapped .safetensors file.
class safetensors_file {
  public:
    /// Maps and validates `path`. Throws zmoe::error(io) if it cannot be opened, (invalid_checkpoint) if the
    /// header is inconsistent; messages name the path (and the tensor, where one is at fault).
    explicit safetensors_file(const std::string& path);
    ~safetensors_file();
    safetensors_file(const safetensors_file&) = delete;
    safetensors_file& operator=(const safetensors_file&) = delete;

    const std::string& path() const { return path_; }
    bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
    /// Tensor names in header order (sorted, as the format's JSON object).
    std::vector<std::string> names() const;
    /// The tensor `name`. Throws invalid_checkpoint if absent, unsupported if its dtype is not F32/F16/BF16/F8_E4M3.
    tensor_view get(const std::string& name) const;

  private:
    struct entry {
        std::string dtype_name;
        std::vector<int64_t> shape;
        size_t begin = 0;  // byte offsets into the data block
        size_t end = 0;
    };
    std::string path_;
    void* map_ = nullptr;
    size_t map_size_ = 0;
    const std::byte* data_block_ = nullptr;
    std::map<std::string, entry> tensors_;
};

/// A checkpoint directory: `model.safetensors`, or shards listed by `model.safetensors.index.json`'s weight_map.
class safetensors_checkpoint {
  public:
    /// Opens every file of the checkpoint in `dir`. Throws invalid_checkpoint naming the file at fault.
    explicit safetensors_checkpoint(const std::string& dir);

    bool contains(const std::string& name) const { return where_.count(name) != 0; }
    /// The tensor `name`; throws invalid_checkpoint "FILE: tensor 'NAME' is missing" if absent.
    tensor_view get(const std::string& name) const;
    /// The tensor `name`, checked to have exactly `shape`; the error names the file, tensor, expected and actual
    /// shapes.
    tensor_view get(const std::string& name, const std::vector<int64_t>& shape) const;
    /// A 2D tensor [rows, cols] as a matrix (shape checked).
    matrix_view get_matrix(const std::string& name, int64_t rows, int64_t cols) const;
    /// A 1D tensor [n] widened to fp32 (shape checked).
    std::vector<float> get_vector(const std::string& name, int64_t n) const;
    /// The file holding `name`, or the main file name if absent (for error messages).
    std::string file_of(const std::string& name) const;
    /// All tensor names.
    std::vector<std::string> names() const;

  private:
    std::string dir_;
    std::string main_file_;  // model.safetensors or the index file: named in "missing tensor" errors
    std::vector<std::unique_ptr<safetensors_file>> files_;
    std::map<std::string, const safetensors_file*> where_;
};

}  // namespace zmoe
