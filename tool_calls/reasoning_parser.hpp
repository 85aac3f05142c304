#pragma once
// Reasoning parsers (vLLM's --reasoning-parser): the thinking a model writes between <think> and </think> is
// reasoning (reasoning_content), the rest content.
//   qwen3        Qwen3: the output may open with <think>; if it does, the text up to </think> is reasoning. An
//                output that does not start with <think> is all content.
//   deepseek_r1  DeepSeek-R1: the template opens <think> in the prompt, so the output starts inside the thinking
//                (a leading <think> the model repeats is dropped); the text up to </think> is reasoning, all of it
//                when </think> never comes.
// Byte-at-a-time like the tool-call parsers: the stream's concatenation equals the whole-text result.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tool_calls/marker_gate.hpp"
#include "tool_calls/parse_event.hpp"

namespace zmoe::tool_calls {

enum class reasoning_format : uint8_t { qwen3, deepseek_r1 };

/// "qwen3", "deepseek_r1"; nullopt for anything else.
std::optional<reasoning_format> reasoning_format_from_name(std::string_view name);
const char* reasoning_format_name(reasoning_format f);
/// The reasoning format a chat template's text shows: DeepSeek-R1's template ends its generation prompt with
/// <think>; Qwen3's switches thinking with enable_thinking. nullopt otherwise.
std::optional<reasoning_format> detect_reasoning_format(std::string_view chat_template_text);

class reasoning_parser {
  public:
    explicit reasoning_parser(reasoning_format format);
    /// Feeds text: reasoning events into `out`; the content part is appended to `content` (for the tool-call
    /// parser), not emitted.
    void feed(std::string_view text, event_sink& out, std::string& content);
    void finish(event_sink& out, std::string& content);

  private:
    enum class state : uint8_t { start, thinking, content };
    reasoning_format format_;
    state state_ = state::start;
    std::string held_;  // start: a possible prefix of <think>
    marker_gate end_{{"</think>"}};
};

}  // namespace zmoe::tool_calls
