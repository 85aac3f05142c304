#include "tool_calls/reasoning_parser.hpp"

namespace zmoe::tool_calls {

namespace {
constexpr std::string_view kOpen = "<think>";
}

std::optional<reasoning_format> reasoning_format_from_name(std::string_view name) {
    if (name == "qwen3") return reasoning_format::qwen3;
    if (name == "deepseek_r1") return reasoning_format::deepseek_r1;
    return std::nullopt;
}

const char* reasoning_format_name(reasoning_format f) {
    switch (f) {
        case reasoning_format::qwen3:
            return "qwen3";
        case reasoning_format::deepseek_r1:
            return "deepseek_r1";
    }
    return "?";
}

std::optional<reasoning_format> detect_reasoning_format(std::string_view t) {
    const auto has = [t](std::string_view s) { return t.find(s) != std::string_view::npos; };
    if (!has("</think>")) return std::nullopt;
    if (has("enable_thinking")) return reasoning_format::qwen3;
    if (has("<｜Assistant｜><think>\\n") || has("<｜Assistant｜><think>\n")) return reasoning_format::deepseek_r1;
    return std::nullopt;
}

reasoning_parser::reasoning_parser(reasoning_format format) : format_(format) {}

void reasoning_parser::feed(std::string_view text, event_sink& out, std::string& content) {
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        switch (state_) {
            case state::start:
                held_ += c;
                if (kOpen.substr(0, held_.size()) == held_) {
                    if (held_.size() == kOpen.size()) {
                        held_.clear();
                        state_ = state::thinking;
                    }
                    break;
                }
                if (format_ == reasoning_format::qwen3) {
                    content += held_;
                    held_.clear();
                    state_ = state::content;
                } else {
                    // Already thinking: the held bytes are thinking text (and may begin </think>).
                    const std::string h = std::move(held_);
                    held_.clear();
                    state_ = state::thinking;
                    feed(h, out, content);
                }
                break;
            case state::thinking: {
                std::string released;
                const int m = end_.push(c, released);
                out.reasoning(released);
                if (m >= 0) state_ = state::content;
                break;
            }
            case state::content:
                content.append(text.substr(i));
                return;
        }
    }
}

void reasoning_parser::finish(event_sink& out, std::string& content) {
    switch (state_) {
        case state::start:
            if (format_ == reasoning_format::qwen3)
                content += held_;
            else
                out.reasoning(held_);
            held_.clear();
            break;
        case state::thinking:
            out.reasoning(end_.flush());
            break;
        case state::content:
            break;
    }
}

}  // namespace zmoe::tool_calls
