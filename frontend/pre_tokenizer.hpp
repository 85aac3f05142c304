#pragma once
// The tokenizer.json "pre_tokenizer": cuts normalized text into pieces that BPE encodes independently.
// Supported: null, Split (Regex or String pattern; behaviours Isolated, Removed, MergedWithPrevious,
// MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space, use_regex with the GPT-2 pattern), Metaspace
// (SentencePiece's "▁" for spaces; prepend_scheme always/first/never, split) and Sequence of these, where each stage
// applies to every piece of the stage before. Other types are refused at load time with errc::unsupported naming
// them.
//
// ByteLevel's byte-to-character mapping itself is not done here: zmoe keeps pieces as raw bytes and the BPE
// model reads its vocabulary in raw bytes instead (see byte_level.hpp); byte_level() tells the model which.

#include <deque>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/onig_regex.hpp"

namespace zmoe {

class pre_tokenizer {
  public:
    enum class split_behavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

    struct stage {
        enum class kind { split_regex, split_string, byte_level, metaspace } type;
        std::shared_ptr<const onig_regex> regex;  // split_regex, and byte_level with use_regex
        std::string literal;                      // split_string
        split_behavior behavior = split_behavior::isolated;
        bool invert = false;
        bool add_prefix_space = false;  // byte_level
        // metaspace: spaces become `literal` (the replacement, "▁"), which is prepended to pieces that do not start
        // with it (prepend_scheme always; first: only to the piece at the start of the input text; never), and the
        // pieces are then split before each replacement when `metaspace_split`.
        enum class prepend_scheme { always, first, never } prepend = prepend_scheme::always;
        bool metaspace_split = true;
    };

    /// Builds from the "pre_tokenizer" value of tokenizer.json (null: the whole text is one piece).
    static pre_tokenizer from_json(const nlohmann::json& j);

    /// Appends the non-empty pieces of `text` to `pieces`, in order. Pieces are views into `text` or into
    /// `storage`, which grows (it is a deque, so earlier views stay valid) only when a stage rewrites a piece.
    /// `at_input_start` says whether `text` begins at offset 0 of the whole input (Metaspace's prepend_scheme first
    /// prepends only there; text after an added token does not qualify).
    void split(std::string_view text, std::vector<std::string_view>& pieces, std::deque<std::string>& storage,
               bool at_input_start = true) const;

    /// True when a ByteLevel stage is present: BPE then works on bytes rather than characters.
    bool byte_level() const { return byte_level_; }

    const std::vector<stage>& stages() const { return stages_; }

  private:
    std::vector<stage> stages_;
    bool byte_level_ = false;
};

}  // namespace zmoe
