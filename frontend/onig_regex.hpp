#pragma once
// A compiled Oniguruma regex (UTF-8, default syntax, no options): the engine Hugging Face `tokenizers` uses for
// pre-tokenizer patterns, so Unicode properties (\p{L}), (?i:...) and lookahead behave exactly as there.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zmoe {

class onig_regex {
  public:
    /// Compiles `pattern`; throws zmoe::error(invalid_checkpoint) naming the pattern when it does not compile.
    explicit onig_regex(std::string_view pattern);
    ~onig_regex();
    onig_regex(onig_regex&& other) noexcept
        : reg_(std::exchange(other.reg_, nullptr)), pattern_(std::move(other.pattern_)) {}
    onig_regex& operator=(onig_regex&& other) noexcept;
    onig_regex(const onig_regex&) = delete;
    onig_regex& operator=(const onig_regex&) = delete;

    /// Appends the [begin, end) byte ranges of successive non-overlapping matches in `text`, left to right. An
    /// empty match right after the previous match is skipped by advancing one character (as the `onig` crate's
    /// find_iter does). Safe to call from several threads at once.
    void find_all(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& matches) const;

    const std::string& pattern() const { return pattern_; }

  private:
    void* reg_ = nullptr;  // regex_t*; kept opaque so that only onig_regex.cpp includes oniguruma.h
    std::string pattern_;
};

}  // namespace zmoe
