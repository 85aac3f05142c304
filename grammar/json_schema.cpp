#include "grammar/json_schema.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "base/error.hpp"
#include "grammar/regex.hpp"

namespace zmoe::grammar {

namespace {

using json = nlohmann::ordered_json;
using ranges_t = std::vector<std::pair<uint32_t, uint32_t>>;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw zmoe::error(errc::invalid_argument, "json_schema: " + what + " at " + (path.empty() ? "#" : path));
}

const std::set<std::string>& annotation_keywords() {
    static const std::set<std::string> k{"title",           "description", "examples",    "default",
                                         "$schema",         "$id",         "$comment",    "deprecated",
                                         "readOnly",        "writeOnly",   "$anchor",     "contentMediaType",
                                         "contentEncoding", "$defs",       "definitions", "strict"};
    return k;
}

const std::set<std::string>& supported_keywords() {
    static const std::set<std::string> k{"type",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "items",
                                         "prefixItems",
                                         "minItems",
                                         "maxItems",
                                         "enum",
                                         "const",
                                         "anyOf",
                                         "oneOf",
                                         "allOf",
                                         "$ref",
                                         "minLength",
                                         "maxLength",
                                         "pattern",
                                         "format",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum",
                                         "uniqueItems",
                                         "nullable"};
    return k;
}

/// Formats as regular expressions over the string's content (RFC 3339 dates and times, RFC 4122 UUIDs, a practical
/// e-mail address, dotted IPv4, RFC 1123 host names). Dates are calendar dates of years 0001-9999 (each month's own
/// length, February 29 in leap years only) and seconds stop at 59: narrowings of RFC 3339, so that date and time
/// libraries (Python's datetime, jsonschema's format checks) accept every output.
const std::map<std::string, std::string>& format_patterns() {
    static const std::string year = R"((\d{3}[1-9]|\d{2}[1-9]\d|\d[1-9]\d{2}|[1-9]\d{3}))";
    static const std::string leap_year = R"((\d\d(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00))";
    static const std::string date = "(" + year +
                                    R"(-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|)"
                                    R"(02-(0[1-9]|1\d|2[0-8]))|)" +
                                    leap_year + "-02-29)";
    static const std::string time = R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
    static const std::string label = R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
    static const std::string octet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
    static const std::map<std::string, std::string> m{
        {"date", date},
        {"time", time},
        {"date-time", date + "T" + time},
        {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
        {"email",
         R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@)" + label + R"((\.)" + label + ")+"},
        {"ipv4", "(" + octet + R"(\.){3})" + octet},
        {"hostname", label + R"((\.)" + label + ")*"},
    };
    return m;
}

/// Decimal digits regex for the integers in [lo, hi] of equal digit count (lo <= hi).
std::string same_length_range(const std::string& lo, const std::string& hi) {
    if (lo.empty()) return "";
    if (lo == hi) return lo;
    if (lo.size() == 1) return std::string("[") + lo[0] + "-" + hi[0] + "]";
    if (lo[0] == hi[0]) return lo.substr(0, 1) + "(" + same_length_range(lo.substr(1), hi.substr(1)) + ")";
    size_t n = lo.size() - 1;
    std::string out = lo.substr(0, 1) + "(" + same_length_range(lo.substr(1), std::string(n, '9')) + ")";
    if (lo[0] + 1 <= hi[0] - 1)
        out += std::string("|[") + static_cast<char>(lo[0] + 1) + "-" + static_cast<char>(hi[0] - 1) + "]\\d{" +
               std::to_string(n) + "}";
    out += "|" + hi.substr(0, 1) + "(" + same_length_range(std::string(n, '0'), hi.substr(1)) + ")";
    return out;
}

/// Regex for the non-negative integers in [lo, hi] (hi < 0: unbounded), canonical spelling (no leading zeros).
std::string nonneg_range(int64_t lo, int64_t hi) {
    std::string a = std::to_string(lo);
    std::vector<std::string> alts;
    size_t max_len = hi < 0 ? a.size() : std::to_string(hi).size();
    for (size_t len = a.size(); len <= max_len; ++len) {
        std::string l = len == a.size() ? a : "1" + std::string(len - 1, '0');
        std::string h = hi >= 0 && len == max_len ? std::to_string(hi) : std::string(len, '9');
        alts.push_back("(" + same_length_range(l, h) + ")");
    }
    if (hi < 0) alts.push_back("[1-9]\\d{" + std::to_string(a.size()) + ",}");
    std::string out;
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? "|" : "") + alts[i];
    return "(" + out + ")";
}

constexpr int64_t kMaxBound = 1000000000000000000LL;

class schema_compiler {
  public:
    schema_compiler(const json& root, const json_schema_options& opt) : root_(root), opt_(opt) {}

