// DeepSeek-V3 / R1 tool calls, as their chat template writes them:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//   ... more calls ...<｜tool▁calls▁end｜>
// Whitespace before the section and between its calls is layout, dropped. ARGS are the text between the header
// and "\n```<｜tool▁call▁end｜>", verbatim (streamed as it comes). The header's type is any text without a newline
// (at most 64 bytes), NAME any non-empty text without one (at most 256). A header that breaks that shape, or a text
// in the section that is not a call, ends the calls: that text and the rest are content (before the first call of
// a section, with the section's marker and the whitespace before it).

#include "tool_calls/formats.hpp"
#include "tool_calls/marker_gate.hpp"

namespace zmoe::tool_calls {

namespace {

constexpr const char* kSectionBegin = "<｜tool▁calls▁begin｜>";
constexpr const char* kSectionEnd = "<｜tool▁calls▁end｜>";
constexpr const char* kCallBegin = "<｜tool▁call▁begin｜>";
constexpr const char* kSep = "<｜tool▁sep｜>";
constexpr std::string_view kJsonFence = "```json\n";
constexpr const char* kCallEnd = "\n```<｜tool▁call▁end｜>";
constexpr size_t kMaxType = 64, kMaxName = 256;

class deepseek_v3_parser final : public tool_call_parser {
  public:
    using tool_call_parser::tool_call_parser;

    void finish(event_sink& out) override {
        switch (state_) {
            case state::content:
                out.content(start_.flush());
                break;
            case state::section:
                if (section_calls_ == 0) degrade(out, section_.flush());
                break;
            case state::header:
                header_ += sep_.flush();
                degrade(out, call_space_ + kCallBegin + header_);
                break;
            case state::arguments:
                out.arguments(calls_.current(), end_.flush());
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
                const int m = start_.push(c, released);
                out.content(released);
                if (m >= 0) {
                    space_ = start_.space();
                    section_calls_ = 0;
                    state_ = state::section;
                    section_ = marker_gate({kCallBegin, kSectionEnd}, true);
                }
                return;
            }
            case state::section: {
                std::string released;
                const int m = section_.push(c, released);
                if (!released.empty()) {
                    // Not a call: released holds the whitespace and bytes up to the break, the gate the rest.
                    return degrade(out, released + section_.flush());
                }
                if (m == 0) {
                    call_space_ = section_.space();
                    state_ = state::header;
                    header_.clear();
                    phase_ = 0;
                    fence_ = 0;
                    sep_ = marker_gate({kSep});
                } else if (m == 1) {
                    if (section_calls_ == 0) return degrade(out, section_.space() + kSectionEnd);
                    state_ = state::content;
                    after_call_ = true;
                }
                return;
            }
            case state::header:
                return header_byte(c, out);
            case state::arguments: {
                std::string released;
                const int m = end_.push(c, released);
                out.arguments(calls_.current(), released);
                if (m >= 0) {
                    ++section_calls_;
                    state_ = state::section;
                    section_ = marker_gate({kCallBegin, kSectionEnd}, true);
                }
                return;
            }
        }
    }

  private:
    enum class state : uint8_t { content, section, header, arguments };

    void header_byte(char c, event_sink& out) {
        if (phase_ == 0) {  // the type, up to <｜tool▁sep｜>
            std::string released;
            const int m = sep_.push(c, released);
            header_ += released;
            if (header_.find('\n') != std::string::npos || header_.size() > kMaxType)
                return degrade(out, call_space_ + kCallBegin + header_ + sep_.flush());
            if (m >= 0) {
                header_ += kSep;
                phase_ = 1;
                name_.clear();
            }
            return;
        }
        header_ += c;
        if (phase_ == 1) {  // the name, up to a newline
            if (c != '\n') {
                name_ += c;
                if (name_.size() > kMaxName) degrade(out, call_space_ + kCallBegin + header_);
                return;
            }
            if (name_.empty()) return degrade(out, call_space_ + kCallBegin + header_);
            phase_ = 2;
            return;
        }
        if (c != kJsonFence[fence_]) return degrade(out, call_space_ + kCallBegin + header_);  // the fence
        if (++fence_ < kJsonFence.size()) return;
        calls_.start(out, name_);
        state_ = state::arguments;
        end_ = marker_gate({kCallEnd});
    }

    // The calls end: `text` and what follows are content (with the section marker before the first call).
    void degrade(event_sink& out, const std::string& text) {
        out.content(section_calls_ == 0 ? space_ + kSectionBegin + text : text);
        state_ = state::content;
        after_call_ = false;
    }

    state state_ = state::content;
    bool after_call_ = false;
    uint32_t section_calls_ = 0;
    int phase_ = 0;
    size_t fence_ = 0;
    marker_gate start_{{kSectionBegin}, true};
    marker_gate section_{{kCallBegin, kSectionEnd}, true};
    marker_gate sep_{{kSep}};
    marker_gate end_{{kCallEnd}};
    std::string space_, call_space_, header_, name_;
};

}  // namespace

std::unique_ptr<tool_call_parser> make_deepseek_v3_parser(std::function<std::string()> make_id) {
    return std::make_unique<deepseek_v3_parser>(std::move(make_id));
}

}  // namespace zmoe::tool_calls
