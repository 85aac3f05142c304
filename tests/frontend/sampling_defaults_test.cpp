#include "frontend/sampling_defaults.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.hpp"

namespace zmoe {
namespace {

namespace fs = std::filesystem;

struct temp_model_dir {
    fs::path path = fs::temp_directory_path() / ("zmoe_sampling_defaults_" + std::to_string(::getpid()));
    temp_model_dir() { fs::create_directories(path); }
    ~temp_model_dir() { fs::remove_all(path); }
    void write(const std::string& json) const { std::ofstream(path / "generation_config.json") << json; }
};

int32_t code_of(const client_generate& g, const sampling_defaults& d = {}) {
    try {
        resolve_sampling(g, d, 1000);
    } catch (const error& e) {
        return static_cast<int32_t>(e.code());
    }
    return -1;
}

TEST(SamplingDefaults, VllmDefaultsWithoutGenerationConfig) {
    temp_model_dir dir;
    const sampling_defaults d = sampling_defaults::load(dir.path.string());
    const sampling_params s = resolve_sampling(client_generate{}, d, 1000);
    EXPECT_EQ(s.temperature, 1.f);
    EXPECT_EQ(s.top_p, 1.f);
    EXPECT_EQ(s.top_k, 0);
    EXPECT_EQ(s.min_p, 0.f);
    EXPECT_EQ(s.repetition_penalty, 1.f);
    EXPECT_EQ(s.presence_penalty, 0.f);
    EXPECT_EQ(s.frequency_penalty, 0.f);
    EXPECT_EQ(s.logprobs, -1);
    EXPECT_EQ(client_generate{}.max_tokens, 16u);
}

TEST(SamplingDefaults, GenerationConfigFillsWhatTheClientLeavesUnset) {
    temp_model_dir dir;
    // Qwen3's generation_config.json, plus the two other fields vLLM reads.
    dir.write(R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
                  "temperature": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0.01, "repetition_penalty": 1.05,
                  "transformers_version": "4.51.0"})");
    const sampling_defaults d = sampling_defaults::load(dir.path.string());
    sampling_params s = resolve_sampling(client_generate{}, d, 1000);
    EXPECT_FLOAT_EQ(s.temperature, 0.6f);
    EXPECT_EQ(s.top_k, 20);
    EXPECT_FLOAT_EQ(s.top_p, 0.95f);
    EXPECT_FLOAT_EQ(s.min_p, 0.01f);
    EXPECT_FLOAT_EQ(s.repetition_penalty, 1.05f);
    client_generate g;  // what the client sets wins
    g.temperature = 0.f;
    g.top_k = -1;
    g.top_p = 1.f;
    g.min_p = 0.f;
    g.repetition_penalty = 1.f;
    s = resolve_sampling(g, d, 1000);
    EXPECT_EQ(s.temperature, 0.f);
    EXPECT_EQ(s.top_k, 0);
    EXPECT_EQ(s.top_p, 1.f);
    EXPECT_EQ(s.min_p, 0.f);
    EXPECT_EQ(s.repetition_penalty, 1.f);
    dir.write("{not json");
    EXPECT_THROW(sampling_defaults::load(dir.path.string()), error);
}

TEST(SamplingDefaults, ParametersReachTheEngine) {
    client_generate g;
    g.presence_penalty = 0.5f;
    g.frequency_penalty = -0.25f;
    g.min_tokens = 3;
    g.logprobs = 4;
    g.logit_bias = {{7, 2.5f}, {9, -300.f}};
    const sampling_params s = resolve_sampling(g, {}, 1000);
    EXPECT_EQ(s.presence_penalty, 0.5f);
    EXPECT_EQ(s.frequency_penalty, -0.25f);
    EXPECT_EQ(s.min_tokens, 3u);
    EXPECT_EQ(s.logprobs, 4);
    EXPECT_EQ(s.logit_bias_ids, (std::vector<int32_t>{7, 9}));
    EXPECT_EQ(s.logit_bias_values, (std::vector<float>{2.5f, -100.f}));  // clamped to [-100, 100] as vLLM
}

TEST(SamplingDefaults, OutOfRangeFieldsAreRefused) {
    const int32_t bad = static_cast<int32_t>(errc::invalid_argument);
    auto with = [](auto set) {
        client_generate g;
        set(g);
        return g;
    };
    EXPECT_EQ(code_of(with([](client_generate& g) { g.temperature = -1.f; })), bad);
    EXPECT_EQ(code_of(with([](client_generate& g) { g.top_p = 0.f; })), bad);
    EXPECT_EQ(code_of(with([](client_generate& g) { g.top_k = -2; })), bad);
    EXPECT_EQ(code_of(with([](client_generate& g) { g.min_p = 1.5f; })), bad);
    EXPECT_EQ(code_of(with([](client_generate& g) { g.presence_penalty = 2.5f; })), bad);
    EXPECT_EQ(code_of(with([](client_generate& g) { g.frequency_penalty = -3.f; })), bad);
    EXPECT_EQ(code_of(with([](client_generate& g) { g.repetition_penalty = 0.f; })), bad);
    EXPECT_EQ(code_of(with([](client_generate& g) { g.logprobs = 21; })), bad);
    EXPECT_EQ(code_of(with([](client_generate& g) { g.logit_bias = {{1000, 1.f}}; })), bad);
    EXPECT_EQ(code_of(with([](client_generate& g) { g.logit_bias = {{5, 1.f}, {5, 2.f}}; })), bad);
    EXPECT_EQ(code_of(with([](client_generate& g) { g.stop_token_ids = {-1}; })), bad);
    EXPECT_EQ(code_of(with([](client_generate& g) { g.logprobs = 20; })), -1);
    // A bad default from generation_config is refused as well (the request names the field).
    EXPECT_EQ(code_of(client_generate{}, sampling_defaults{.top_p = 0.f}), bad);
}

}  // namespace
}  // namespace zmoe
