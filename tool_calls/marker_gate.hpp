#pragma once
// Finds markers (e.g. "<tool_call>") in text that arrives one byte at a time, holding back only the bytes that may
// still begin a marker, so that a marker split across any delta boundary is found and every other byte is released
// as soon as it cannot be part of one. Optionally the run of whitespace right before a marker is held too and
// handed over with the marker (the parsers drop it when the marker starts a real call).

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace zmoe::tool_calls {

/// Space, tab, newline, carriage return: the whitespace of JSON.
inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

class marker_gate {
  public:
    /// `markers`: none a prefix of another. `hold_space`: also hold the whitespace run before a possible marker.
    explicit marker_gate(std::vector<std::string> markers, bool hold_space = false);

    /// Feeds one byte. Appends what is certainly not part of a marker to `released`. Returns the index of the
    /// marker this byte completes (its bytes and any held whitespace are then consumed: space() gives the
    /// whitespace), or -1.
    int push(char c, std::string& released);
    /// The whitespace that preceded the marker last completed.
    const std::string& space() const { return last_space_; }
    /// Everything held (end of the text, or a change of state): returned and cleared.
    std::string flush();

  private:
    bool is_marker_prefix(std::string_view s) const;
    std::vector<std::string> markers_;
    bool hold_space_;
    std::string space_;  // held whitespace (hold_space_ only)
    std::string held_;   // a proper prefix of some marker
    std::string last_space_;
};

}  // namespace zmoe::tool_calls
