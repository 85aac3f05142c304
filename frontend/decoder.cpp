#include "frontend/decoder.hpp"

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "frontend/byte_level.hpp"
#include "frontend/utf8.hpp"

namespace zmoe {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

std::string type_of(const nlohmann::json& j) {
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        throw error(errc::invalid_checkpoint, "tokenizer.json: decoder without a \"type\"");
    return j["type"].get<std::string>();
}

// A single character as a string (Strip's content, Metaspace's replacement are Rust chars in HF).
std::string one_char(const nlohmann::json& j, const char* key, const std::string& what) {
    if (!j.contains(key) || !j[key].is_string())
        throw error(errc::invalid_checkpoint, "tokenizer.json: " + what + " without a \"" + key + "\" string");
    std::string s = j[key].get<std::string>();
    size_t i = 0;
    if (!s.empty()) utf8::decode(s, i);
    if (s.empty() || i != s.size())
        throw error(errc::invalid_checkpoint, "tokenizer.json: " + what + " \"" + key + "\" is not one character");
    return s;
}

// The byte of a ByteFallback token, or -1: HF takes a 6-byte token "<0x..>" and parses its two middle characters
// with u8::from_str_radix(_, 16), which also accepts lowercase digits and a '+' followed by one digit.
int fallback_byte(std::string_view t) {
    if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
    auto digit = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    const int lo = digit(t[4]);
    if (lo < 0) return -1;
    if (t[3] == '+') return lo;
    const int hi = digit(t[3]);
    return hi < 0 ? -1 : hi * 16 + lo;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(text.size());
    size_t prev = 0;
    for (size_t pos = text.find(from); pos != std::string_view::npos; pos = text.find(from, prev)) {
        out.append(text.substr(prev, pos - prev)).append(to);
        prev = pos + from.size();
    }
    out.append(text.substr(prev));
    return out;
}

}  // namespace

decoder decoder::from_json(const nlohmann::json& j) {
    decoder d;
    if (j.is_null()) return d;
    if (!j.is_object())
        throw error(errc::invalid_checkpoint, "tokenizer.json: \"decoder\" is neither an object nor null");
    const std::string type = type_of(j);
    if (type == "ByteLevel") {
        d.kind_ = kind::byte_level;
        return d;
    }
    if (type == "Metaspace") {
        d.kind_ = kind::metaspace;
        d.metaspace_replacement_ = one_char(j, "replacement", "Metaspace decoder");
        const std::string scheme = j.contains("prepend_scheme") && j["prepend_scheme"].is_string()
                                       ? j["prepend_scheme"].get<std::string>()
                                       : std::string("always");
        if (scheme != "always" && scheme != "first" && scheme != "never")
            throw error(errc::invalid_checkpoint,
                        "tokenizer.json: Metaspace prepend_scheme '" + scheme + "' is unknown");
        // Files written before prepend_scheme existed say add_prefix_space; HF refuses false with any other scheme.
        if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean() &&
            !j["add_prefix_space"].get<bool>() && scheme != "never")
            throw error(errc::invalid_checkpoint,
                        "tokenizer.json: Metaspace add_prefix_space does not match prepend_scheme");
        d.metaspace_strip_first_ = scheme != "never";
        return d;
    }
    nlohmann::json steps = nlohmann::json::array();
    if (type == "Sequence") {
        if (!j.contains("decoders") || !j["decoders"].is_array())
            throw error(errc::invalid_checkpoint, "tokenizer.json: Sequence decoder without \"decoders\"");
        steps = j["decoders"];
        if (steps.size() == 1) return from_json(steps[0]);
    } else {
        steps.push_back(j);
    }
    // SentencePiece style: Replace* ByteFallback? Fuse? Strip?, in this order (the only order whose result zmoe can
    // produce token by token: per-token rewrites, then byte runs, then edits of the fused text's start).
    d.kind_ = kind::sentencepiece;
    static const char* const kOrder[] = {"Replace", "ByteFallback", "Fuse", "Strip"};
    int last = -1;
    bool fuse = false;
    for (const auto& step : steps) {
        const std::string t = type_of(step);
        int rank = -1;
        for (int r = 0; r < 4; ++r)
            if (t == kOrder[r]) rank = r;
        if (rank < 0)
            throw error(errc::unsupported, "tokenizer.json: decoder type '" + t + "' in a Sequence is not supported");
        if (rank < last || (rank == last && rank != 0))
            throw error(errc::unsupported,
                        "tokenizer.json: decoder Sequence with " + t + " after " + kOrder[last] + " is not supported");
        last = rank;
        if (t == "Replace") {
            d.replaces_.push_back(replace_rule::from_json(step, "Replace decoder"));
        } else if (t == "ByteFallback") {
            d.byte_fallback_ = true;
        } else if (t == "Fuse") {
            fuse = true;
        } else {
            // Without Fuse, HF strips every token separately.
            if (!fuse)
                throw error(errc::unsupported, "tokenizer.json: decoder Strip without Fuse before it is not supported");
            const auto count = [&](const char* key) -> int64_t {
                if (!step.contains(key) || !step[key].is_number_integer() || step[key].get<int64_t>() < 0)
                    throw error(errc::invalid_checkpoint,
                                std::string("tokenizer.json: Strip decoder \"") + key + "\" is not a count");
                return step[key].get<int64_t>();
            };
            if (count("stop") != 0)
                throw error(errc::unsupported, "tokenizer.json: decoder Strip with stop > 0 is not supported");
            d.strip_start_ = static_cast<int32_t>(std::min<int64_t>(count("start"), int64_t{1} << 30));
            d.strip_content_ = one_char(step, "content", "Strip decoder");
        }
    }
    return d;
}

