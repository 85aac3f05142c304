#pragma once
// One choice's output parsed into reasoning, content and tool calls: the reasoning parser first (a tool-call marker
// inside the thinking is thinking text, not a call), then the tool-call parser over the content that follows.
// Streaming (feed each delta, then finish) and whole-text (parse) give the same result for every output and every
// way of cutting it into deltas: both run the same byte-at-a-time machines, which hold back only the bytes that may
// still begin a marker (tests/tool_calls/output_parser_test.cpp checks it over random outputs).

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tool_calls/parse_event.hpp"
#include "tool_calls/reasoning_parser.hpp"
#include "tool_calls/tool_call_parser.hpp"

namespace zmoe::tool_calls {

struct output_parser_options {
    std::optional<tool_call_format> tools;      ///< nullopt: no tool-call parsing (content as written)
    std::optional<reasoning_format> reasoning;  ///< nullopt: no reasoning split
    std::function<std::string()> make_id = {};  ///< each call's id (empty: "call_<index>")
};

class output_parser {
  public:
    explicit output_parser(const output_parser_options& options);

    /// The events of the next delta of text.
    std::vector<parse_event> feed(std::string_view text);
    /// The events of the end of the text (what was held back).
    std::vector<parse_event> finish();
    uint32_t num_calls() const { return tools_ ? tools_->num_calls() : 0; }

    /// The whole text at once.
    static parsed_output parse(std::string_view text, const output_parser_options& options);

  private:
    void content(const std::string& text);
    std::optional<reasoning_parser> reasoning_;
    std::unique_ptr<tool_call_parser> tools_;
    event_sink sink_;
    std::string content_;  // scratch
};

}  // namespace zmoe::tool_calls
