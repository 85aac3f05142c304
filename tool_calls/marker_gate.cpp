#include "tool_calls/marker_gate.hpp"

#include "base/check.hpp"

namespace zmoe::tool_calls {

marker_gate::marker_gate(std::vector<std::string> markers, bool hold_space)
    : markers_(std::move(markers)), hold_space_(hold_space) {
    for (const std::string& m : markers_)
        ZMOE_CHECK(!m.empty() && !(hold_space_ && is_space(m[0])), "a marker after held space starts with a non-space");
}

bool marker_gate::is_marker_prefix(std::string_view s) const {
    for (const std::string& m : markers_)
        if (m.size() >= s.size() && std::string_view(m).substr(0, s.size()) == s) return true;
    return false;
}

int marker_gate::push(char c, std::string& released) {
    if (held_.empty() && hold_space_ && is_space(c)) {
        space_ += c;
        return -1;
    }
    held_ += c;
    for (size_t i = 0; i < markers_.size(); ++i) {
        if (held_ == markers_[i]) {
            last_space_ = std::move(space_);
            space_.clear();
            held_.clear();
            return static_cast<int>(i);
        }
    }
    if (is_marker_prefix(held_)) return -1;
    // The held bytes cannot begin a marker: release the first and look again at the rest (shorter than any
    // marker, so it cannot complete one).
    released += space_;
    space_.clear();
    const std::string rest = held_.substr(1);
    released += held_[0];
    held_.clear();
    for (char r : rest) push(r, released);
    return -1;
}

std::string marker_gate::flush() {
    std::string out = space_ + held_;
    space_.clear();
    held_.clear();
    return out;
}

}  // namespace zmoe::tool_calls
