#include "tool_calls/output_parser.hpp"

namespace zmoe::tool_calls {

output_parser::output_parser(const output_parser_options& options) {
    if (options.reasoning) reasoning_.emplace(*options.reasoning);
    if (options.tools) tools_ = make_tool_call_parser(*options.tools, options.make_id);
}

void output_parser::content(const std::string& text) {
    if (tools_)
        tools_->feed(text, sink_);
    else
        sink_.content(text);
}

std::vector<parse_event> output_parser::feed(std::string_view text) {
    if (reasoning_) {
        content_.clear();
        reasoning_->feed(text, sink_, content_);
        content(content_);
    } else {
        content(std::string(text));
    }
    return sink_.take();
}

std::vector<parse_event> output_parser::finish() {
    if (reasoning_) {
        content_.clear();
        reasoning_->finish(sink_, content_);
        content(content_);
    }
    if (tools_) tools_->finish(sink_);
    return sink_.take();
}

parsed_output output_parser::parse(std::string_view text, const output_parser_options& options) {
    output_parser p(options);
    parsed_output out;
    add_events(out, p.feed(text));
    add_events(out, p.finish());
    return out;
}

}  // namespace zmoe::tool_calls
