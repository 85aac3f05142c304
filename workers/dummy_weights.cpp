#include "workers/dummy_weights.hpp"

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

}  // namespace

float dummy_weight_value(const std::string& name, uint64_t i) {
    return bf16_to_f32(f32_to_bf16(kStd * normal_value(fnv1a(name), i)));
}

bool dummy_checkpoint::contains(const std::string& name) const {
    if (name == "lm_head.weight") return !config_.tie_word_embeddings;
    return name.find("block_sparse_moe.") == std::string::npos &&
           name.find("experts.gate_up_proj") == std::string::npos && !ends_with(name, ".w1.weight");
}

matrix_view dummy_checkpoint::get_matrix(const std::string& name, int64_t rows, int64_t cols) const {
    std::vector<uint16_t>& bits = storage_.emplace_back(static_cast<size_t>(rows * cols));
    const uint64_t stream = fnv1a(name);
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(kStd * normal_value(stream, i));
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
