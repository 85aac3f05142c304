#pragma once
// The tokenizer.json "normalizer": Unicode normalization applied to text (outside added tokens) before
// pre-tokenization. Supported: null, NFC, NFD, NFKC, NFKD (through ICU) and Sequence of these; any other type is
// refused at load time with errc::unsupported naming it.

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace zmoe {

class normalizer {
  public:
    enum class form { nfc, nfd, nfkc, nfkd };

    /// Builds from the "normalizer" value of tokenizer.json (null means identity).
    static normalizer from_json(const nlohmann::json& j);

    normalizer() = default;
    explicit normalizer(std::vector<form> steps) : steps_(std::move(steps)) {}

    bool is_identity() const { return steps_.empty(); }

    /// Normalizes valid UTF-8 `text`. Returns `text` itself when nothing changes (the common case, checked
    /// without copying), otherwise a view of `storage`, which it overwrites.
    std::string_view normalize(std::string_view text, std::string& storage) const;

  private:
    std::vector<form> steps_;
};

}  // namespace zmoe
