#include "frontend/token_requests.hpp"

#include <string>

#include "frontend/chat_prompt.hpp"

namespace zmoe {

namespace {

client_tokens_reply failed(const std::string& tag, errc code, std::string message) {
    client_tokens_reply r;
    r.tag = tag;
    r.code = code;
    r.message = std::move(message);
    return r;
}

}  // namespace

client_tokens_reply answer_tokenize(const client_tokenize& m, const tokenizer* tok,
                                    const std::optional<chat_template>& tmpl, size_t max_input_bytes) {
    if (!tok) return failed(m.tag, errc::unsupported, "this model has no tokenizer.json");
    if (!m.chat.empty() && !m.text.empty()) return failed(m.tag, errc::invalid_argument, "give either text or chat");
    const size_t bytes = m.chat.empty() ? m.text.size() : m.chat.size();
    if (bytes > max_input_bytes)
        return failed(m.tag, errc::invalid_argument,
                      "the input has " + std::to_string(bytes) + " bytes, over the limit of " +
                          std::to_string(max_input_bytes) + " (--max-prompt-bytes)");
    client_tokens_reply r;
    r.tag = m.tag;
    try {
        r.token_ids = m.chat.empty() ? tok->encode(m.text, m.add_special_tokens) : chat_prompt_ids(tmpl, *tok, m.chat);
    } catch (const error& e) {
        return failed(m.tag, e.code(), e.what());
    } catch (const std::exception& e) {
        return failed(m.tag, errc::internal, e.what());
    }
    return r;
}

client_tokens_reply answer_detokenize(const client_detokenize& m, const tokenizer* tok) {
    if (!tok) return failed(m.tag, errc::unsupported, "this model has no tokenizer.json");
    for (int32_t id : m.token_ids)
        if (!tok->is_valid_id(id))
            return failed(m.tag, errc::invalid_argument,
                          "token id " + std::to_string(id) + " is not in the vocabulary");
    client_tokens_reply r;
    r.tag = m.tag;
    r.token_ids = m.token_ids;
    try {
        r.text = tok->decode(m.token_ids);
        r.pieces.reserve(m.token_ids.size());
        for (int32_t id : m.token_ids) r.pieces.emplace_back(tok->token_bytes(id));
    } catch (const std::exception& e) {
        return failed(m.tag, errc::internal, e.what());
    }
    return r;
}

}  // namespace zmoe
