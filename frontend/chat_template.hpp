#pragma once
// A model's chat template rendered as Hugging Face's tokenizer.apply_chat_template(..., tokenize=False) renders
// it: jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the render variables
// messages, tools (None when absent), documents (None), add_generation_prompt, the tokenizer's special tokens
// (bos_token, eos_token, ...) and the caller's chat_template_kwargs (e.g. enable_thinking); the extra globals
// raise_exception(message) and strftime_now(format); tojson as json.dumps(ensure_ascii=False, indent, sort_keys).
// The messages are first normalised as vLLM's OpenAI server prepares them (chat_messages.hpp), for the message shape
// the template reads (chat_template_shape.hpp).

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "frontend/chat_messages.hpp"
#include "frontend/jinja_template.hpp"

namespace zmoe {

/// One conversation to render (the JSON a client sends).
struct chat_request {
    jinja::json messages = jinja::json::array();  ///< [{"role": ..., "content": ..., ...}, ...]
    jinja::json tools;                            ///< null or a list of tool (function) schemas
    bool add_generation_prompt = false;
    jinja::json chat_template_kwargs = jinja::json::object();  ///< extra render variables
};

/// Parses {"messages": [...], "add_generation_prompt"?: bool, "tools"?: [...], "chat_template_kwargs"?: {...}}
/// (other keys are ignored: the caller validates its own fields). Throws zmoe::error(invalid_argument).
chat_request parse_chat_request(const jinja::json& j);

class chat_template {
  public:
    /// `source` is the Jinja text; `special_tokens` maps bos_token/eos_token/... to their text.
    chat_template(const std::string& source, jinja::json special_tokens);

    /// The template of a tokenizer directory (or of the directory holding a tokenizer.json path): its
    /// chat_template.jinja file when present, else tokenizer_config.json's "chat_template" (a string, or a list of
    /// {name, template} where "default" is taken, "tool_use" when tools are given). nullopt when it has none.
    /// `override_file`, when non-empty, replaces the template text (the special tokens still come from the dir).
    static std::optional<chat_template> from_tokenizer(const std::string& tokenizer_path,
                                                       const std::string& override_file = {});

    /// Renders a conversation, its messages first normalised for the template (normalize_chat_messages with the
    /// template's message_shape). Throws chat_message_error for a malformed or unsupported message, and
    /// jinja::render_error (raise_exception's message, or a template error).
    std::string render(const chat_request& request) const;

    /// The message shape the template reads (the tool_use template's when tools are given and it has one).
    const chat_message_shape& message_shape(bool with_tools = false) const;
    /// Replaces the detected content format (--chat-template-content-format string|openai).
    void set_content_format(chat_content_format format) {
        shape_.content = format;
        tool_use_shape_.content = format;
    }

    /// The clock strftime_now reads (tests fix it; default: now).
    void set_clock(std::function<std::chrono::system_clock::time_point()> clock) { clock_ = std::move(clock); }

  private:
    jinja::jinja_template template_;
    chat_message_shape shape_;
    std::optional<jinja::jinja_template> tool_use_template_;
    chat_message_shape tool_use_shape_;
    jinja::json special_tokens_;
    std::function<std::chrono::system_clock::time_point()> clock_;
};

}  // namespace zmoe
