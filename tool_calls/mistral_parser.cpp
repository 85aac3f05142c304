// Mistral / Mixtral: [TOOL_CALLS] followed by a JSON list of call objects [{"name": "f", "arguments": {...}}, ...]
// (or by one call object). Whitespace before [TOOL_CALLS] and the list's brackets, commas and whitespace are
// layout, dropped; text after the list is content. A list that breaks off (a text that is neither an object, a
// comma nor the closing bracket, or an object that is not a call) ends the calls: before the first call the whole
// text from the marker on is content, after one the text from the break on.

#include "tool_calls/formats.hpp"
#include "tool_calls/json_call_reader.hpp"
#include "tool_calls/marker_gate.hpp"

namespace zmoe::tool_calls {

namespace {

constexpr const char* kMarker = "[TOOL_CALLS]";

class mistral_parser final : public tool_call_parser {
  public:
    using tool_call_parser::tool_call_parser;

    void finish(event_sink& out) override {
        switch (state_) {
            case state::content:
                out.content(gate_.flush());
                break;
            case state::object:
                if (reader_.end(out, calls_) == json_call_reader::status::not_a_call) degrade(out, reader_.raw());
                break;
            case state::lead:
            case state::element:
            case state::after_element:
                if (section_calls_ == 0) degrade(out, "");
                break;
        }
    }

  protected:
    void push(char c, event_sink& out) override {
        switch (state_) {
            case state::content: {
                if (after_call_ && is_space(c)) return;
                after_call_ = false;
                std::string released;
                const int m = gate_.push(c, released);
                out.content(released);
                if (m >= 0) {
                    space_ = gate_.space();
                    held_.clear();
                    section_calls_ = 0;
                    in_list_ = false;
                    state_ = state::lead;
                }
                return;
            }
            case state::lead:
                held_ += c;
                if (is_space(c)) return;
                if (c == '[') {
                    in_list_ = true;
                    state_ = state::element;
                    return;
                }
                if (c == '{') return begin_object(out);
                return break_list(out);
            case state::element:
                held_ += c;
                if (is_space(c)) return;
                if (c == '{') return begin_object(out);
                if (c == ']' && section_calls_ > 0) return end_section();
                return break_list(out);
            case state::after_element:
                held_ += c;
                if (is_space(c)) return;
                if (c == ',') {
                    state_ = state::element;
                    return;
                }
                if (c == ']') return end_section();
                return break_list(out);
            case state::object:
                switch (reader_.push(c, out, calls_)) {
                    case json_call_reader::status::running:
                        return;
                    case json_call_reader::status::call_done:
                        ++section_calls_;
                        held_.clear();
                        if (in_list_)
                            state_ = state::after_element;
                        else
                            end_section();
                        return;
                    case json_call_reader::status::not_a_call:
                        return degrade(out, reader_.raw());
                }
                return;
        }
    }

  private:
    enum class state : uint8_t { content, lead, element, after_element, object };

    void begin_object(event_sink& out) {
        held_.pop_back();
        state_ = state::object;
        reader_.reset();
        reader_.push('{', out, calls_);
    }

    void end_section() {
        state_ = state::content;
        after_call_ = true;
    }

    // held_ ends with a byte that breaks the list.
    void break_list(event_sink& out) {
        const std::string c(1, held_.back());
        held_.pop_back();
        degrade(out, c);
    }

    // The calls end here: before the first, everything from the marker on is content; after one, the text from
    // the break on (`more`).
    void degrade(event_sink& out, const std::string& more) {
        out.content(section_calls_ == 0 ? space_ + kMarker + held_ + more : more);
        state_ = state::content;
        after_call_ = false;
    }

    state state_ = state::content;
    bool after_call_ = false, in_list_ = false;
    uint32_t section_calls_ = 0;
    marker_gate gate_{{kMarker}, true};
    std::string space_, held_;
    json_call_reader reader_{{"arguments", "parameters"}};
};

}  // namespace

std::unique_ptr<tool_call_parser> make_mistral_parser(std::function<std::string()> make_id) {
    return std::make_unique<mistral_parser>(std::move(make_id));
}

}  // namespace zmoe::tool_calls
