#include "workers/dummy_weights.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"

namespace zmoe {
namespace {

constexpr float kStd = 0.02f;

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
    return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

float normal_value(uint64_t stream, uint64_t i) {
    const uint64_t h = mix64(stream * 0x9e3779b97f4a7c15ull + i);
    const float u1 = (static_cast<float>(h >> 40) + 0.5f) * (1.f / 16777216.f);
    const float u2 = static_cast<float>((h >> 16) & 0xffffff) * (1.f / 16777216.f);
    return std::sqrt(-2.f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

/// The projections that read the normed residual stream, other than the router: with the skew, their column 0 is
/// zero, so feature 0 is a channel only the routers read.
bool dummy_reads_residual(const std::string& name) {
    for (const char* suffix :
         {"q_proj.weight", "k_proj.weight", "v_proj.weight", "q_a_proj.weight", "kv_a_proj_with_mqa.weight",
          "gate_proj.weight", "up_proj.weight", ".w1.weight", ".w3.weight", "shared_expert_gate.weight"})
        if (ends_with(name, suffix)) return true;
    return false;
}

}  // namespace

float dummy_weight_value(const std::string& name, uint64_t i) {
    return bf16_to_f32(f32_to_bf16(kStd * normal_value(fnv1a(name), i)));
}

bool dummy_checkpoint::contains(const std::string& name) const {
    if (name == "lm_head.weight") return !config_.tie_word_embeddings;
    return name.find("block_sparse_moe.") == std::string::npos &&
           name.find("experts.gate_up_proj") == std::string::npos && !ends_with(name, ".w1.weight");
}

float dummy_embed_column0(const model_config& c) { return kStd * std::sqrt(static_cast<float>(c.hidden_size)); }

float dummy_router_column0(const model_config& c, double skew, int64_t layer, int64_t expert) {
    // Variance each element of the residual gains per layer, from the dummy weights' N(0, s^2): a projection of
    // the normed state has variance s^2 * H; attention averages it over ~32 positions before o_proj; an expert's
    // SwiGLU keeps ~1/4 of it before down_proj, and top_k experts are averaged.
    const double s2 = static_cast<double>(kStd) * kStd, H = static_cast<double>(c.hidden_size);
    const double attn = s2 * s2 * H * static_cast<double>(c.num_heads * c.head_dim) / 32.0;
    const double moe = s2 * static_cast<double>(c.moe_intermediate_size) * 0.25 * s2 * H /
                       static_cast<double>(std::max<int64_t>(1, c.num_experts_per_tok));
    const double l = static_cast<double>(layer);
    const double var = s2 + (l + 1) * attn + l * moe;  // the residual the router of `layer` reads
    const double lean = 7.0 * skew / static_cast<double>(c.num_experts - expert);
    return static_cast<float>(lean * kStd * std::sqrt(H * var) / dummy_embed_column0(c));
}

matrix_view dummy_checkpoint::get_matrix(const std::string& name, int64_t rows, int64_t cols) const {
    std::vector<uint16_t>& bits = storage_.emplace_back(static_cast<size_t>(rows * cols));
    const uint64_t stream = fnv1a(name);
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(kStd * normal_value(stream, i));
    if (router_skew_ > 0) {
        if (name == "model.embed_tokens.weight") {
            for (int64_t r = 0; r < rows; ++r) bits[r * cols] = f32_to_bf16(dummy_embed_column0(config_));
        } else if (ends_with(name, "o_proj.weight") || ends_with(name, "down_proj.weight") ||
                   ends_with(name, ".w2.weight")) {
            std::fill(bits.begin(), bits.begin() + cols, uint16_t{0});
        } else if (dummy_reads_residual(name)) {
            for (int64_t r = 0; r < rows; ++r) bits[r * cols] = 0;
        } else if (ends_with(name, "gate.weight") && rows == config_.num_experts &&
                   name.rfind("model.layers.", 0) == 0) {
            const int64_t layer = std::stoll(name.substr(13));
            for (int64_t e = 0; e < rows; ++e)
                bits[e * cols] = f32_to_bf16(dummy_router_column0(config_, router_skew_, layer, e));
        }
    }
    bytes_ += static_cast<int64_t>(bits.size() * 2);
    return {dtype::bf16, reinterpret_cast<const std::byte*>(bits.data()), rows, cols};
}

std::vector<float> dummy_checkpoint::get_vector(const std::string& name, int64_t n) const {
    const bool is_norm = ends_with(name, "norm.weight");
    return std::vector<float>(static_cast<size_t>(n), is_norm ? 1.f : 0.f);
}

tensor_view dummy_checkpoint::get(const std::string& name, const std::vector<int64_t>&) const {
    throw error(errc::invalid_checkpoint, "dummy weights: tensor '" + name + "' is not generated");
}

}  // namespace zmoe