    grammar compile_root() {
        int32_t r = b_.add_rule("root");
        nfa& a = b_.rule(r);
        a.set_body(a.concat({ws(a), value(a, root_, "#"), ws(a)}));
        return b_.build(r);
    }

    grammar compile_any_object() {
        int32_t r = b_.add_rule("root");
        nfa& a = b_.rule(r);
        a.set_body(a.concat({ws(a), a.call(any_object_rule()), ws(a)}));
        return b_.build(r);
    }

  private:
    fragment ws(nfa& a) {
        if (!opt_.any_whitespace) return a.empty();
        fragment f{a.add_state(), a.add_state()};
        for (char c : {' ', '\t', '\n', '\r'})
            a.add_bytes(f.start, static_cast<uint8_t>(c), static_cast<uint8_t>(c), f.end);
        return a.star(f);
    }
    fragment sep(nfa& a, char c) {
        if (!opt_.any_whitespace) return a.literal(c == ',' ? ", " : ": ");
        return a.concat({ws(a), a.literal(std::string(1, c)), ws(a)});
    }

    /// One character of a JSON string's content: any escape (no lone surrogates) or an unescaped code point.
    fragment string_char(nfa& a) {
        fragment f = emit_chars(a, {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}, char_encoding::utf8);
        int32_t bs = a.add_state();
        a.add_bytes(f.start, '\\', '\\', bs);
        for (char c : std::string("\"\\/bfnrt"))
            a.add_bytes(bs, static_cast<uint8_t>(c), static_cast<uint8_t>(c), f.end);
        int32_t u = a.add_state();
        a.add_bytes(bs, 'u', 'u', u);
        // \uXXXX outside the surrogates D800-DFFF (a lone surrogate is not valid JSON text for most parsers).
        auto hex = [&](int32_t from, int32_t to) {
            a.add_bytes(from, '0', '9', to);
            a.add_bytes(from, 'a', 'f', to);
            a.add_bytes(from, 'A', 'F', to);
        };
        int32_t h1 = a.add_state(), h1d = a.add_state(), h2 = a.add_state(), h3 = a.add_state();
        a.add_bytes(u, '0', '9', h1);
        a.add_bytes(u, 'a', 'c', h1);
        a.add_bytes(u, 'A', 'C', h1);
        a.add_bytes(u, 'e', 'f', h1);
        a.add_bytes(u, 'E', 'F', h1);
        a.add_bytes(u, 'd', 'd', h1d);
        a.add_bytes(u, 'D', 'D', h1d);
        hex(h1, h2);
        a.add_bytes(h1d, '0', '7', h2);
        int32_t h4 = a.add_state();
        hex(h2, h3);
        hex(h3, h4);
        a.add_epsilon(h4, f.end);
        return f;
    }

    fragment any_string(nfa& a) { return a.concat({a.literal("\""), a.star(string_char(a)), a.literal("\"")}); }

    fragment number(nfa& a, bool integer) {
        // At most two exponent digits: a value any double holds (common parsers refuse 1e999 as an overflow).
        std::string re = integer ? R"(-?(0|[1-9]\d*))" : R"(-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d{1,2})?)";
        return emit_regex(a, parse_regex(re).root, char_encoding::utf8);
    }

