#pragma once
// `--load-format dummy` on the CPU backend (vLLM's name and meaning): every weight a checkpoint of the model would
// hold, generated in memory from config.json alone. Matrices ~ N(0, 0.02^2) (transformers' initializer_range) in
// BF16, drawn from a counter-based hash keyed on the tensor's name, so every rank and every run gets the same
// values without a file; norm weights 1, biases 0. The layout is the per-expert one (experts.E.gate_proj ...).

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "workers/model_config.hpp"
#include "workers/tensor_view.hpp"

namespace zmoe {

/// Answers model_weights' questions as a safetensors_checkpoint would, generating each tensor when asked (so a rank
/// builds only its own experts). The views it returns stay valid as long as it lives.
class dummy_checkpoint {
  public:
    explicit dummy_checkpoint(const model_config& config) : config_(config) {}

    /// Whether a checkpoint in the per-expert layout has `name` (the alternative layouts' names: no).
    bool contains(const std::string& name) const;
    /// A [rows, cols] BF16 matrix of N(0, 0.02^2) values keyed on `name`.
    matrix_view get_matrix(const std::string& name, int64_t rows, int64_t cols) const;
    /// [n] ones for a norm weight, zeros for a bias or a router correction bias.
    std::vector<float> get_vector(const std::string& name, int64_t n) const;
    /// Tensors it does not contain (fused 3D experts): throws invalid_checkpoint.
    tensor_view get(const std::string& name, const std::vector<int64_t>& shape = {}) const;
    /// Bytes of BF16 generated so far.
    int64_t bytes() const { return bytes_; }

  private:
    model_config config_;
    mutable std::deque<std::vector<uint16_t>> storage_;
    mutable int64_t bytes_ = 0;
};

/// Value i of the tensor named `name`: bf16(0.02 * z), z standard normal (Box-Muller over two 24-bit uniforms of
/// splitmix64(fnv1a(name) * golden + i)).
float dummy_weight_value(const std::string& name, uint64_t i);

}  // namespace zmoe
