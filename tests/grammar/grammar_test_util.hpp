#pragma once
// Shared helpers of the grammar tests: the real Qwen3 vocabulary as a tokenizer_info, a small byte-level vocabulary,
// a JSON Schema validator written for these tests (the subset zmoe_grammar supports), a generator of random valid
// instances, and the one canonical JSON spelling the grammar produces (json.dumps' defaults).

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "frontend/tokenizer.hpp"
#include "grammar/grammar_matcher.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/tokenizer_info.hpp"

namespace zmoe::grammar::testing {

using json = nlohmann::ordered_json;

inline const zmoe::tokenizer& qwen3_tokenizer() {
    static std::once_flag once;
    static std::unique_ptr<zmoe::tokenizer> tok;
    std::call_once(once, [] {
        auto dir = std::filesystem::path(ZMOE_SOURCE_DIR) / "third_party" / "tokenizers" / "qwen3";
        if (!std::filesystem::exists(dir / "tokenizer.json"))
            throw std::runtime_error("missing " + (dir / "tokenizer.json").string() +
                                     ": run scripts/fetch_tokenizers.sh");
        tok = std::make_unique<zmoe::tokenizer>(zmoe::tokenizer::from_file(dir));
    });
    return *tok;
}

/// Qwen3's vocabulary: every id's bytes, <|im_end|> and <|endoftext|> as stop tokens, the special tokens excluded.
inline std::shared_ptr<const tokenizer_info> qwen3_info() {
    static std::once_flag once;
    static std::shared_ptr<const tokenizer_info> info;
    std::call_once(once, [] {
        const zmoe::tokenizer& tok = qwen3_tokenizer();
        std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
        std::vector<int32_t> special, stops;
        for (int32_t id = 0; id < tok.vocab_size(); ++id) {
            if (!tok.is_valid_id(id)) continue;
            if (tok.is_special(id))
                special.push_back(id);
            else
                bytes[static_cast<size_t>(id)] = std::string(tok.token_bytes(id));
        }
        for (const char* s : {"<|im_end|>", "<|endoftext|>"})
            if (auto id = tok.token_to_id(s)) stops.push_back(*id);
        info = std::make_shared<const tokenizer_info>(std::move(bytes), std::move(stops), special);
    });
    return info;
}

/// A small vocabulary: the 256 single bytes, a few dozen multi-byte pieces of JSON and text, and a stop token (the
/// last id). Every byte string can be spelled, so exhaustive checks over it are cheap.
inline std::shared_ptr<const tokenizer_info> small_info() {
    static std::shared_ptr<const tokenizer_info> info = [] {
        std::vector<std::string> bytes;
        for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
        for (const char* s : {"{\"", "\"}",  "\", \"",   "\": ",  "\":", ", ",  "true",  "false",   "null",  "12",
                              "00",  "-1",   "ab",       "abc",   "\"a", "a\"", "\\\"",  "\\u",     "\\u00", "\"]",
                              "}]",  "]}",   "}}",       "[{",    "[\"", "\",", ", \"",  "1.",      ".5",    "e+",
                              "é",   "日本", "\xe6\x97", "2024-", "-01", "T1",  ":00",   "Z\"",     "nu",    "ll",
                              "[]",  "{}",   "  ",       "\n",    "yes", "no",  "maybe", "\"yes\"", "id",    "name"})
            bytes.push_back(s);
        bytes.push_back("<stop>");
        int32_t stop = static_cast<int32_t>(bytes.size() - 1);
        return std::make_shared<const tokenizer_info>(std::move(bytes), std::vector<int32_t>{stop});
    }();
    return info;
}

inline std::string canonical(const json& v) { return canonical_json(v); }

inline size_t num_code_points(const std::string& s) {
    size_t n = 0;
    for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    return n;
}

inline const json& resolve(const json& root, const std::string& ref) {
    std::string ptr = ref.substr(1);
    return ptr.empty() ? root : root.at(json::json_pointer(ptr));
}

inline bool format_ok(const std::string& f, const std::string& s) {
    static const std::string d = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
    static const std::string t = R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
    if (f == "date") return std::regex_match(s, std::regex(d));
    if (f == "time") return std::regex_match(s, std::regex(t));
    if (f == "date-time") return std::regex_match(s, std::regex(d + "T" + t));
    if (f == "uuid") return std::regex_match(s, std::regex("[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"));
    if (f == "email") return std::regex_match(s, std::regex(R"([^@\s"]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+)"));
    if (f == "ipv4") {
        std::smatch m;
        if (!std::regex_match(s, m, std::regex(R"((\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3}))"))) return false;
        for (int i = 1; i <= 4; ++i)
            if (std::stoi(m[i]) > 255 || (m[i].length() > 1 && m[i].str()[0] == '0')) return false;
        return true;
    }
    throw std::runtime_error("format_ok: " + f);
}

/// Validates `v` against `s` (the supported subset; oneOf read as anyOf; objects without additionalProperties
/// closed, as the grammar's strict default).
inline bool validate(const json& v, const json& s, const json& root) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) return validate(v, resolve(root, s["$ref"]), root);
    if (s.contains("allOf"))
        for (const auto& p : s["allOf"])
            if (!validate(v, p, root)) return false;
    if (s.contains("enum")) {
        bool any = false;
        for (const auto& e : s["enum"]) any = any || e == v;
        if (!any) return false;
    }
    if (s.contains("const") && s["const"] != v) return false;
    for (const char* k : {"anyOf", "oneOf"}) {
        if (!s.contains(k)) continue;
        bool any = false;
        for (const auto& p : s[k]) any = any || validate(v, p, root);
        if (!any) return false;
    }
    if (s.contains("type")) {
        std::vector<std::string> types;
        if (s["type"].is_string())
            types.push_back(s["type"]);
        else
            for (const auto& t : s["type"]) types.push_back(t);
        if (s.value("nullable", false)) types.push_back("null");
        bool ok = false;
        for (const std::string& t : types) {
            ok = ok || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
                 (t == "string" && v.is_string()) || (t == "boolean" && v.is_boolean()) ||
                 (t == "null" && v.is_null()) || (t == "number" && v.is_number()) ||
                 (t == "integer" &&
                  (v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())));
        }
        if (!ok) return false;
    }
    if (v.is_object() && (s.contains("properties") || s.contains("required") || s.contains("additionalProperties") ||
                          s.value("type", json()) == "object")) {
        json props = s.value("properties", json::object());
        for (const auto& r : s.value("required", json::array()))
            if (!v.contains(r.get<std::string>())) return false;
        json additional = s.contains("additionalProperties") ? s["additionalProperties"] : json(false);
        for (const auto& [k, x] : v.items()) {
            if (props.contains(k)) {
                if (!validate(x, props[k], root)) return false;
            } else if (!validate(x, additional, root)) {
                return false;
            }
        }
    }
    if (v.is_array()) {
        json prefix = s.value("prefixItems", json::array());
        json items = s.contains("items") ? s["items"] : json(true);
        for (size_t i = 0; i < v.size(); ++i)
            if (!validate(v[i], i < prefix.size() ? prefix[i] : items, root)) return false;
        if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
        if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    }
    if (v.is_string()) {
        const std::string str = v.get<std::string>();
        if (s.contains("minLength") && num_code_points(str) < s["minLength"].get<size_t>()) return false;
        if (s.contains("maxLength") && num_code_points(str) > s["maxLength"].get<size_t>()) return false;
        if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>()))) return false;
        if (s.contains("format") && !format_ok(s["format"], str)) return false;
    }
    if (v.is_number()) {
        double x = v.get<double>();
        if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
        if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
        if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
        if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
    }
    return true;
}

