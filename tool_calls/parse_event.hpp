#pragma once
// What the output parsers (reasoning and tool calls) make of a model's text: a sequence of events, each a piece of
// content, a piece of reasoning, the start of a tool call (its index, id and name) or a fragment of a call's
// arguments. Streaming parsers return the events of each text delta; concatenating them (add_events) gives the same
// parsed_output as parsing the whole text at once (output_parser.hpp states the rules).

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace zmoe::tool_calls {

enum class event_kind : uint8_t {
    content,         ///< text: answer text
    reasoning,       ///< text: thinking text (reasoning_content)
    call_start,      ///< call_index, id, text: the function's name
    call_arguments,  ///< call_index, text: the next fragment of the call's arguments (JSON text)
};

struct parse_event {
    event_kind kind = event_kind::content;
    uint32_t call_index = 0;
    std::string id{};
    std::string text{};
    bool operator==(const parse_event&) const = default;
};

struct tool_call {
    std::string id;
    std::string name;
    std::string arguments;  ///< JSON text
    bool operator==(const tool_call&) const = default;
};

/// Everything parsed from one output.
struct parsed_output {
    std::string content;
    std::string reasoning;
    std::vector<tool_call> calls;
    bool operator==(const parsed_output&) const = default;
};

/// Adds one event to `out` (a call_start appends a call; arguments extend calls[call_index]).
void add_events(parsed_output& out, const parse_event& e);
void add_events(parsed_output& out, const std::vector<parse_event>& events);

/// Collects the events of one feed, merging adjacent pieces of the same kind (and the same call's fragments).
class event_sink {
  public:
    void content(std::string_view text);
    void reasoning(std::string_view text);
    void call_start(uint32_t index, std::string id, std::string name);
    void arguments(uint32_t index, std::string_view text);
    /// The events so far, leaving the sink empty.
    std::vector<parse_event> take();

  private:
    void text(event_kind kind, uint32_t index, std::string_view text);
    std::vector<parse_event> events_;
};

/// Numbers a parser's calls in order and gives each an id.
class call_emitter {
  public:
    /// `make_id`: the id of each new call (OpenAI's look: "call_" and random characters); empty: "call_<index>".
    explicit call_emitter(std::function<std::string()> make_id = {}) : make_id_(std::move(make_id)) {}
    /// Emits a new call's start; returns its index.
    uint32_t start(event_sink& out, std::string name);
    /// The index of the last call started (num_calls() > 0).
    uint32_t current() const { return num_calls_ - 1; }
    uint32_t num_calls() const { return num_calls_; }

  private:
    std::function<std::string()> make_id_;
    uint32_t num_calls_ = 0;
};

}  // namespace zmoe::tool_calls
