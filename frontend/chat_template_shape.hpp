#pragma once
// The message shape a chat template reads, found in its syntax tree (no rendering):
// - content format (vLLM's "auto" detection): "openai" when the template has a for-loop over a message's content
//   (`{% for part in message['content'] %}`, the message bound by a loop over `messages` or over a variable set
//   from it, through filters, tests and slices), else "string";
// - null content kept when the template tests a message's content with `is none` / `is not none` (DeepSeek-V3's
//   and -R1's templates choose their tool-call branch that way);
// - tool-call arguments as JSON text when the template concatenates an `arguments` attribute or item with `+` or
//   `~` (DeepSeek's templates do; they would raise on, or print Python's repr of, an object).
// scripts/make_chat_fixtures.py applies the same rules to jinja2's syntax tree.

#include "frontend/chat_messages.hpp"
#include "frontend/jinja_ast.hpp"

namespace zmoe {

chat_message_shape detect_message_shape(const jinja::body& statements);

}  // namespace zmoe
