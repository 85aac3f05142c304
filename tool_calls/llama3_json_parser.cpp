// Llama 3.1+ JSON tool calls: an output that starts (after whitespace) with '{' or with <|python_tag|> is a list of
// call objects {"name": "f", "parameters": {...}} ("arguments" accepted too) separated by ';' and whitespace, which
// are dropped. Any other output is content. When a text that is not a call object follows, it and everything after
// it are content (an object that is not a call: its text too; before the first call, the leading text as well).

#include "tool_calls/formats.hpp"
#include "tool_calls/json_call_reader.hpp"

namespace zmoe::tool_calls {

namespace {

constexpr std::string_view kTag = "<|python_tag|>";

class llama3_json_parser final : public tool_call_parser {
  public:
    using tool_call_parser::tool_call_parser;

    void finish(event_sink& out) override {
        switch (state_) {
            case state::start:
                out.content(held_);
                break;
            case state::lead:
                if (calls_.num_calls() == 0) out.content(held_);
                break;
            case state::object:
                if (reader_.end(out, calls_) == json_call_reader::status::not_a_call) to_text(out, reader_.raw());
                break;
            case state::text:
                break;
        }
        held_.clear();
    }

  protected:
    void push(char c, event_sink& out) override {
        switch (state_) {
            case state::start: {
                held_ += c;
                const size_t first = held_.find_first_not_of(" \t\n\r");
                if (first == std::string::npos) return;
                const std::string_view t = std::string_view(held_).substr(first);
                if (t[0] == '{') return begin_object(out);
                if (kTag.substr(0, std::min(t.size(), kTag.size())) == t) {
                    if (t.size() == kTag.size()) state_ = state::lead;
                    return;
                }
                return to_text(out, "");
            }
            case state::lead:
                if (is_space(c) || (c == ';' && calls_.num_calls() > 0)) {
                    held_ += c;
                    return;
                }
                if (c == '{') {
                    held_ += c;
                    return begin_object(out);
                }
                return to_text(out, std::string(1, c));
            case state::object:
                switch (reader_.push(c, out, calls_)) {
                    case json_call_reader::status::running:
                        return;
                    case json_call_reader::status::call_done:
                        state_ = state::lead;
                        held_.clear();
                        return;
                    case json_call_reader::status::not_a_call:
                        return to_text(out, reader_.raw());
                }
                return;
            case state::text:
                out.content(std::string_view(&c, 1));
                return;
        }
    }

  private:
    enum class state : uint8_t { start, lead, object, text };

    // held_ ends with the object's '{': the text before it stays held.
    void begin_object(event_sink& out) {
        held_.pop_back();
        state_ = state::object;
        reader_.reset();
        reader_.push('{', out, calls_);
    }

    // The rest is content: the held text (before the first call only; after one, separators are dropped) and
    // `more`.
    void to_text(event_sink& out, const std::string& more) {
        if (calls_.num_calls() == 0) out.content(held_);
        out.content(more);
        held_.clear();
        state_ = state::text;
    }

    state state_ = state::start;
    std::string held_;
    json_call_reader reader_{{"parameters", "arguments"}};
};

}  // namespace

std::unique_ptr<tool_call_parser> make_llama3_json_parser(std::function<std::string()> make_id) {
    return std::make_unique<llama3_json_parser>(std::move(make_id));
}

}  // namespace zmoe::tool_calls
