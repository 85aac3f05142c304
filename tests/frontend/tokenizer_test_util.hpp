#pragma once
// Shared helpers of the tokenizer tests: where the real vocabularies and the HF fixtures are, and a per-process
// cache of loaded tokenizers (loading one takes a fraction of a second; many tests use the same four).

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/tokenizer.hpp"

namespace zmoe::testing {

/// The byte-level vocabularies (scripts/fetch_tokenizers.sh), which the tests parameterized over vocabularies cover.
inline const std::vector<std::string>& vocabulary_names() {
    static const std::vector<std::string> names{"qwen3", "deepseek_v3", "llama3", "gpt4o"};
    return names;
}

inline std::filesystem::path vocabulary_dir(const std::string& name) {
    return std::filesystem::path(ZMOE_SOURCE_DIR) / "third_party" / "tokenizers" / name;
}

inline std::filesystem::path fixture_dir() { return std::filesystem::path(ZMOE_FIXTURES_DIR) / "tokenizer"; }

/// The vocabularies checked against the HF fixtures: every byte-level one (their fixtures are required), plus the
/// SentencePiece-style llama2 (Mistral/Mixtral's file) once tests/fixtures/tokenizer/llama2.json has been generated
/// into the tree (scripts/make_tokenizer_fixtures.py); from then on its fixtures are required like the others.
inline std::vector<std::string> fixture_vocabulary_names() {
    std::vector<std::string> names = vocabulary_names();
    if (std::filesystem::exists(fixture_dir() / "llama2.json")) names.push_back("llama2");
    return names;
}

/// The real tokenizer `name`, loaded once per process. Fails the test (fatally) when the vocabulary is missing:
/// scripts/fetch_tokenizers.sh (run by scripts/setup.sh) fetches them.
inline const tokenizer& real_tokenizer(const std::string& name) {
    static std::mutex mu;
    static std::map<std::string, std::unique_ptr<tokenizer>> loaded;
    std::lock_guard lock(mu);
    auto& slot = loaded[name];
    if (!slot) {
        const auto dir = vocabulary_dir(name);
        if (!std::filesystem::exists(dir / "tokenizer.json"))
            throw std::runtime_error("missing " + (dir / "tokenizer.json").string() +
                                     ": run scripts/fetch_tokenizers.sh");
        slot = std::make_unique<tokenizer>(tokenizer::from_file(dir));
    }
    return *slot;
}

inline std::string read_text_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// Name for parameterized tests over vocabularies.
struct vocabulary_param_name {
    std::string operator()(const ::testing::TestParamInfo<std::string>& info) const { return info.param; }
};

}  // namespace zmoe::testing
