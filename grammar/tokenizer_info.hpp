#pragma once
// The vocabulary as the grammar engine sees it: each token id's bytes (byte-level BPE tokens already mapped back to
// raw bytes), the stop ids (EOS and the like: allowed only where the grammar can end) and the special ids (never
// text). The text tokens are kept sorted by their bytes with each one's common prefix length with the one before:
// walking them in that order is a depth-first walk of the vocabulary trie, and a prefix shared with the previous
// token need not be matched again. Independent of zmoe_frontend: the caller passes the bytes
// (tokenizer::token_bytes for each id).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zmoe::grammar {

class tokenizer_info {
  public:
    /// `token_bytes[id]` is the token's raw bytes (empty for ids without a token). Stop and special ids are never
    /// matched as text. To cover a model whose logits are wider than the tokenizer (Qwen3: 151 936 rows, 151 669
    /// tokens), pass `token_bytes` padded with empty strings to that width: those ids are never allowed. Throws
    /// zmoe::error(invalid_argument) for a stop id outside the vocabulary.
    tokenizer_info(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids,
                   const std::vector<int32_t>& special_ids = {});

    int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
    /// uint32 words of a bitmask over the vocabulary (bit i of word i/32 is token i).
    size_t bitmask_words() const { return (bytes_.size() + 31) / 32; }
    const std::string& token_bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
    const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
    bool is_stop(int32_t id) const { return kind_[static_cast<size_t>(id)] == 1; }
    /// A token that can be matched as text (non-empty, neither stop nor special).
    bool is_text(int32_t id) const { return kind_[static_cast<size_t>(id)] == 0; }

    /// The text tokens sorted by bytes, and each one's common prefix length with the previous in that order.
    const std::vector<int32_t>& sorted_ids() const { return sorted_; }
    const std::vector<int32_t>& sorted_lcp() const { return lcp_; }
    /// The bytes of sorted_ids()[i], stored contiguously in sorted order (walks read them sequentially).
    std::string_view sorted_token(int32_t i) const {
        return std::string_view(sorted_bytes_)
            .substr(sorted_begin_[static_cast<size_t>(i)],
                    sorted_begin_[static_cast<size_t>(i) + 1] - sorted_begin_[static_cast<size_t>(i)]);
    }
    /// The first index j > i of sorted_ids() whose common prefix with its predecessor is shorter than `depth`: the
    /// end of the vocabulary-trie subtree below token i's first `depth` bytes. O(log n).
    int32_t subtree_end(int32_t i, int32_t depth) const;
    /// The minimum of sorted_lcp() over [lo, hi) (hi > lo): the common prefix of sorted tokens lo-1 and hi-1.
    int32_t min_lcp(int32_t lo, int32_t hi) const;
    /// The bitmask of all text tokens.
    const std::vector<uint32_t>& text_mask() const { return text_mask_; }
    /// The longest text token, in bytes.
    size_t max_token_bytes() const { return max_bytes_; }

    /// '"' and '\\': bytes that delimit strings in most grammars and are rare inside text tokens. The text tokens
    /// split into the "common" ones, without either, and the "rare" rest: positions whose automata differ only past
    /// such a byte (the insides of two JSON strings followed by different keys) share the walk of the common tokens.
    static bool is_rare_byte(uint8_t b) { return b == '"' || b == '\\'; }
    /// Indices into sorted_ids() of the common (resp. rare) tokens, ascending, and each one's common prefix length
    /// with the one before it in that list.
    const std::vector<int32_t>& common_sorted() const { return common_; }
    const std::vector<int32_t>& common_lcp() const { return common_lcp_; }
    const std::vector<int32_t>& rare_sorted() const { return rare_; }
    const std::vector<int32_t>& rare_lcp() const { return rare_lcp_; }
    /// The longest common (resp. rare) token, in bytes.
    size_t max_common_token_bytes() const { return max_common_bytes_; }
    size_t max_rare_token_bytes() const { return max_rare_bytes_; }
    /// The common tokens longer than `depth` bytes (depth <= max_common_token_bytes()), as common_sorted() does, with
    /// their common prefixes within this list.
    const std::vector<int32_t>& common_longer_than(size_t depth) const { return longer_[depth]; }
    const std::vector<int32_t>& common_longer_than_lcp(size_t depth) const { return longer_lcp_[depth]; }
    /// The first index of sorted_ids() whose token starts with a byte >= `b` (0 <= b <= 256).
    int32_t first_starting_at_least(int b) const { return first_at_least_[static_cast<size_t>(b)]; }
    size_t sorted_token_size(int32_t i) const {
        return sorted_begin_[static_cast<size_t>(i) + 1] - sorted_begin_[static_cast<size_t>(i)];
    }

  private:
    std::vector<std::string> bytes_;
    std::vector<int32_t> stop_ids_;
    std::vector<uint8_t> kind_;  // 0 text, 1 stop, 2 special or empty
    std::vector<int32_t> sorted_, lcp_;
    std::string sorted_bytes_;
    std::vector<uint32_t> sorted_begin_;
    std::vector<uint32_t> text_mask_;
    std::vector<std::vector<int32_t>> lcp_min_;
    size_t max_bytes_ = 0, max_common_bytes_ = 0, max_rare_bytes_ = 0;
    std::vector<int32_t> common_, common_lcp_, rare_, rare_lcp_;
    std::vector<std::vector<int32_t>> longer_, longer_lcp_;
    std::vector<int32_t> first_at_least_;  // [257]  // sparse table: lcp_min_[k][i] = min lcp_[i, i + 2^k)
};

}  // namespace zmoe::grammar
