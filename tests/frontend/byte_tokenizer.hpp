#pragma once
// A byte-level BPE tokenizer.json of 256 ids, one per byte and no merges, for tests that need text prompts on the
// tiny model fixtures: every byte of a prompt is one token, all inside any fixture's vocabulary; no chat template.

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "frontend/byte_level.hpp"

namespace zmoe::test {

/// Writes that tokenizer.json to `path`.
inline void write_byte_level_tokenizer(const std::string& path) {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_level::to_chars(std::string(1, static_cast<char>(b)))] = b;
    const nlohmann::json tok = {
        {"version", "1.0"},
        {"added_tokens", nlohmann::json::array()},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
    std::ofstream(path) << tok.dump();
}

}  // namespace zmoe::test
