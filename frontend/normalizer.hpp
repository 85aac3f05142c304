#pragma once
// The tokenizer.json "normalizer": applied to text (outside added tokens) before pre-tokenization, separately to
// each piece of text between added tokens. Supported: null, NFC, NFD, NFKC, NFKD (through ICU), Prepend, Replace
// (String or Regex pattern) and Sequence of these; any other type is refused at load time with errc::unsupported
// naming it.

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/onig_regex.hpp"

namespace zmoe {

/// The pattern and content of a tokenizer.json Replace (normalizer or decoder): every non-overlapping match of
/// the pattern, left to right, is replaced by the content, as HF's NormalizedString::replace does.
struct replace_rule {
    std::string literal;                      // {"String": ...}: matched as is (never empty)
    std::shared_ptr<const onig_regex> regex;  // {"Regex": ...}: matched with Oniguruma, as HF does
    std::string content;

    /// Reads {"type": "Replace", "pattern": {"String"|"Regex": ...}, "content": ...}; `where` names the component
    /// in errors (invalid_checkpoint for a malformed one).
    static replace_rule from_json(const nlohmann::json& j, std::string_view where);

    /// `text` with every match replaced; `text` itself (no copy) when nothing matches.
    std::string_view apply(std::string_view text, std::string& storage) const;
};

class normalizer {
  public:
    enum class form { nfc, nfd, nfkc, nfkd };

    /// One step of a Sequence: a Unicode normalization form, a Prepend or a Replace.
    struct step {
        enum class kind { unicode, prepend, replace } type = kind::unicode;
        form unicode_form = form::nfc;  // unicode
        std::string prepend;            // prepend: added in front of every non-empty text
        replace_rule replace;           // replace
    };

    /// Builds from the "normalizer" value of tokenizer.json (null means identity).
    static normalizer from_json(const nlohmann::json& j);

    normalizer() = default;
    explicit normalizer(std::vector<form> forms);
    explicit normalizer(std::vector<step> steps) : steps_(std::move(steps)) {}

    bool is_identity() const { return steps_.empty(); }

    /// Normalizes valid UTF-8 `text`. Returns `text` itself when nothing changes (the common case for the Unicode
    /// forms, checked without copying), otherwise a view of `storage`, which it overwrites. Empty text stays empty
    /// (Prepend adds nothing to it, as in HF).
    std::string_view normalize(std::string_view text, std::string& storage) const;

  private:
    std::vector<step> steps_;
};

}  // namespace zmoe
