// Hermes / Qwen3: <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, any number, text around them.
// Whitespace right before a call's <tool_call> and right after its </tool_call> is the calls' layout, not content.
// Between the markers: optional whitespace, then one JSON call object (json_call_reader.hpp); what follows the
// object up to </tool_call> is dropped. Not a call (no object, or an object that is not a call): the marker, the
// text and the end marker are content, verbatim (with the whitespace before the marker).

#include "tool_calls/formats.hpp"
#include "tool_calls/json_call_reader.hpp"
#include "tool_calls/marker_gate.hpp"

namespace zmoe::tool_calls {

namespace {

constexpr const char* kStart = "<tool_call>";
constexpr const char* kEnd = "</tool_call>";

class hermes_parser final : public tool_call_parser {
  public:
    using tool_call_parser::tool_call_parser;

    void finish(event_sink& out) override {
        if (state_ == state::body) {
            for (char b : end_.flush()) body_byte(b, out);
            if (state_ == state::body) body_end(out, false);
        }
        out.content(start_.flush());
    }

  protected:
    void push(char c, event_sink& out) override {
        if (state_ == state::content) return content_byte(c, out);
        std::string released;
        const int m = end_.push(c, released);
        for (char b : released) {
            if (state_ == state::body)
                body_byte(b, out);
            else
                content_byte(b, out);
        }
        if (state_ == state::body) {
            if (m >= 0) body_end(out, true);
            return;
        }
        // The call turned out not to be one: what the end gate held (or the end marker) is content.
        const std::string rest = m >= 0 ? std::string(kEnd) : end_.flush();
        for (char b : rest) content_byte(b, out);
    }

  private:
    enum class state : uint8_t { content, body };
    enum class sub : uint8_t { lead, object, done };

    void content_byte(char c, event_sink& out) {
        if (after_call_ && is_space(c)) return;
        after_call_ = false;
        std::string released;
        const int m = start_.push(c, released);
        out.content(released);
        if (m < 0) return;
        space_ = start_.space();
        state_ = state::body;
        sub_ = sub::lead;
        lead_.clear();
        end_ = marker_gate({kEnd});
    }

    void body_byte(char b, event_sink& out) {
        switch (sub_) {
            case sub::lead:
                if (is_space(b)) {
                    lead_ += b;
                } else if (b == '{') {
                    sub_ = sub::object;
                    reader_.reset();
                    reader_.push(b, out, calls_);
                } else {
                    lead_ += b;
                    degrade(out, lead_);
                }
                return;
            case sub::object:
                switch (reader_.push(b, out, calls_)) {
                    case json_call_reader::status::running:
                        return;
                    case json_call_reader::status::call_done:
                        sub_ = sub::done;
                        return;
                    case json_call_reader::status::not_a_call:
                        degrade(out, lead_ + reader_.raw());
                        return;
                }
                return;
            case sub::done:
                return;
        }
    }

    // The end marker came (or the text ended) inside a body.
    void body_end(event_sink& out, bool marker) {
        const std::string end = marker ? kEnd : "";
        if (sub_ == sub::lead) return degrade(out, lead_ + end);
        if (sub_ == sub::object && reader_.end(out, calls_) == json_call_reader::status::not_a_call)
            return degrade(out, lead_ + reader_.raw() + end);
        state_ = state::content;
        after_call_ = true;
    }

    void degrade(event_sink& out, const std::string& body) {
        out.content(space_ + kStart + body);
        state_ = state::content;
    }

    state state_ = state::content;
    sub sub_ = sub::lead;
    bool after_call_ = false;
    marker_gate start_{{kStart}, true};
    marker_gate end_{{kEnd}};
    std::string space_, lead_;
    json_call_reader reader_{{"arguments", "parameters"}};
};

}  // namespace

std::unique_ptr<tool_call_parser> make_hermes_parser(std::function<std::string()> make_id) {
    return std::make_unique<hermes_parser>(std::move(make_id));
}

}  // namespace zmoe::tool_calls