    int32_t any_value_rule() {
        if (any_value_ >= 0) return any_value_;
        any_value_ = b_.add_rule("any_value");
        int32_t obj = any_object_rule(), arr = any_array_rule();
        nfa& a = b_.rule(any_value_);
        a.set_body(a.alternate({a.call(obj), a.call(arr), any_string(a), number(a, false), a.literal("true"),
                                a.literal("false"), a.literal("null")}));
        return any_value_;
    }
    int32_t any_object_rule() {
        if (any_object_ >= 0) return any_object_;
        any_object_ = b_.add_rule("any_object");
        int32_t val = any_value_rule();
        nfa& a = b_.rule(any_object_);
        auto member = [&] { return a.concat({any_string(a), sep(a, ':'), a.call(val)}); };
        fragment members = a.concat({member(), a.star(a.concat({sep(a, ','), member()}))});
        a.set_body(a.concat({a.literal("{"), ws(a), a.optional(a.concat({members, ws(a)})), a.literal("}")}));
        return any_object_;
    }
    int32_t any_array_rule() {
        if (any_array_ >= 0) return any_array_;
        any_array_ = b_.add_rule("any_array");
        int32_t val = any_value_rule();
        nfa& a = b_.rule(any_array_);
        fragment items = a.concat({a.call(val), a.star(a.concat({sep(a, ','), a.call(val)}))});
        a.set_body(a.concat({a.literal("["), ws(a), a.optional(a.concat({items, ws(a)})), a.literal("]")}));
        return any_array_;
    }

    const json& resolve_ref(const std::string& ref, const std::string& path) {
        if (ref.empty() || ref[0] != '#') fail(path, "only local $ref (\"#...\") is supported, not '" + ref + "'");
        try {
            std::string ptr = ref.substr(1);
            return ptr.empty() ? root_ : root_.at(json::json_pointer(ptr));
        } catch (const json::exception&) {
            fail(path, "$ref '" + ref + "' does not resolve");
        }
    }

    void check_keywords(const json& s, const std::string& path) {
        for (const auto& [k, v] : s.items()) {
            if (supported_keywords().count(k) || annotation_keywords().count(k)) continue;
            fail(path, "unsupported keyword '" + k + "'");
        }
        if (s.contains("uniqueItems") && s["uniqueItems"] == true)
            fail(path, "unsupported keyword 'uniqueItems' (true)");
    }

    /// Merges allOf's members into one schema when they do not conflict (properties and required are combined).
    json merge_all_of(const json& s, const std::string& path) {
        json out = s;
        out.erase("allOf");
        const json& parts = s["allOf"];
        if (!parts.is_array() || parts.empty()) fail(path, "'allOf' must be a non-empty array");
        for (size_t i = 0; i < parts.size(); ++i) {
            json p = parts[i];
            std::string ppath = path + "/allOf/" + std::to_string(i);
            if (p.is_object() && p.contains("$ref") && p.size() == 1)
                p = resolve_ref(p["$ref"].get<std::string>(), ppath);
            if (!p.is_object()) fail(ppath, "allOf member must be an object schema");
            if (p.contains("allOf")) p = merge_all_of(p, ppath);
            for (const auto& [k, v] : p.items()) {
                if (annotation_keywords().count(k)) continue;
                if (!out.contains(k)) {
                    out[k] = v;
                } else if (k == "properties" && v.is_object() && out[k].is_object()) {
                    for (const auto& [pk, pv] : v.items()) {
                        if (out[k].contains(pk) && out[k][pk] != pv)
                            fail(ppath, "allOf members disagree on property '" + pk + "'");
                        out[k][pk] = pv;
                    }
                } else if (k == "required" && v.is_array()) {
                    for (const auto& x : v)
                        if (std::find(out[k].begin(), out[k].end(), x) == out[k].end()) out[k].push_back(x);
                } else if (out[k] != v) {
                    fail(ppath, "allOf members disagree on '" + k + "' (only non-conflicting merges are supported)");
                }
            }
        }
        return out;
    }

