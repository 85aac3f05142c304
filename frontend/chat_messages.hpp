#pragma once
// OpenAI chat messages normalised for a Hugging Face chat template, as vLLM's OpenAI server prepares them
// (vllm/entrypoints/chat_utils.py, parse_chat_messages) before apply_chat_template: content parts joined into
// one string ("\n" between text parts) for templates that read content as a string, or kept as a list of
// {"type": "text", "text"} parts for templates that iterate over it; null content as "" (or []); tool_calls'
// JSON-string arguments parsed into objects. Two deviations, both so that a template's own tool-call syntax
// renders (docs/chat_templates.md): templates that test `message.content is none` keep a null content, and
// templates that concatenate `arguments` with `+`/`~` get the arguments as JSON text. Media parts (images,
// audio, video, files) are refused: the served models take text only. Every refusal names its field.

#include <cstdint>
#include <optional>
#include <string>

#include "base/error.hpp"
#include "frontend/jinja_value.hpp"

namespace zmoe {

/// How a template reads a message's content (vLLM's --chat-template-content-format).
enum class chat_content_format : uint8_t {
    string,  ///< content is one string: text parts joined with "\n"
    openai,  ///< content is a list of {"type": "text", "text": ...} parts (the template iterates over it)
};

/// The message shape a chat template reads (chat_template_shape.hpp detects it from the template's syntax).
struct chat_message_shape {
    chat_content_format content = chat_content_format::string;
    bool null_content = false;      ///< a null or missing content stays null (the template tests `is none`)
    bool string_arguments = false;  ///< tool_calls[].function.arguments stay JSON text (the template concatenates)
};

/// vLLM's --chat-template-content-format values: "auto" (nullopt: what the template's syntax shows), "string",
/// "openai". Throws error(invalid_argument) naming the flag for anything else.
std::optional<chat_content_format> parse_content_format(const std::string& option);

/// The shape in words, for logs: "content format string, null content as \"\", tool-call arguments as objects".
std::string describe(const chat_message_shape& shape);

/// A malformed or unsupported message: errc::invalid_argument, its what() "FIELD: reason".
class chat_message_error : public error {
  public:
    chat_message_error(std::string field, const std::string& reason)
        : error(errc::invalid_argument, field + ": " + reason), field_(std::move(field)) {}
    /// The offending field as a path, e.g. "messages[2].content[0].type".
    const std::string& field() const { return field_; }

  private:
    std::string field_;
};

/// The roles a message may have: OpenAI's system, developer, user, assistant, tool and function.
bool is_chat_role(const std::string& role);

/// `messages` (the request's JSON array) as the template receives them. Each message: "role" (is_chat_role);
/// "content": a string, null/absent, or a list of parts (strings or objects of type text, input_text,
/// output_text, refusal, thinking); "name" (string); assistant: "tool_calls" [{"id"?, "type"?: "function",
/// "function": {"name", "arguments"?: JSON text or object}}], "reasoning"/"reasoning_content" (string); tool:
/// "tool_call_id" (string); null "refusal", "audio", "function_call" and empty "annotations" (what OpenAI
/// clients echo back) are dropped. Anything else is refused. Throws chat_message_error.
jinja::json normalize_chat_messages(const jinja::json& messages, const chat_message_shape& shape = {});

}  // namespace zmoe