void decoder::set_vocabulary(const std::vector<std::string>& spellings) {
    const size_t n = spellings.size();
    bytes_.assign(n, std::string());
    is_fallback_.assign(n, 0);
    if (kind_ == kind::metaspace && metaspace_strip_first_) first_bytes_.assign(n, std::string());
    std::string storage;
    for (size_t id = 0; id < n; ++id) {
        const std::string& s = spellings[id];
        switch (kind_) {
            case kind::join_with_space:
                bytes_[id] = s;
                break;
            case kind::byte_level: {
                // The ByteLevel decoder maps a token through the byte alphabet only if every character is in it.
                auto raw = byte_level::to_bytes(s);
                bytes_[id] = raw ? std::move(*raw) : s;
                break;
            }
            case kind::metaspace:
                bytes_[id] = replace_all(s, metaspace_replacement_, " ");
                if (metaspace_strip_first_) first_bytes_[id] = replace_all(s, metaspace_replacement_, "");
                break;
            case kind::sentencepiece: {
                std::string t = s;
                for (const auto& r : replaces_) t = std::string(r.apply(t, storage));
                const int b = byte_fallback_ ? fallback_byte(t) : -1;
                if (b >= 0) {
                    bytes_[id] = std::string(1, static_cast<char>(b));
                    is_fallback_[id] = 1;
                } else {
                    bytes_[id] = std::move(t);
                }
                break;
            }
        }
    }
}

std::string decoder::decode(std::span<const int32_t> ids) const {
    std::string out;
    if (kind_ == kind::join_with_space || kind_ == kind::byte_level) {
        // Same result as the stream, in one pass: the lossy conversion only runs when something is invalid.
        std::string raw;
        raw.reserve(ids.size() * 4);
        bool first = true;
        for (const int32_t id : ids) {
            if (!first) raw.append(separator());
            raw.append(token_bytes(id));
            first = false;
        }
        if (utf8::find_invalid(raw) == std::string_view::npos) return raw;
        out.reserve(raw.size() + 8);
        utf8::append_lossy(out, raw);
        return out;
    }
    out.reserve(ids.size() * 4);
    stream s(*this);
    for (const int32_t id : ids) s.push(id, out);
    s.finish(out);
    return out;
}

decoder::stream::stream(const decoder& d) : d_(&d), strip_left_(d.strip_content_.empty() ? 0 : d.strip_start_) {}

void decoder::stream::emit(std::string_view text, std::string& out) {
    if (strip_left_ > 0) {
        const std::string& c = d_->strip_content_;
        while (strip_left_ > 0 && text.substr(0, c.size()) == c) {
            text.remove_prefix(c.size());
            --strip_left_;
        }
        if (!text.empty()) strip_left_ = 0;
    }
    out.append(text);
}

void decoder::stream::end_run(std::string& out) {
    if (!pending_.empty()) {
        if (valid_len_ == pending_.size()) {
            emit(pending_, out);
        } else {
            std::string rep;
            for (size_t i = 0; i < pending_.size(); ++i) rep.append(kReplacementChar);
            emit(rep, out);
        }
        pending_.clear();
    }
    valid_len_ = 0;
    run_invalid_ = false;
}

void decoder::stream::push(int32_t id, std::string& out) {
    const decoder& d = *d_;
    const bool first = first_;
    first_ = false;
    const std::string_view bytes = d.bytes_[static_cast<size_t>(id)];
    switch (d.kind_) {
        case kind::join_with_space:
        case kind::byte_level: {
            if (!first) pending_.append(d.separator());
            pending_.append(bytes);
            // Everything before an incomplete trailing sequence decodes the same whatever comes next.
            const size_t ready = pending_.size() - utf8::incomplete_tail(pending_);
            if (ready == 0) return;
            utf8::append_lossy(out, std::string_view(pending_).substr(0, ready));
            pending_.erase(0, ready);
            return;
        }
        case kind::metaspace:
            out.append(first && d.metaspace_strip_first_ ? std::string_view(d.first_bytes_[static_cast<size_t>(id)])
                                                         : bytes);
            return;
        case kind::sentencepiece:
            break;
    }
    if (!d.is_fallback_[static_cast<size_t>(id)]) {
        end_run(out);
        emit(bytes, out);
        return;
    }
    if (run_invalid_) {
        emit(kReplacementChar, out);
        return;
    }
    pending_.append(bytes);
    // Only the part after the known-valid prefix needs checking, so a long run stays linear.
    const std::string_view rest = std::string_view(pending_).substr(valid_len_);
    const size_t bad = utf8::find_invalid(rest);
    if (bad == std::string_view::npos) {
        valid_len_ = pending_.size();
        return;
    }
    const size_t tail = utf8::incomplete_tail(rest);
    if (tail > 0 && bad == rest.size() - tail) {
        valid_len_ += bad;  // may still complete
        return;
    }
    // The run can no longer be valid: HF turns every byte of it into U+FFFD, so they are final now.
    std::string rep;
    for (size_t i = 0; i < pending_.size(); ++i) rep.append(kReplacementChar);
    emit(rep, out);
    pending_.clear();
    valid_len_ = 0;
    run_invalid_ = true;
}

void decoder::stream::finish(std::string& out) {
    if (d_->kind_ == kind::sentencepiece) {
        end_run(out);
    } else {
        utf8::append_lossy(out, pending_);
        pending_.clear();
    }
    first_ = true;
    strip_left_ = d_->strip_content_.empty() ? 0 : d_->strip_start_;
}

}  // namespace zmoe
