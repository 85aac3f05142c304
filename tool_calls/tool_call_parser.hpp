#pragma once
// Tool-call parsers: each turns the content a model writes into content text and tool calls, for the call syntax
// its chat template teaches (docs/tool_calling.md):
//   hermes       Qwen3, Qwen2.5, Hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, repeated
//   deepseek_v3  DeepSeek-V3/R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//                ```json ARGS ```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   llama3_json  Llama 3.1+: an output that is {"name": ..., "parameters": {...}} (optionally after <|python_tag|>),
//                several separated by ';'
//   mistral      Mistral, Mixtral: [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
// A parser is a byte-at-a-time state machine: what it emits depends only on the bytes, never on how they were cut
// into deltas, so the concatenated stream equals the whole-text parse exactly. Malformed calls become content.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "tool_calls/parse_event.hpp"

namespace zmoe::tool_calls {

enum class tool_call_format : uint8_t { hermes, deepseek_v3, llama3_json, mistral };

/// vLLM's --tool-call-parser names: "hermes" (also "qwen3"), "deepseek_v3", "llama3_json" (also "llama3"),
/// "mistral". nullopt for anything else.
std::optional<tool_call_format> tool_call_format_from_name(std::string_view name);
const char* tool_call_format_name(tool_call_format f);

class tool_call_parser {
  public:
    explicit tool_call_parser(std::function<std::string()> make_id) : calls_(std::move(make_id)) {}
    virtual ~tool_call_parser() = default;

    /// Feeds content text; appends its events to `out`.
    void feed(std::string_view text, event_sink& out) {
        for (char c : text) push(c, out);
    }
    /// The end of the text: releases what was held (an unterminated call ends where the text does).
    virtual void finish(event_sink& out) = 0;
    uint32_t num_calls() const { return calls_.num_calls(); }

  protected:
    virtual void push(char c, event_sink& out) = 0;
    call_emitter calls_;
};

/// A parser for `format`; `make_id` gives each call's id (empty: "call_<index>").
std::unique_ptr<tool_call_parser> make_tool_call_parser(tool_call_format format,
                                                        std::function<std::string()> make_id = {});

/// The format a chat template's text teaches, by the markers it writes (nullopt when it shows none).
std::optional<tool_call_format> detect_tool_call_format(std::string_view chat_template_text);

}  // namespace zmoe::tool_calls
