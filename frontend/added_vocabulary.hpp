#pragma once
// The "added_tokens" of tokenizer.json (special tokens such as <|im_start|> and plain added tokens such as
// <think>). They are cut out of the text before anything else, leftmost-longest, as Hugging Face `tokenizers`
// does: tokens with normalized=false are matched on the raw text, the others on the normalized text of what
// remains (their own content normalized the same way). The single_word, lstrip and rstrip flags are honoured.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/normalizer.hpp"
#include "frontend/onig_regex.hpp"

namespace zmoe {

struct added_token {
    std::string content;
    int32_t id = -1;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
    bool special = false;
};

class added_vocabulary {
  public:
    /// A piece of text: an added token (id >= 0) or plain text to encode further (id == -1), as byte offsets.
    struct segment {
        size_t begin;
        size_t end;
        int32_t id;
    };

    added_vocabulary() = default;
    /// `norm` normalizes the content of tokens whose normalized flag is set, so they match normalized text.
    added_vocabulary(std::vector<added_token> tokens, const normalizer& norm);

    /// Cuts `text` at the tokens with normalized=false (raw) or normalized=true (!raw), appending the segments.
    void split(std::string_view text, bool raw, std::vector<segment>& out) const;

    /// True when some token of that kind exists, i.e. split() can do anything.
    bool has_tokens(bool raw) const { return !(raw ? raw_ : normalized_).nodes.empty(); }

    const std::vector<added_token>& tokens() const { return tokens_; }

  private:
    // Byte trie of token contents. Node 0 is the root; its children are in a direct table since every text
    // position probes it.
    struct trie {
        struct node {
            int32_t token = -1;  // index into tokens_ of the token ending here
            std::vector<std::pair<uint8_t, int32_t>> children;
        };
        std::vector<node> nodes;
        std::vector<int32_t> root_child;  // 256 entries once non-empty

        void insert(std::string_view key, int32_t token);
        /// Longest token starting at text[pos]: its index and length, or {-1, 0}.
        std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;
    };

    bool is_word_char(char32_t cp) const;

    std::vector<added_token> tokens_;
    trie raw_, normalized_;
    std::shared_ptr<const onig_regex> word_char_;
};

}  // namespace zmoe
