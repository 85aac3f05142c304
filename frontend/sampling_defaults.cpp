#include "frontend/sampling_defaults.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.hpp"
#include "messages/sampling_codec.hpp"

namespace zmoe {
namespace {

[[noreturn]] void bad(const std::string& what) { throw error(errc::invalid_argument, what); }

bool finite_in(float v, float lo, float hi) { return std::isfinite(v) && v >= lo && v <= hi; }

}  // namespace

sampling_defaults sampling_defaults::load(const std::string& model_dir) {
    sampling_defaults d;
    const auto path = std::filesystem::path(model_dir) / "generation_config.json";
    std::ifstream in(path);
    if (!in) return d;
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
        if (j.contains("temperature") && j["temperature"].is_number()) d.temperature = j["temperature"].get<float>();
        if (j.contains("top_p") && j["top_p"].is_number()) d.top_p = j["top_p"].get<float>();
        if (j.contains("top_k") && j["top_k"].is_number()) d.top_k = std::max(0, j["top_k"].get<int32_t>());
        if (j.contains("min_p") && j["min_p"].is_number()) d.min_p = j["min_p"].get<float>();
        if (j.contains("repetition_penalty") && j["repetition_penalty"].is_number())
            d.repetition_penalty = j["repetition_penalty"].get<float>();
    } catch (const nlohmann::json::exception& e) {
        bad(path.string() + ": " + e.what());
    }
    return d;
}

sampling_params resolve_sampling(const client_generate& m, const sampling_defaults& d, int64_t vocab_size) {
    sampling_params s;
    s.temperature = m.temperature.value_or(d.temperature);
    s.top_p = m.top_p.value_or(d.top_p);
    const int32_t top_k = m.top_k.value_or(d.top_k);
    s.min_p = m.min_p.value_or(d.min_p);
    s.repetition_penalty = m.repetition_penalty.value_or(d.repetition_penalty);
    s.presence_penalty = m.presence_penalty;
    s.frequency_penalty = m.frequency_penalty;
    s.min_tokens = m.min_tokens;
    if (!std::isfinite(s.temperature) || s.temperature < 0.f) bad("temperature must be a finite number >= 0");
    if (!finite_in(s.top_p, 0.f, 1.f) || s.top_p == 0.f) bad("top_p must be in (0, 1]");
    if (top_k < -1) bad("top_k must be -1, 0 or > 0");
    s.top_k = top_k < 0 ? 0 : top_k;
    if (!finite_in(s.min_p, 0.f, 1.f)) bad("min_p must be in [0, 1]");
    if (!finite_in(s.presence_penalty, -2.f, 2.f)) bad("presence_penalty must be in [-2, 2]");
    if (!finite_in(s.frequency_penalty, -2.f, 2.f)) bad("frequency_penalty must be in [-2, 2]");
    if (!std::isfinite(s.repetition_penalty) || s.repetition_penalty <= 0.f)
        bad("repetition_penalty must be a finite number > 0");
    if (m.logprobs) {
        if (*m.logprobs > kMaxTopLogprobs) bad("logprobs must be at most " + std::to_string(kMaxTopLogprobs));
        s.logprobs = static_cast<int32_t>(*m.logprobs);
    }
    if (m.logit_bias.size() > kMaxLogitBias)
        bad("logit_bias has more than " + std::to_string(kMaxLogitBias) + " entries");
    std::set<int32_t> seen;
    for (const auto& [id, bias] : m.logit_bias) {
        if (id < 0 || (vocab_size > 0 && id >= vocab_size))
            bad("logit_bias token " + std::to_string(id) + " is outside the vocabulary");
        if (!seen.insert(id).second) bad("logit_bias names token " + std::to_string(id) + " twice");
        if (!std::isfinite(bias)) bad("logit_bias values must be finite");
        s.logit_bias_ids.push_back(id);
        s.logit_bias_values.push_back(std::clamp(bias, -100.f, 100.f));  // OpenAI's range
    }
    if (m.stop_token_ids.size() > kMaxStopTokenIds)
        bad("more than " + std::to_string(kMaxStopTokenIds) + " stop_token_ids");
    for (int32_t id : m.stop_token_ids)
        if (id < 0 || (vocab_size > 0 && id >= vocab_size))
            bad("stop_token_ids: " + std::to_string(id) + " is outside the vocabulary");
    return s;
}

}  // namespace zmoe
