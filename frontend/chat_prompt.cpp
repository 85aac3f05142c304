#include "frontend/chat_prompt.hpp"

namespace zmoe {

std::vector<int32_t> chat_prompt_ids(const std::optional<chat_template>& tmpl, const tokenizer& tok,
                                     const std::string& chat_json) {
    if (!tmpl)
        throw error(errc::invalid_argument,
                    "this model's tokenizer has no chat template: send a prompt, or start the server with "
                    "--chat-template FILE");
    jinja::json j;
    try {
        j = jinja::json::parse(chat_json);
    } catch (const jinja::json::exception& e) {
        throw error(errc::invalid_argument, std::string("chat: not JSON: ") + e.what());
    }
    const chat_request request = parse_chat_request(j);
    std::string text;
    try {
        text = tmpl->render(request);
    } catch (const chat_message_error&) {
        throw;  // already names the field
    } catch (const error& e) {
        throw error(errc::invalid_argument, std::string("chat template: ") + e.what());
    }
    return tok.encode(text, /*add_special_tokens=*/false);
}

}  // namespace zmoe
