#include "cli/sse_parser.hpp"

namespace zmoe::cli {

void sse_parser::feed(std::string_view bytes, std::vector<sse_event>& out) {
    static constexpr char kBom[] = "\xEF\xBB\xBF";
    for (size_t i = 0; i < bytes.size(); ++i) {
        const char c = bytes[i];
        if (bom_ < 3) {
            if (c == kBom[bom_]) {
                ++bom_;
                continue;
            }
            // Not a byte order mark after all: what matched of it is text (never the case for SSE, which starts
            // with ASCII, but kept exact).
            line_.append(kBom, bom_);
            bom_ = 3;
        }
        if (c == '\n' && after_cr_) {
            after_cr_ = false;
            continue;
        }
        after_cr_ = c == '\r';
        if (c == '\n' || c == '\r') {
            line(out);
            line_.clear();
        } else {
            line_.push_back(c);
        }
    }
}

void sse_parser::line(std::vector<sse_event>& out) {
    if (line_.empty()) {
        if (has_data_) out.push_back({.type = type_.empty() ? "message" : type_, .data = std::move(data_)});
        data_.clear();
        type_.clear();
        has_data_ = false;
        return;
    }
    if (line_[0] == ':') return;  // a comment (servers send them to keep the connection alive)
    const size_t colon = line_.find(':');
    const std::string_view name = std::string_view(line_).substr(0, colon);
    std::string_view value;
    if (colon != std::string::npos) {
        value = std::string_view(line_).substr(colon + 1);
        if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    }
    if (name == "data") {
        if (has_data_) data_.push_back('\n');
        data_.append(value);
        has_data_ = true;
    } else if (name == "event") {
        type_ = value;
    }
}

}  // namespace zmoe::cli
