#pragma once
// Reads one tool call written as a JSON object, {"name": "f", "arguments": {...}}, one byte at a time: the shared
// body of the Hermes/Qwen3, Llama-3 JSON and Mistral formats.
//
// The rule (the same whether the text comes whole or in deltas of any size):
// - When the object starts as `{ "name": STRING, "KEY": {` (any JSON whitespace between; KEY one of the format's
//   argument keys), the call is committed at that `{`: its start (index, id, name) is emitted, then the arguments
//   object's text verbatim, byte by byte as it arrives, until the bracket that closes it. What follows up to the
//   end of the outer object (other keys) belongs to the call and is not content. A text that ends (or reaches the
//   format's end marker) inside the arguments leaves them as far as they were written (a truncated call).
// - Otherwise (other key order, arguments as a string, no arguments) the object is read to its end and parsed:
//   an object with a non-empty string "name" and, under one of the keys, an object (its compact JSON becomes the
//   arguments), a string (taken as the arguments text) or nothing ("{}") is a call; anything else is not a call,
//   and the caller turns its text back into content.

#include <cstdint>
#include <string>
#include <vector>

#include "tool_calls/marker_gate.hpp"
#include "tool_calls/parse_event.hpp"

namespace zmoe::tool_calls {

/// Tracks where a JSON object or array ends: strings, escapes and bracket nesting (not full validation).
class json_scanner {
  public:
    enum class status : uint8_t { running, complete, error };
    /// Feeds one byte; leading whitespace is skipped, the value must start with '{' or '['.
    status push(char c);
    status state() const { return state_; }
    void reset() { *this = json_scanner(); }

  private:
    std::string stack_;  // open brackets
    bool started_ = false, in_string_ = false, escape_ = false;
    status state_ = status::running;
};

class json_call_reader {
  public:
    enum class status : uint8_t { running, call_done, not_a_call };

    explicit json_call_reader(std::vector<std::string> argument_keys);
    /// Ready for a new object; its first byte must be '{'.
    void reset();
    /// Feeds one byte of the object.
    status push(char c, event_sink& out, call_emitter& calls);
    /// The text ended (or the format's end marker came) before the object did: call_done for a committed call,
    /// else not_a_call (or call_done when what was read parses as a call).
    status end(event_sink& out, call_emitter& calls);
    /// The object's text so far.
    const std::string& raw() const { return raw_; }
    /// Whether the call was committed (its start emitted).
    bool committed() const { return phase_ == phase::arguments || phase_ == phase::tail; }

  private:
    enum class phase : uint8_t { header, arguments, tail, whole };
    status finish_whole(event_sink& out, call_emitter& calls);

    std::vector<std::string> keys_;
    phase phase_ = phase::header;
    std::string raw_;
    json_scanner outer_, args_;
};

}  // namespace zmoe::tool_calls
