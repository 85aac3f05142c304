#include "tool_calls/json_call_reader.hpp"

#include <nlohmann/json.hpp>
#include <string_view>

namespace zmoe::tool_calls {

using ojson = nlohmann::ordered_json;

json_scanner::status json_scanner::push(char c) {
    if (state_ != status::running) return state_;
    if (!started_) {
        if (c == '{' || c == '[') {
            started_ = true;
            stack_ += c;
        } else if (!is_space(c)) {
            state_ = status::error;
        }
        return state_;
    }
    if (in_string_) {
        if (escape_)
            escape_ = false;
        else if (c == '\\')
            escape_ = true;
        else if (c == '"')
            in_string_ = false;
        return state_;
    }
    if (c == '"') {
        in_string_ = true;
    } else if (c == '{' || c == '[') {
        stack_ += c;
    } else if (c == '}' || c == ']') {
        if (stack_.back() != (c == '}' ? '{' : '[')) {
            state_ = status::error;
            return state_;
        }
        stack_.pop_back();
        if (stack_.empty()) state_ = status::complete;
    }
    return state_;
}

namespace {

enum class match : uint8_t { partial, matched, mismatch };

/// Matches `lit` at raw[i...]: matched (i advanced), partial (raw ends inside it) or mismatch.
match literal(std::string_view raw, size_t& i, std::string_view lit) {
    const size_t n = std::min(lit.size(), raw.size() - i);
    if (raw.substr(i, n) != lit.substr(0, n)) return match::mismatch;
    if (n < lit.size()) return match::partial;
    i += n;
    return match::matched;
}

void skip_space(std::string_view raw, size_t& i) {
    while (i < raw.size() && is_space(raw[i])) ++i;
}

constexpr size_t kMaxHeaderBytes = 4096;

/// Whether raw (an object's text so far) is `{ "name": STRING, "KEY": {` (matched: name set), a prefix of it
/// (partial), or neither.
match match_header(std::string_view raw, const std::vector<std::string>& keys, std::string& name) {
    if (raw.size() > kMaxHeaderBytes) return match::mismatch;
    size_t i = 0;
    const auto step = [&](std::string_view lit) {
        skip_space(raw, i);
        if (i == raw.size()) return match::partial;
        return literal(raw, i, lit);
    };
    for (std::string_view lit : {"{", "\"name\"", ":"})
        if (match m = step(lit); m != match::matched) return m;
    skip_space(raw, i);
    if (i == raw.size()) return match::partial;
    if (raw[i] != '"') return match::mismatch;
    const size_t name_begin = i++;
    for (bool escape = false;; ++i) {
        if (i == raw.size()) return match::partial;
        if (escape)
            escape = false;
        else if (raw[i] == '\\')
            escape = true;
        else if (raw[i] == '"')
            break;
    }
    ++i;
    try {
        name = ojson::parse(raw.substr(name_begin, i - name_begin)).get<std::string>();
    } catch (const ojson::exception&) {
        return match::mismatch;
    }
    if (name.empty()) return match::mismatch;
    if (match m = step(","); m != match::matched) return m;
    skip_space(raw, i);
    if (i == raw.size()) return match::partial;
    bool partial = false, matched = false;
    for (const std::string& key : keys) {
        size_t j = i;
        const match m = literal(raw, j, "\"" + key + "\"");
        if (m == match::matched) {
            i = j;
            matched = true;
            break;
        }
        partial = partial || m == match::partial;
    }
    if (!matched) return partial ? match::partial : match::mismatch;
    for (std::string_view lit : {":", "{"})
        if (match m = step(lit); m != match::matched) return m;
    return i == raw.size() ? match::matched : match::mismatch;
}

}  // namespace

json_call_reader::json_call_reader(std::vector<std::string> argument_keys) : keys_(std::move(argument_keys)) {}

void json_call_reader::reset() {
    phase_ = phase::header;
    raw_.clear();
    outer_.reset();
    args_.reset();
}

json_call_reader::status json_call_reader::push(char c, event_sink& out, call_emitter& calls) {
    raw_ += c;
    const json_scanner::status outer = outer_.push(c);
    switch (phase_) {
        case phase::header: {
            if (outer == json_scanner::status::error) return status::not_a_call;
            std::string name;
            const match m = match_header(raw_, keys_, name);
            if (m == match::matched) {
                calls.start(out, std::move(name));
                args_.push('{');
                out.arguments(calls.current(), "{");
                phase_ = phase::arguments;
                return status::running;
            }
            if (m == match::partial) return status::running;
            phase_ = phase::whole;
            if (outer == json_scanner::status::complete) return finish_whole(out, calls);
            return status::running;
        }
        case phase::arguments:
            if (args_.push(c) == json_scanner::status::error) {
                phase_ = phase::tail;  // the arguments end here; the byte is not theirs
                return outer == json_scanner::status::running ? status::running : status::call_done;
            }
            out.arguments(calls.current(), std::string_view(&c, 1));
            if (args_.state() == json_scanner::status::complete) phase_ = phase::tail;
            return outer == json_scanner::status::running ? status::running : status::call_done;
        case phase::tail:
            return outer == json_scanner::status::running ? status::running : status::call_done;
        case phase::whole:
            if (outer == json_scanner::status::error) return status::not_a_call;
            if (outer == json_scanner::status::complete) return finish_whole(out, calls);
            return status::running;
    }
    return status::not_a_call;
}

json_call_reader::status json_call_reader::end(event_sink& out, call_emitter& calls) {
    if (committed()) return status::call_done;
    return finish_whole(out, calls);
}

json_call_reader::status json_call_reader::finish_whole(event_sink& out, call_emitter& calls) {
    ojson j;
    try {
        j = ojson::parse(raw_);
    } catch (const ojson::exception&) {
        return status::not_a_call;
    }
    if (!j.is_object()) return status::not_a_call;
    auto name = j.find("name");
    if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return status::not_a_call;
    std::string arguments = "{}";
    for (const std::string& key : keys_) {
        auto a = j.find(key);
        if (a == j.end()) continue;
        if (a->is_object())
            arguments = a->dump(-1, ' ', false, ojson::error_handler_t::replace);
        else if (a->is_string())
            arguments = a->get<std::string>();
        else
            return status::not_a_call;
        break;
    }
    calls.start(out, name->get<std::string>());
    out.arguments(calls.current(), arguments);
    return status::call_done;
}

}  // namespace zmoe::tool_calls
