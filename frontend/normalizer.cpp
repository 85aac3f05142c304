#include "frontend/normalizer.hpp"

#ifdef ZMOE_WITH_ICU
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#endif

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace zmoe {
namespace {

normalizer::step unicode_step(normalizer::form f) {
    normalizer::step s;
    s.type = normalizer::step::kind::unicode;
    s.unicode_form = f;
    return s;
}

void parse_into(const nlohmann::json& j, std::vector<normalizer::step>& steps) {
    if (j.is_null()) return;
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        throw error(errc::invalid_checkpoint, "tokenizer.json: normalizer without a \"type\"");
    const std::string type = j["type"].get<std::string>();
    using kind = normalizer::step::kind;
    if (type == "NFC") {
        steps.push_back(unicode_step(normalizer::form::nfc));
    } else if (type == "NFD") {
        steps.push_back(unicode_step(normalizer::form::nfd));
    } else if (type == "NFKC") {
        steps.push_back(unicode_step(normalizer::form::nfkc));
    } else if (type == "NFKD") {
        steps.push_back(unicode_step(normalizer::form::nfkd));
    } else if (type == "Prepend") {
        if (!j.contains("prepend") || !j["prepend"].is_string())
            throw error(errc::invalid_checkpoint, "tokenizer.json: Prepend normalizer without a \"prepend\" string");
        normalizer::step s;
        s.type = kind::prepend;
        s.prepend = j["prepend"].get<std::string>();
        steps.push_back(std::move(s));
    } else if (type == "Replace") {
        normalizer::step s;
        s.type = kind::replace;
        s.replace = replace_rule::from_json(j, "Replace normalizer");
        steps.push_back(std::move(s));
    } else if (type == "Sequence") {
        if (!j.contains("normalizers") || !j["normalizers"].is_array())
            throw error(errc::invalid_checkpoint, "tokenizer.json: Sequence normalizer without \"normalizers\"");
        for (const auto& sub : j["normalizers"]) parse_into(sub, steps);
    } else {
        throw error(errc::unsupported, "tokenizer.json: normalizer type '" + type + "' is not supported");
    }
}

// Below these lead bytes no code point can change under the given form, so most text skips ICU entirely:
// NFC leaves everything below U+0300 alone (the first combining mark), NFD everything below U+00C0, and the
// compatibility forms only ASCII (U+00A0 already decomposes).
uint8_t stable_below(normalizer::form f) {
    switch (f) {
        case normalizer::form::nfc:
            return 0xCC;
        case normalizer::form::nfd:
            return 0xC3;
        default:
            return 0x80;
    }
}

#ifdef ZMOE_WITH_ICU
const icu::Normalizer2* instance(normalizer::form f) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = nullptr;
    switch (f) {
        case normalizer::form::nfc:
            n = icu::Normalizer2::getNFCInstance(status);
            break;
        case normalizer::form::nfd:
            n = icu::Normalizer2::getNFDInstance(status);
            break;
        case normalizer::form::nfkc:
            n = icu::Normalizer2::getNFKCInstance(status);
            break;
        case normalizer::form::nfkd:
            n = icu::Normalizer2::getNFKDInstance(status);
            break;
    }
    if (U_FAILURE(status) || !n)
        throw error(errc::internal, std::string("ICU normalizer unavailable: ") + u_errorName(status));
    return n;
}

#endif

}  // namespace

replace_rule replace_rule::from_json(const nlohmann::json& j, std::string_view where) {
    const std::string name(where);
    if (!j.contains("content") || !j["content"].is_string())
        throw error(errc::invalid_checkpoint, "tokenizer.json: " + name + " without a \"content\" string");
    replace_rule r;
    r.content = j["content"].get<std::string>();
    const nlohmann::json null_json;
    const auto& pattern = j.contains("pattern") ? j["pattern"] : null_json;
    if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
        r.literal = pattern["String"].get<std::string>();
        // HF would insert the content between every two characters; no real file does that.
        if (r.literal.empty())
            throw error(errc::unsupported,
                        "tokenizer.json: " + name + " with an empty String pattern is not supported");
    } else if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
        r.regex = std::make_shared<onig_regex>(pattern["Regex"].get<std::string>());
    } else {
        throw error(errc::invalid_checkpoint, "tokenizer.json: " + name + " needs a String or Regex pattern");
    }
    return r;
}

std::string_view replace_rule::apply(std::string_view text, std::string& storage) const {
    thread_local std::vector<std::pair<uint32_t, uint32_t>> matches;
    matches.clear();
    if (regex) {
        regex->find_all(text, matches);
    } else {
        for (size_t pos = text.find(literal); pos != std::string_view::npos; pos = text.find(literal, pos)) {
            matches.emplace_back(static_cast<uint32_t>(pos), static_cast<uint32_t>(pos + literal.size()));
            pos += literal.size();
        }
    }
    if (matches.empty()) return text;
    std::string out;
    out.reserve(text.size() + matches.size() * content.size());
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
        out.append(text.substr(prev, b - prev));
        out.append(content);
        prev = e;
    }
    out.append(text.substr(prev));
    storage.swap(out);
    return storage;
}

normalizer::normalizer(std::vector<form> forms) {
    for (form f : forms) steps_.push_back(unicode_step(f));
}

normalizer normalizer::from_json(const nlohmann::json& j) {
    std::vector<step> steps;
    parse_into(j, steps);
    for (const step& s : steps) {
        if (s.type != step::kind::unicode) continue;
#ifdef ZMOE_WITH_ICU
        instance(s.unicode_form);  // fail at load time, not on the first request
#else
        throw error(errc::unsupported, "tokenizer.json: Unicode normalizers need ICU; zmoe was built without it");
#endif
    }
    return normalizer(std::move(steps));
}

std::string_view normalizer::normalize(std::string_view text, std::string& storage) const {
    if (text.empty()) return text;
    std::string_view current = text;
    std::string scratch;
    for (const step& st : steps_) {
        if (st.type == step::kind::prepend) {
            scratch.clear();
            scratch.reserve(st.prepend.size() + current.size());
            scratch.append(st.prepend).append(current);
            storage.swap(scratch);
            current = storage;
            continue;
        }
        if (st.type == step::kind::replace) {
            // apply() may return a view of `current` (which can be `storage`): replace through scratch.
            const std::string_view replaced = st.replace.apply(current, scratch);
            if (replaced.data() != current.data() || replaced.size() != current.size()) {
                storage.swap(scratch);
                current = storage;
            }
            continue;
        }
        const form f = st.unicode_form;
        const uint8_t limit = stable_below(f);
        bool stable = true;
        for (char c : current) {
            if (static_cast<uint8_t>(c) >= limit) {
                stable = false;
                break;
            }
        }
        if (stable) continue;
#ifdef ZMOE_WITH_ICU
        UErrorCode status = U_ZERO_ERROR;
        const icu::Normalizer2* n = instance(f);
        const icu::StringPiece piece(current.data(), static_cast<int32_t>(current.size()));
        if (n->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) continue;
        status = U_ZERO_ERROR;
        scratch.clear();
        icu::StringByteSink<std::string> sink(&scratch, static_cast<int32_t>(current.size()));
        n->normalizeUTF8(0, piece, sink, nullptr, status);
        if (U_FAILURE(status))
            throw error(errc::internal, std::string("ICU normalization failed: ") + u_errorName(status));
        storage.swap(scratch);
        current = storage;
#else
        (void)storage;  // unreachable: from_json refuses normalizers without ICU
#endif
    }
    return current;
}

}  // namespace zmoe
