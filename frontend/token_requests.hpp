#pragma once
// The frontend's answers to tokenize and detokenize requests (the gateway's /tokenize and /detokenize): pure
// functions of the tokenizer and chat template, so that they are tested without sockets.

#include <cstddef>
#include <optional>

#include "frontend/chat_template.hpp"
#include "frontend/tokenizer.hpp"
#include "messages/client_protocol.hpp"

namespace zmoe {

/// The ids of m.text (with special tokens as m.add_special_tokens asks), or of m.chat rendered by `tmpl` and
/// tokenized as a chat request's prompt is (chat_prompt.hpp). A failure (no tokenizer, input over
/// max_input_bytes, malformed chat) is a reply with code and message set, never a throw.
client_tokens_reply answer_tokenize(const client_tokenize& m, const tokenizer* tok,
                                    const std::optional<chat_template>& tmpl, size_t max_input_bytes);

/// m.token_ids decoded together (special tokens kept), and the bytes each one contributes to a decode
/// (tokenizer::token_bytes: a byte-fallback token's one byte, so the pieces of a generated run add up to its text);
/// ids the tokenizer does not know are an invalid_argument reply.
client_tokens_reply answer_detokenize(const client_detokenize& m, const tokenizer* tok);

}  // namespace zmoe
