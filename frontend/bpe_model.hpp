#pragma once
// The tokenizer.json "model" of type BPE: a vocabulary (token -> id) and ranked merges. Encoding one
// pre-tokenized piece starts from single units (bytes for byte-level vocabularies, characters otherwise) and
// repeatedly applies the lowest-ranked merge among adjacent pairs, leftmost first on ties — the same order as
// Hugging Face `tokenizers` — using a min-heap over a linked list of symbols, so a piece of n units costs
// O(n log n) however repetitive it is. Results for short pieces are cached.

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace zmoe {

/// Transparent string hash so that maps keyed by std::string can be probed with std::string_view.
struct string_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

class bpe_model {
  public:
    /// Builds from the "model" value of tokenizer.json. With `byte_level`, vocabulary entries are read in GPT-2's
    /// byte-level alphabet and pieces are encoded as raw bytes. Throws zmoe::error: unsupported for options
    /// zmoe does not implement (dropout, subword prefixes/suffixes), invalid_checkpoint for malformed data
    /// (a merge whose parts or result are not in the vocabulary).
    static bpe_model from_json(const nlohmann::json& model, bool byte_level);

    bpe_model(bpe_model&&) noexcept;
    bpe_model& operator=(bpe_model&&) noexcept;
    ~bpe_model();

    /// Appends the ids of one non-empty piece (raw UTF-8 bytes) to `out`. Thread-safe.
    void encode(std::string_view piece, std::vector<int32_t>& out) const;

    /// Id of a vocabulary entry given as spelled in tokenizer.json.
    std::optional<int32_t> token_to_id(std::string_view spelling) const;

    /// Spelling (as in tokenizer.json) of every id below num_ids(); empty for ids the vocabulary lacks.
    const std::vector<std::string>& spellings() const { return spellings_; }
    const std::vector<bool>& has_id() const { return has_id_; }
    int32_t num_ids() const { return static_cast<int32_t>(spellings_.size()); }
    size_t num_merges() const { return num_merges_; }
    bool byte_level() const { return byte_level_; }

  private:
    bpe_model();

    struct merge_value {
        int32_t rank;
        int32_t new_id;
    };
    class merge_table;
    struct cache;

    const merge_value* find_merge(int32_t left, int32_t right) const;
    void merge_word(std::string_view piece, std::vector<int32_t>& out) const;
    void initial_symbols(std::string_view piece, std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const;

    bool byte_level_ = false;
    bool ignore_merges_ = false;
    bool byte_fallback_ = false;
    bool fuse_unk_ = false;
    std::optional<int32_t> unk_id_;
    std::vector<std::string> spellings_;
    std::vector<bool> has_id_;
    std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>> by_spelling_;
    std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>> by_bytes_;  // byte-level only
    std::array<int32_t, 256> byte_ids_{};      // byte-level only: id of each single byte, -1 if missing
    std::array<int32_t, 256> fallback_ids_{};  // byte_fallback: id of "<0xXX>", -1 if missing
    std::unique_ptr<merge_table> merges_;
    size_t num_merges_ = 0;
    std::unique_ptr<cache> cache_;
};

}  // namespace zmoe