    /// The fragment for a value matching schema `s` (at JSON pointer `path`).
    fragment value(nfa& a, const json& s, const std::string& path) {
        if (s.is_boolean()) {
            if (s.get<bool>()) return a.call(any_value_rule());
            fail(path, "the schema 'false' allows no value");
        }
        if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
        check_keywords(s, path);
        if (s.contains("allOf")) {
            json merged = merge_all_of(s, path);
            return value(a, merged, path);  // the merged schema is used once, immediately
        }
        if (s.contains("$ref")) {
            if (!s["$ref"].is_string()) fail(path, "'$ref' must be a string");
            std::string ref = s["$ref"].get<std::string>();
            for (const auto& [k, v] : s.items())
                if (k != "$ref" && !annotation_keywords().count(k))
                    fail(path, "keyword '" + k + "' beside '$ref' is not supported");
            auto it = ref_rules_.find(ref);
            if (it != ref_rules_.end()) return a.call(it->second);
            const json& target = resolve_ref(ref, path);
            int32_t r = b_.add_rule(ref);
            ref_rules_[ref] = r;
            nfa& ra = b_.rule(r);
            ra.set_body(value(ra, target, ref));
            return a.call(r);
        }
        if (s.contains("enum")) {
            if (!s["enum"].is_array() || s["enum"].empty()) fail(path, "'enum' must be a non-empty array");
            std::vector<fragment> alts;
            for (const auto& v : s["enum"]) {
                std::string text;
                text += canonical_json(v);
                alts.push_back(a.literal(text));
            }
            return a.alternate(alts);
        }
        if (s.contains("const")) {
            std::string text;
            text += canonical_json(s["const"]);
            return a.literal(text);
        }
        for (const char* key : {"anyOf", "oneOf"}) {
            if (!s.contains(key)) continue;
            const json& alts = s[key];
            if (!alts.is_array() || alts.empty()) fail(path, std::string("'") + key + "' must be a non-empty array");
            // Keywords beside anyOf apply to every branch: merged into each.
            json base = s;
            base.erase(key);
            std::vector<fragment> parts;
            for (size_t i = 0; i < alts.size(); ++i) {
                json branch = alts[i];
                bool only_annotations = true;
                for (const auto& [k, v] : base.items())
                    if (!annotation_keywords().count(k)) only_annotations = false;
                if (!only_annotations) branch = merge_all_of(json{{"allOf", json::array({base, branch})}}, path);
                parts.push_back(value(a, branch, path + "/" + key + "/" + std::to_string(i)));
            }
            return a.alternate(parts);
        }
        std::vector<std::string> types;
        if (s.contains("type")) {
            const json& t = s["type"];
            if (t.is_string())
                types.push_back(t.get<std::string>());
            else if (t.is_array() && !t.empty())
                for (const auto& x : t) types.push_back(x.is_string() ? x.get<std::string>() : "?");
            else
                fail(path, "'type' must be a string or a non-empty array of strings");
        } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
            types.push_back("object");
        } else if (s.contains("items") || s.contains("prefixItems")) {
            types.push_back("array");
        } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") ||
                   s.contains("maxLength")) {
            types.push_back("string");
        } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                   s.contains("exclusiveMaximum")) {
            types.push_back("number");
        } else {
            return a.call(any_value_rule());
        }
        if (s.contains("nullable") && s["nullable"] == true) types.push_back("null");
        std::vector<fragment> parts;
        for (const std::string& t : types) parts.push_back(typed(a, s, t, path));
        return a.alternate(parts);
    }

    fragment typed(nfa& a, const json& s, const std::string& t, const std::string& path) {
        if (t == "string") return string_value(a, s, path);
        if (t == "integer" || t == "number") return number_value(a, s, t == "integer", path);
        if (t == "boolean") return a.alternate({a.literal("true"), a.literal("false")});
        if (t == "null") return a.literal("null");
        if (t == "object") return a.call(object_rule(s, path));
        if (t == "array") return a.call(array_rule(s, path));
        fail(path, "unknown type '" + t + "'");
    }

    static int64_t get_count(const json& s, const char* key, const std::string& path) {
        const json& v = s[key];
        if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
            fail(path, std::string("'") + key + "' must be a non-negative integer");
        double d = v.get<double>();
        if (d < 0 || d > 100000) fail(path, std::string("'") + key + "' out of range (0..100000)");
        return static_cast<int64_t>(d);
    }

    fragment string_value(nfa& a, const json& s, const std::string& path) {
        bool has_len = s.contains("minLength") || s.contains("maxLength");
        if (s.contains("pattern") || s.contains("format")) {
            if (has_len) fail(path, "'minLength'/'maxLength' together with 'pattern' or 'format' is not supported");
            if (s.contains("pattern") && s.contains("format"))
                fail(path, "'pattern' together with 'format' is not supported");
            std::string re;
            bool full = true;
            if (s.contains("pattern")) {
                if (!s["pattern"].is_string()) fail(path, "'pattern' must be a string");
                re = s["pattern"].get<std::string>();
                full = false;
            } else {
                std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
                auto it = format_patterns().find(f);
                if (it == format_patterns().end()) fail(path, "unsupported keyword 'format' (value '" + f + "')");
                re = it->second;
            }
            parsed_regex p;
            try {
                p = parse_regex(re);
            } catch (const zmoe::error& e) {
                fail(path, std::string("'pattern': ") + e.what());
            }
            std::vector<fragment> parts{a.literal("\"")};
            // A schema pattern is a search, not a full match: unanchored sides may have anything around.
            if (!full && !p.anchored_start) parts.push_back(a.star(string_char(a)));
            parts.push_back(emit_regex(a, p.root, char_encoding::json_string));
            if (!full && !p.anchored_end) parts.push_back(a.star(string_char(a)));
            parts.push_back(a.literal("\""));
            return a.concat(parts);
        }
        if (!has_len) return any_string(a);
        int64_t lo = s.contains("minLength") ? get_count(s, "minLength", path) : 0;
        int64_t hi = s.contains("maxLength") ? get_count(s, "maxLength", path) : -1;
        if (hi >= 0 && hi < lo) fail(path, "'maxLength' is below 'minLength'");
        if (lo > 2000 || hi > 2000) fail(path, "'minLength'/'maxLength' above 2000 is not supported");
        std::vector<fragment> parts{a.literal("\"")};
        for (int64_t i = 0; i < lo; ++i) parts.push_back(string_char(a));
        if (hi < 0) {
            parts.push_back(a.star(string_char(a)));
        } else if (hi > lo) {
            fragment tail = a.optional(string_char(a));
            for (int64_t k = lo + 1; k < hi; ++k) tail = a.optional(a.concat({string_char(a), tail}));
            parts.push_back(tail);
        }
        parts.push_back(a.literal("\""));
        return a.concat(parts);
    }

    /// A bound as an integer; `ceil_up` rounds a fractional bound inwards for integers, refuses it for numbers.
    static int64_t bound(const json& s, const char* key, bool integer, bool lower, const std::string& path) {
        const json& v = s[key];
        if (!v.is_number()) fail(path, std::string("'") + key + "' must be a number");
        double d = v.get<double>();
        if (std::fabs(d) > static_cast<double>(kMaxBound))
            fail(path, std::string("'") + key + "' beyond 1e18 is not supported");
        bool exclusive = std::string(key).rfind("exclusive", 0) == 0;
        if (std::floor(d) != d) {
            if (!integer)
                fail(path, std::string("unsupported keyword '") + key + "' with a non-integer bound on a number");
            return static_cast<int64_t>(lower ? std::ceil(d) : std::floor(d));
        }
        int64_t x = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(d);
        if (exclusive) {
            if (!integer)
                fail(path, std::string("unsupported keyword '") + key + "' on a number (supported on integers)");
            x += lower ? 1 : -1;
        }
        return x;
    }

    fragment number_value(nfa& a, const json& s, bool integer, const std::string& path) {
        std::optional<int64_t> lo, hi;
        for (const char* k : {"minimum", "exclusiveMinimum"})
            if (s.contains(k)) {
                int64_t x = bound(s, k, integer, true, path);
                lo = lo ? std::max(*lo, x) : x;
            }
        for (const char* k : {"maximum", "exclusiveMaximum"})
            if (s.contains(k)) {
                int64_t x = bound(s, k, integer, false, path);
                hi = hi ? std::min(*hi, x) : x;
            }
        if (!lo && !hi) return number(a, integer);
        if (lo && hi && *lo > *hi) fail(path, "the bounds leave no value");
        // value = [-] I [.F]; bounded numbers are written without an exponent.
        const std::string any_frac = integer ? "" : R"((\.\d+)?)";
        const std::string zero_frac = integer ? "" : R"((\.0+)?)";
        std::vector<std::string> alts;
        // Non-negative part.
        if (!hi || *hi >= 0) {
            int64_t l = lo ? std::max<int64_t>(*lo, 0) : 0;
            if (!hi) {
                alts.push_back(nonneg_range(l, -1) + any_frac);
            } else if (integer) {
                alts.push_back(nonneg_range(l, *hi));
            } else {
                if (*hi - 1 >= l) alts.push_back(nonneg_range(l, *hi - 1) + any_frac);
                if (*hi >= l) alts.push_back(std::to_string(*hi) + zero_frac);
            }
        }
        // Negative part: magnitude m = -x.
        if (!lo || *lo < 0) {
            int64_t m_lo = hi && *hi < 0 ? -*hi : (integer ? 1 : 0);
            if (!lo) {
                alts.push_back("-" + nonneg_range(m_lo, -1) + any_frac);
            } else if (integer) {
                if (-*lo >= m_lo) alts.push_back("-" + nonneg_range(m_lo, -*lo));
            } else {
                if (-*lo - 1 >= m_lo) alts.push_back("-" + nonneg_range(m_lo, -*lo - 1) + any_frac);
                if (-*lo >= m_lo) alts.push_back("-" + std::to_string(-*lo) + zero_frac);
            }
        }
        if (alts.empty()) fail(path, "the bounds leave no value");
        std::string re;
        for (size_t i = 0; i < alts.size(); ++i) re += (i ? "|" : "") + std::string("(") + alts[i] + ")";
        return emit_regex(a, parse_regex(re).root, char_encoding::utf8);
    }

    /// A key other than the names in `exclude`, as a JSON string (no \u escapes, so each key has one spelling).
    fragment other_key(nfa& a, const std::vector<std::string>& exclude) {
        // A trie over the names' code points; leaving it at any point makes the key a different one.
        struct node {
            std::map<uint32_t, int32_t> next;
            bool terminal = false;
        };
        std::vector<node> trie(1);
        for (const std::string& name : exclude) {
            int32_t t = 0;
            for (size_t i = 0; i < name.size();) {
                auto c = static_cast<uint8_t>(name[i]);
                int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
                uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
                for (int k = 1; k < n && i + static_cast<size_t>(k) < name.size(); ++k)
                    cp = (cp << 6) | (static_cast<uint8_t>(name[i + static_cast<size_t>(k)]) & 0x3Fu);
                i += static_cast<size_t>(n);
                auto it = trie[static_cast<size_t>(t)].next.find(cp);
                if (it == trie[static_cast<size_t>(t)].next.end()) {
                    trie.emplace_back();
                    it = trie[static_cast<size_t>(t)].next.emplace(cp, static_cast<int32_t>(trie.size() - 1)).first;
                }
                t = it->second;
            }
            trie[static_cast<size_t>(t)].terminal = true;
        }
        fragment f{a.add_state(), a.add_state()};
        std::vector<int32_t> st(trie.size());
        for (auto& x : st) x = a.add_state();
        int32_t free_state = a.add_state();
        fragment open = a.literal("\"");
        a.add_epsilon(f.start, open.start);
        a.add_epsilon(open.end, st[0]);
        auto edge = [&](int32_t from, int32_t to, const ranges_t& r) {
            fragment c = emit_chars(a, r, char_encoding::json_string);
            a.add_epsilon(from, c.start);
            a.add_epsilon(c.end, to);
        };
        for (size_t t = 0; t < trie.size(); ++t) {
            ranges_t used;
            for (const auto& [cp, child] : trie[t].next) {
                edge(st[t], st[static_cast<size_t>(child)], {{cp, cp}});
                used.push_back({cp, cp});
            }
            edge(st[t], free_state, complement_ranges(used));
            if (!trie[t].terminal) {
                fragment close = a.literal("\"");
                a.add_epsilon(st[t], close.start);
                a.add_epsilon(close.end, f.end);
            }
        }
        edge(free_state, free_state, {{0, 0x10FFFF}});
        fragment close = a.literal("\"");
        a.add_epsilon(free_state, close.start);
        a.add_epsilon(close.end, f.end);
        return f;
    }

    int32_t object_rule(const json& s, const std::string& path) {
        auto it = object_rules_.find(path);
        if (it != object_rules_.end()) return it->second;
        int32_t r = b_.add_rule(path);
        object_rules_[path] = r;
        nfa& a = b_.rule(r);
        for (const char* k : {"minProperties", "maxProperties", "patternProperties", "propertyNames"})
            if (s.contains(k)) fail(path, std::string("unsupported keyword '") + k + "'");
        json props = s.contains("properties") ? s["properties"] : json::object();
        if (!props.is_object()) fail(path, "'properties' must be an object");
        std::set<std::string> required;
        if (s.contains("required")) {
            if (!s["required"].is_array()) fail(path, "'required' must be an array");
            for (const auto& x : s["required"]) {
                if (!x.is_string()) fail(path, "'required' must list strings");
                required.insert(x.get<std::string>());
            }
        }
        json additional = s.contains("additionalProperties") ? s["additionalProperties"] : json(!opt_.strict);
        bool extra = !(additional.is_boolean() && !additional.get<bool>());
        for (const std::string& name : required)
            if (!props.contains(name) && !extra)
                fail(path, "required property '" + name + "' is not in 'properties' and additionalProperties is false");
        for (const std::string& name : required)
            if (!props.contains(name))
                fail(path, "required property '" + name + "' outside 'properties' is not supported");

        // none[i] / some[i]: no property written yet / some written, next candidate is property i.
        const size_t n = props.size();
        std::vector<int32_t> none(n + 1), some(n + 1);
        for (size_t i = 0; i <= n; ++i) none[i] = a.add_state(), some[i] = a.add_state();
        std::vector<std::string> names;
        size_t i = 0;
        for (const auto& [name, sub] : props.items()) {
            names.push_back(name);
            std::string key = json(name).dump(-1, ' ', false);
            auto member = [&](bool comma) {
                std::vector<fragment> parts;
                if (comma) parts.push_back(sep(a, ','));
                parts.push_back(a.literal(key));
                parts.push_back(sep(a, ':'));
                parts.push_back(value(a, sub, path + "/properties/" + name));
                return a.concat(parts);
            };
            fragment first = member(false), later = member(true);
            a.add_epsilon(none[i], first.start);
            a.add_epsilon(first.end, some[i + 1]);
            a.add_epsilon(some[i], later.start);
            a.add_epsilon(later.end, some[i + 1]);
            if (!required.count(name)) {
                a.add_epsilon(none[i], none[i + 1]);
                a.add_epsilon(some[i], some[i + 1]);
            }
            ++i;
        }
        fragment open = a.concat({a.literal("{"), ws(a)});
        fragment close = a.concat({ws(a), a.literal("}")});
        a.add_epsilon(open.end, none[0]);
        if (extra) {
            // Further members after the listed ones, with keys other than theirs; the value in its own rule so
            // that both chains (first member / later member) call it.
            // A scalar value schema is written inline in both chains instead.
            const bool scalar_value =
                additional.is_object() && additional.contains("type") && additional["type"].is_string() &&
                additional["type"] != "object" && additional["type"] != "array" && !additional.contains("$ref") &&
                !additional.contains("anyOf") && !additional.contains("oneOf") && !additional.contains("allOf");
            int32_t extra_rule = -1;
            if (!scalar_value) {
                extra_rule = b_.add_rule(path + "/additionalProperties");
                nfa& ea = b_.rule(extra_rule);
                ea.set_body(value(ea, additional, path + "/additionalProperties"));
            }
            auto member = [&](bool comma) {
                std::vector<fragment> parts;
                if (comma) parts.push_back(sep(a, ','));
                parts.push_back(other_key(a, names));
                parts.push_back(sep(a, ':'));
                parts.push_back(extra_rule >= 0 ? a.call(extra_rule)
                                                : value(a, additional, path + "/additionalProperties"));
                return a.concat(parts);
            };
            fragment first = member(false), later = member(true);
            a.add_epsilon(none[n], first.start);
            a.add_epsilon(first.end, some[n]);
            a.add_epsilon(some[n], later.start);
            a.add_epsilon(later.end, some[n]);
        }
        a.add_epsilon(none[n], close.start);
        a.add_epsilon(some[n], close.start);
        a.set_body({open.start, close.end});
        return r;
    }

    int32_t array_rule(const json& s, const std::string& path) {
        auto it = object_rules_.find(path);
        if (it != object_rules_.end()) return it->second;
        int32_t r = b_.add_rule(path);
        object_rules_[path] = r;
        nfa& a = b_.rule(r);
        for (const char* k : {"contains", "minContains", "maxContains", "additionalItems", "unevaluatedItems"})
            if (s.contains(k)) fail(path, std::string("unsupported keyword '") + k + "'");
        json prefix = s.contains("prefixItems") ? s["prefixItems"] : json::array();
        if (!prefix.is_array()) fail(path, "'prefixItems' must be an array");
        json items = s.contains("items") ? s["items"] : json(true);
        if (items.is_array()) {  // draft-04 tuple form
            prefix = items;
            items = json(false);
        }
        bool items_allowed = !(items.is_boolean() && !items.get<bool>());
        const int64_t p = static_cast<int64_t>(prefix.size());
        int64_t lo = s.contains("minItems") ? get_count(s, "minItems", path) : 0;
        int64_t hi = s.contains("maxItems") ? get_count(s, "maxItems", path) : -1;
        if (!items_allowed) hi = hi < 0 ? p : std::min(hi, p);
        if (hi >= 0 && hi < lo) fail(path, "'minItems' is above the number of items allowed");
        if (lo > 1000 || hi > 1000) fail(path, "'minItems'/'maxItems' above 1000 is not supported");
        // Elements in their own rules (one per distinct schema), so unrolled bounds stay linear in size; a scalar
        // item schema of an array with few unrolled elements is written inline instead, so that tokens such as
        // "\", " that end one element and begin the next are decided by the cache, not at run time.
        auto scalar = [&](const json& x) {
            if (!x.is_object()) return false;
            for (const char* k :
                 {"$ref", "anyOf", "oneOf", "allOf", "properties", "items", "prefixItems", "additionalProperties"})
                if (x.contains(k)) return false;
            if (x.contains("enum") || x.contains("const")) return true;
            if (!x.contains("type") || !x["type"].is_string()) return false;
            const std::string t = x["type"].get<std::string>();
            return t == "string" || t == "number" || t == "integer" || t == "boolean" || t == "null";
        };
        const bool inline_items = hi < 0 ? std::max(lo, p) <= 4 : hi <= 4;
        int32_t item_rule = -1;
        auto element = [&](int64_t k) -> fragment {
            if (inline_items && k >= p && scalar(items)) return value(a, items, path + "/items");
            if (inline_items && k < p && scalar(prefix[static_cast<size_t>(k)]))
                return value(a, prefix[static_cast<size_t>(k)], path + "/prefixItems/" + std::to_string(k));
            if (k < p) {
                std::string ip = path + "/prefixItems/" + std::to_string(k);
                int32_t er = b_.add_rule(ip);
                nfa& ea = b_.rule(er);
                ea.set_body(value(ea, prefix[static_cast<size_t>(k)], ip));
                return a.call(er);
            }
            if (item_rule < 0) {
                item_rule = b_.add_rule(path + "/items");
                nfa& ea = b_.rule(item_rule);
                ea.set_body(value(ea, items, path + "/items"));
            }
            return a.call(item_rule);
        };
        const int64_t explicit_n = std::max(lo, p);
        // tail(k): elements k.. (each preceded by a separator).
        std::function<fragment(int64_t)> tail = [&](int64_t k) -> fragment {
            if (hi >= 0 && k >= hi) return a.empty();
            if (k < explicit_n) {
                fragment piece = a.concat({sep(a, ','), element(k), tail(k + 1)});
                return k >= lo ? a.optional(piece) : piece;
            }
            if (hi < 0) return a.star(a.concat({sep(a, ','), element(k)}));
            fragment t = a.empty();
            for (int64_t j = hi - 1; j >= k; --j) t = a.optional(a.concat({sep(a, ','), element(j), t}));
            return t;
        };
        fragment body;
        if (hi == 0) {
            body = a.empty();
        } else {
            body = a.concat({element(0), tail(1)});
            if (lo == 0) body = a.optional(body);
        }
        a.set_body(a.concat({a.literal("["), ws(a), body, ws(a), a.literal("]")}));
        return r;
    }

    const json& root_;
    json_schema_options opt_;
    grammar_builder b_;
    std::map<std::string, int32_t> ref_rules_, object_rules_;
    int32_t any_value_ = -1, any_object_ = -1, any_array_ = -1;
};

}  // namespace

grammar compile_json_schema(std::string_view schema, const json_schema_options& options) {
    json root;
    try {
        root = json::parse(schema);
    } catch (const json::exception& e) {
        throw zmoe::error(errc::invalid_argument, std::string("json_schema: not valid JSON: ") + e.what());
    }
    return schema_compiler(root, options).compile_root();
}

grammar compile_json_object(const json_schema_options& options) {
    json root = json::object();
    return schema_compiler(root, options).compile_any_object();
}

std::string canonical_json(const json& v) {
    if (v.is_object()) {
        std::string out = "{";
        bool first = true;
        for (const auto& [k, x] : v.items()) {
            if (!first) out += ", ";
            first = false;
            out += json(k).dump(-1, ' ', false);
            out += ": ";
            out += canonical_json(x);
        }
        return out + '}';
    }
    if (v.is_array()) {
        std::string out = "[";
        for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ", ";
            out += canonical_json(v[i]);
        }
        return out + ']';
    }
    return v.dump(-1, ' ', false);
}

}  // namespace zmoe::grammar
