#include "cli/openai_stream.hpp"

#include <nlohmann/json.hpp>

namespace zmoe::cli {

namespace {

bool non_empty_string(const nlohmann::json& obj, const char* key) {
    const auto it = obj.find(key);
    return it != obj.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

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
    }
    const auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object()) return;
    const auto& choice = (*choices)[0];
    bool content = non_empty_string(choice, "text");
    if (const auto d = choice.find("delta"); d != choice.end() && d->is_object())
        content = content || non_empty_string(*d, "content") || non_empty_string(*d, "reasoning_content") ||
                  non_empty_string(*d, "reasoning");
    if (!content) return;
    if (content_chunks_ == 0)
        rec_.ttft_s = t;
    else
        rec_.itl_s.push_back(t - last_content_s_);
    last_content_s_ = t;
    ++content_chunks_;
}

void openai_stream_recorder::finish(double t, const std::string& transport_error) {
    rec_.latency_s = t;
    rec_.output_tokens = has_usage_ ? usage_completion_tokens_ : content_chunks_;
    if (!transport_error.empty()) fail(transport_error);
    if (!done_) fail("the stream ended without data: [DONE]");
    if (content_chunks_ == 0) fail("no content in the stream");
    if (has_usage_ && rec_.output_tokens != rec_.output_len)
        fail("asked for " + std::to_string(rec_.output_len) + " tokens, got " + std::to_string(rec_.output_tokens));
    rec_.error = error_;
    rec_.success = error_.empty();
}

}  // namespace zmoe::cli