/// Random JSON values of every kind (numbers without exponents, strings with characters JSON escapes).
inline json random_value(std::mt19937& rng, int depth) {
    std::uniform_int_distribution<int> kind(0, depth > 2 ? 4 : 6);
    static const std::vector<std::string> strs{
        "", "a", "hello world", "q\"uote", "back\\slash", "line\nfeed", "日本語", "é", "tab\there", "2024-01-02", "x"};
    switch (kind(rng)) {
        case 0:
            return nullptr;
        case 1:
            return std::uniform_int_distribution<int>(0, 1)(rng) == 1;
        case 2:
            return std::uniform_int_distribution<int>(-1000, 1000)(rng);
        case 3:
            return std::uniform_int_distribution<int>(-10000, 10000)(rng) / 100.0 + 0.25;
        case 4:
            return strs[std::uniform_int_distribution<size_t>(0, strs.size() - 1)(rng)];
        case 5: {
            json a = json::array();
            int n = std::uniform_int_distribution<int>(0, 3)(rng);
            for (int i = 0; i < n; ++i) a.push_back(random_value(rng, depth + 1));
            return a;
        }
        default: {
            json o = json::object();
            int n = std::uniform_int_distribution<int>(0, 3)(rng);
            for (int i = 0; i < n; ++i) o["k" + std::to_string(i)] = random_value(rng, depth + 1);
            return o;
        }
    }
}

inline std::string random_string(std::mt19937& rng, size_t lo, size_t hi) {
    static const std::vector<std::string> pieces{"a", "b", "Z", "0", " ", "\"", "\\", "\n", "é", "日", "😀", "/", "\t"};
    size_t n = std::uniform_int_distribution<size_t>(lo, hi)(rng);
    std::string s;
    for (size_t i = 0; i < n; ++i) s += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    return s;
}

