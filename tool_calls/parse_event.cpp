#include "tool_calls/parse_event.hpp"

#include "base/check.hpp"

namespace zmoe::tool_calls {

void add_events(parsed_output& out, const parse_event& e) {
    switch (e.kind) {
        case event_kind::content:
            out.content += e.text;
            return;
        case event_kind::reasoning:
            out.reasoning += e.text;
            return;
        case event_kind::call_start:
            ZMOE_CHECK(e.call_index == out.calls.size(), "tool calls start in index order");
            out.calls.push_back({.id = e.id, .name = e.text, .arguments = {}});
            return;
        case event_kind::call_arguments:
            ZMOE_CHECK(e.call_index < out.calls.size(), "arguments of a started call");
            out.calls[e.call_index].arguments += e.text;
            return;
    }
}

void add_events(parsed_output& out, const std::vector<parse_event>& events) {
    for (const parse_event& e : events) add_events(out, e);
}

void event_sink::text(event_kind kind, uint32_t index, std::string_view text) {
    if (text.empty()) return;
    if (!events_.empty() && events_.back().kind == kind && events_.back().call_index == index) {
        events_.back().text += text;
        return;
    }
    events_.push_back({.kind = kind, .call_index = index, .id = {}, .text = std::string(text)});
}

void event_sink::content(std::string_view t) { text(event_kind::content, 0, t); }
void event_sink::reasoning(std::string_view t) { text(event_kind::reasoning, 0, t); }
void event_sink::arguments(uint32_t index, std::string_view t) { text(event_kind::call_arguments, index, t); }

void event_sink::call_start(uint32_t index, std::string id, std::string name) {
    events_.push_back(
        {.kind = event_kind::call_start, .call_index = index, .id = std::move(id), .text = std::move(name)});
}

uint32_t call_emitter::start(event_sink& out, std::string name) {
    const uint32_t index = num_calls_++;
    out.call_start(index, make_id_ ? make_id_() : "call_" + std::to_string(index), std::move(name));
    return index;
}

std::vector<parse_event> event_sink::take() {
    std::vector<parse_event> out;
    out.swap(events_);
    return out;
}

}  // namespace zmoe::tool_calls
