#pragma once
// The prompt of a chat request (client_generate.chat): its conversation rendered by the model's chat template and
// tokenized without adding special tokens, as Hugging Face's apply_chat_template(..., tokenize=True) does (the
// template writes the BOS token itself where the model wants one).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "frontend/chat_template.hpp"
#include "frontend/tokenizer.hpp"

namespace zmoe {

/// Renders `chat_json` ({"messages": [...], ...}) and tokenizes the rendering. Throws zmoe::error(invalid_argument)
/// for malformed JSON or fields, a template that raises, or a model without a chat template.
std::vector<int32_t> chat_prompt_ids(const std::optional<chat_template>& tmpl, const tokenizer& tok,
                                     const std::string& chat_json);

}  // namespace zmoe