/// A random instance of `s` (throws for schemas the generator does not cover; "examples" gives strings for
/// patterns).
inline json generate(const json& s, const json& root, std::mt19937& rng, int depth = 0) {
    auto coin = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
    auto pick = [&](const json& arr) { return arr[std::uniform_int_distribution<size_t>(0, arr.size() - 1)(rng)]; };
    if (s.is_boolean()) return random_value(rng, depth);
    if (s.contains("$ref")) return generate(resolve(root, s["$ref"]), root, rng, depth);
    if (s.contains("enum")) return pick(s["enum"]);
    if (s.contains("const")) return s["const"];
    for (const char* k : {"anyOf", "oneOf"})
        if (s.contains(k)) return generate(pick(s[k]), root, rng, depth);
    std::string type;
    if (!s.contains("type")) {
        if (s.contains("properties"))
            type = "object";
        else if (s.contains("items") || s.contains("prefixItems"))
            type = "array";
        else
            return random_value(rng, depth);
    } else {
        json t = s["type"].is_array() ? pick(s["type"]) : s["type"];
        type = t;
    }
    if (s.value("nullable", false) && coin(0.2)) return nullptr;
    if (type == "null") return nullptr;
    if (type == "boolean") return coin(0.5);
    if (type == "integer" || type == "number") {
        int64_t lo = -100000, hi = 100000;
        if (s.contains("minimum")) lo = static_cast<int64_t>(std::ceil(s["minimum"].get<double>()));
        if (s.contains("exclusiveMinimum"))
            lo = static_cast<int64_t>(std::floor(s["exclusiveMinimum"].get<double>())) + 1;
        if (s.contains("maximum")) hi = static_cast<int64_t>(std::floor(s["maximum"].get<double>()));
        if (s.contains("exclusiveMaximum"))
            hi = static_cast<int64_t>(std::ceil(s["exclusiveMaximum"].get<double>())) - 1;
        if (lo < hi - 200000) lo = hi - 200000;
        if (hi > lo + 200000) hi = lo + 200000;
        int64_t x = std::uniform_int_distribution<int64_t>(lo, hi)(rng);
        if (type == "number" && x < hi && coin(0.5)) return static_cast<double>(x) + 0.5;
        return x;
    }
    if (type == "string") {
        if (s.contains("examples")) return pick(s["examples"]);
        if (s.contains("format")) {
            std::string f = s["format"];
            if (f == "date") return "2024-02-29";
            if (f == "time") return "23:59:59.5+01:00";
            if (f == "date-time") return "1999-12-31T00:00:00Z";
            if (f == "uuid") return "123e4567-e89b-12d3-a456-426614174000";
            if (f == "email") return "john.doe@example.com";
            if (f == "ipv4") return "192.168.0.255";
        }
        size_t lo = s.value("minLength", 0), hi = s.value("maxLength", lo + 6);
        return random_string(rng, lo, hi);
    }
    if (type == "array") {
        json prefix = s.value("prefixItems", json::array());
        json items = s.contains("items") ? s["items"] : json(true);
        size_t lo = s.value("minItems", 0);
        size_t hi = s.value("maxItems", lo + (depth > 2 ? 1 : 3));
        if (items.is_boolean() && !items.get<bool>()) hi = std::min(hi, prefix.size());
        hi = std::min(hi, lo + 4);
        size_t n = std::uniform_int_distribution<size_t>(lo, std::max(lo, hi))(rng);
        json a = json::array();
        for (size_t i = 0; i < n; ++i)
            a.push_back(generate(i < prefix.size() ? prefix[i] : items, root, rng, depth + 1));
        return a;
    }
    // object
    json o = json::object();
    json props = s.value("properties", json::object());
    json required = s.value("required", json::array());
    for (const auto& [k, sub] : props.items()) {
        bool req = std::find(required.begin(), required.end(), k) != required.end();
        if (req || coin(0.6)) o[k] = generate(sub, root, rng, depth + 1);
    }
    if (s.contains("additionalProperties") && !(s["additionalProperties"] == false) && coin(0.5))
        o["extra_" + std::to_string(depth)] = generate(s["additionalProperties"], root, rng, depth + 1);
    return o;
}

/// Whether the matcher accepts `ids` then a stop token (on a fresh matcher).
inline bool accepts_all(grammar_matcher& m, const std::vector<int32_t>& ids) {
    m.reset();
    for (int32_t id : ids)
        if (!m.accept_token(id)) return false;
    return m.accept_token(m.compiled().tokenizer().stop_ids().at(0));
}

inline bool bit(const std::vector<uint32_t>& mask, int32_t id) {
    return (mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u;
}

}  // namespace zmoe::grammar::testing
