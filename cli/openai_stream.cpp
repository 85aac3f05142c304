#include "cli/openai_stream.hpp"

#include <nlohmann/json.hpp>

namespace zmoe::cli {

namespace {

/// The message of an OpenAI error object ({"error": {"message": ...}} or {"message": ...} or a string).
std::string error_text(const nlohmann::json& e) {
    if (e.is_string()) return e.get<std::string>();
    if (e.is_object()) {
        const auto m = e.find("message");
        if (m != e.end() && m->is_string()) return m->get<std::string>();
    }
    return e.dump();
}

}  // namespace

void openai_stream_recorder::on_event(const sse_event& event, double t) {
    if (event.data == "[DONE]") {
        done_ = true;
        return;
    }
    if (event.type == "error") {
        fail("error event: " + event.data);
        return;
    }
    const auto j = nlohmann::json::parse(event.data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
        fail("an event that is not a JSON object: " + event.data.substr(0, 200));
        return;
    }
    if (const auto e = j.find("error"); e != j.end() && !e->is_null()) {
        fail("error in the stream: " + error_text(*e));
        return;
    }
    if (const auto u = j.find("usage"); u != j.end() && u->is_object()) {
        if (const auto c = u->find("completion_tokens"); c != u->end() && c->is_number_unsigned()) {
            has_usage_ = true;
            usage_completion_tokens_ = c->get<uint32_t>();
        }
        if (const auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_unsigned())
            rec_.prompt_tokens = p->get<uint32_t>();
        if (const auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
            if (const auto c = d->find("cached_tokens"); c != d->end() && c->is_number_unsigned())
                rec_.cached_tokens = c->get<int64_t>();
    }
    // vLLM's rule: every chunk with a choice is a token event, whether or not its text is empty (a token whose
    // text the server holds back, an incomplete UTF-8 sequence, still arrived); a chunk without (usage) is not.
    const auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array() || choices->empty()) return;
    if (const auto& c = (*choices)[0]; c.is_object()) {
        if (const auto text = c.find("text"); text != c.end() && text->is_string()) text_ += text->get<std::string>();
        if (const auto delta = c.find("delta"); delta != c.end() && delta->is_object())
            if (const auto content = delta->find("content"); content != delta->end() && content->is_string())
                text_ += content->get<std::string>();
    }
    if (token_chunks_ == 0)
        rec_.ttft_s = t;
    else
        rec_.itl_s.push_back(t - last_token_s_);
    last_token_s_ = t;
    ++token_chunks_;
}

void openai_stream_recorder::finish(double t, const std::string& transport_error) {
    rec_.latency_s = t;
    rec_.output_tokens = has_usage_ ? usage_completion_tokens_ : token_chunks_;
    if (!transport_error.empty()) fail(transport_error);
    if (!done_) fail("the stream ended without data: [DONE]");
    if (token_chunks_ == 0) fail("no choice in the stream");
    if (has_usage_ && rec_.output_tokens != rec_.output_len)
        fail("asked for " + std::to_string(rec_.output_len) + " tokens, got " + std::to_string(rec_.output_tokens));
    rec_.error = error_;
    rec_.success = error_.empty();
}

}  // namespace zmoe::cli
