#pragma once
// `--load-format dummy` on the CPU backend (vLLM's name and meaning): every weight a checkpoint of the model would
// hold, generated in memory from config.json alone. Matrices ~ N(0, 0.02^2) (transformers' initializer_range) in
// BF16, drawn from a counter-based hash keyed on the tensor's name, so every rank and every run gets the same
// values without a file; norm weights 1, biases 0. The layout is the per-expert one (experts.E.gate_proj ...).

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "workers/tensor_view.hpp"

namespace zmoe {

/// Answers model_weights' questions as a safetensors_checkpoint would, generating each tensor when asked (so a rank
/// builds only its own experts). The views it returns stay valid as long as it lives.
class dummy_checkpoint {
  public:
    /// router_skew > 0: the weights get hot experts (dummy_router_skew_column0).
    explicit dummy_checkpoint(const model_config& config, double router_skew = 0)
        : config_(config), router_skew_(router_skew) {}

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
    double router_skew_ = 0;
    mutable std::deque<std::vector<uint16_t>> storage_;
    mutable int64_t bytes_ = 0;
};

/// `--dummy-router-skew` (both backends): dummy weights that route like a model with hot experts, for EPLB. Feature
/// 0 of the residual stream becomes a channel only the routers read: the embedding puts dummy_embed_column0 there
/// in every row (a component every token shares), every matrix that writes into the residual (attention output,
/// dense and expert down projections) has a zero row 0, and every other matrix that reads the normed residual
/// (q/k/v and the latent projections, gate/up projections, the shared expert's gate) a zero column 0, so attention
/// and the MLPs see the plain dummy model. Column 0 of expert e's router row in decoder layer `layer` is
/// dummy_router_column0, sized so that after the RMS norm expert e's logit leans by about 7 * skew / (E - e)
/// standard deviations of its random part in every layer (the rest of the residual grows with depth: the size
/// follows an estimate of that growth from the model's dimensions). So the highest expert ids win most routings:
/// all on the last rank of the fixed placement, and none among the experts the initial placement replicates into
/// redundant slots (expert_placement::initial: slot p holds p mod E, so ids 0, 1, ...).
float dummy_embed_column0(const model_config& c);
float dummy_router_column0(const model_config& c, double skew, int64_t layer, int64_t expert);

/// Value i of the tensor named `name`: bf16(0.02 * z), z standard normal (Box-Muller over two 24-bit uniforms of
/// splitmix64(fnv1a(name) * golden + i)).
float dummy_weight_value(const std::string& name, uint64_t i);

}  // namespace zmoe
