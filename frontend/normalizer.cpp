#include "frontend/normalizer.hpp"

#ifdef ZMOE_WITH_ICU
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#endif

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace zmoe {
namespace {

void parse_into(const nlohmann::json& j, std::vector<normalizer::form>& steps) {
    if (j.is_null()) return;
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        throw error(errc::invalid_checkpoint, "tokenizer.json: normalizer without a \"type\"");
    const std::string type = j["type"].get<std::string>();
    if (type == "NFC") {
        steps.push_back(normalizer::form::nfc);
    } else if (type == "NFD") {
        steps.push_back(normalizer::form::nfd);
    } else if (type == "NFKC") {
        steps.push_back(normalizer::form::nfkc);
    } else if (type == "NFKD") {
        steps.push_back(normalizer::form::nfkd);
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

normalizer normalizer::from_json(const nlohmann::json& j) {
    std::vector<form> steps;
    parse_into(j, steps);
#ifdef ZMOE_WITH_ICU
    for (form f : steps) instance(f);  // fail at load time, not on the first request
#else
    if (!steps.empty())
        throw error(errc::unsupported, "tokenizer.json: Unicode normalizers need ICU; zmoe was built without it");
#endif
    return normalizer(std::move(steps));
}

std::string_view normalizer::normalize(std::string_view text, std::string& storage) const {
    std::string_view current = text;
    std::string scratch;
    for (form f : steps_) {
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
