#include "tool_calls/json_schema_ebnf.hpp"

#include <cmath>
#include <optional>
#include <set>

#include "base/error.hpp"

namespace zmoe::tool_calls {

using ojson = nlohmann::ordered_json;

namespace {

const std::set<std::string>& annotations() {
    static const std::set<std::string> k{"title",      "description", "examples", "default",     "$schema",
                                         "$id",        "$comment",    "$defs",    "definitions", "strict",
                                         "deprecated", "readOnly",    "writeOnly"};
    return k;
}

const std::set<std::string>& supported() {
    static const std::set<std::string> k{"type",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "items",
                                         "minItems",
                                         "maxItems",
                                         "enum",
                                         "const",
                                         "anyOf",
                                         "oneOf",
                                         "$ref",
                                         "minLength",
                                         "maxLength",
                                         "nullable",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum"};
    return k;
}

std::string dump(const ojson& v) { return v.dump(-1, ' ', false, ojson::error_handler_t::replace); }

/// json.dumps' spelling of a value: ", " and ": " separators.
std::string dumps(const ojson& v) {
    if (v.is_object()) {
        std::string s = "{";
        bool first = true;
        for (const auto& [k, x] : v.items()) {
            s += (first ? "" : ", ") + dump(ojson(k)) + ": " + dumps(x);
            first = false;
        }
        return s + "}";
    }
    if (v.is_array()) {
        std::string s = "[";
        for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + dumps(v[i]);
        return s + "]";
    }
    return dump(v);
}

size_t count_field(const ojson& s, const char* name, const std::string& where) {
    if (!s.contains(name)) return 0;
    if (!s[name].is_number_unsigned()) throw error(errc::invalid_argument, where + ": '" + name + "' must be >= 0");
    return s[name].get<size_t>();
}

/// `item` repeated between lo and hi (hi == SIZE_MAX: unbounded) times, joined by `sep`.
std::string repeat(const std::string& item, const std::string& sep, size_t lo, size_t hi) {
    if (hi == 0) return "";
    const std::string more = "(" + sep + " " + item + ")";
    std::string rest;
    const size_t lo1 = lo > 0 ? lo - 1 : 0;
    if (hi == SIZE_MAX)
        rest = more + "{" + std::to_string(lo1) + ",}";
    else
        rest = more + "{" + std::to_string(lo1) + "," + std::to_string(hi - 1) + "}";
    const std::string one = item + " " + rest;
    return lo == 0 ? "(" + one + ")?" : one;
}

constexpr int64_t kMaxInteger = 9999999999999999;  // 16 digits: json-integer's bound

/// The decimal strings of [lo, hi], both with the same number of digits, as an EBNF expression.
std::string same_length(const std::string& lo, const std::string& hi) {
    if (lo == hi) return "\"" + lo + "\"";
    const size_t n = lo.size() - 1;
    const std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
    const std::string any = n == 0 ? "" : " [0-9]{" + std::to_string(n) + "}";
    if (lo[0] == hi[0]) return "\"" + std::string(1, lo[0]) + "\" " + same_length(rest_lo, rest_hi);
    // lo[0] rest_lo..9s | (lo[0]+1 .. hi[0]-1) anything | hi[0] 0s..rest_hi; a first (last) branch that covers all
    // of its digits joins the middle class, so the expression stays quadratic in the digits.
    const bool full_lo = rest_lo == std::string(n, '0'), full_hi = rest_hi == std::string(n, '9');
    const char first = full_lo ? lo[0] : static_cast<char>(lo[0] + 1);
    const char last = full_hi ? hi[0] : static_cast<char>(hi[0] - 1);
    std::vector<std::string> alts;
    if (!full_lo) alts.push_back("\"" + std::string(1, lo[0]) + "\" " + same_length(rest_lo, std::string(n, '9')));
    if (first <= last) alts.push_back(std::string("[") + first + "-" + last + "]" + any);
    if (!full_hi) alts.push_back("\"" + std::string(1, hi[0]) + "\" " + same_length(std::string(n, '0'), rest_hi));
    std::string out;
    for (const std::string& x : alts) out += (out.empty() ? "(" : " | ") + x;
    return out + ")";
}

/// The integers [lo, hi] (0 <= lo <= hi), without leading zeros.
std::string nonneg_range(int64_t lo, int64_t hi) {
    std::string out;
    int64_t low = 1;  // smallest number of the current digit count
    for (int digits = 1; digits <= 16; ++digits, low *= 10) {
        const int64_t high = low * 10 - 1;
        const int64_t a = std::max(lo, digits == 1 ? 0 : low), b = std::min(hi, high);
        if (a > b) continue;
        out += (out.empty() ? "" : " | ") + same_length(std::to_string(a), std::to_string(b));
    }
    return "(" + out + ")";
}

/// The JSON integers in [lo, hi].
std::string integer_range(int64_t lo, int64_t hi) {
    std::vector<std::string> alts;
    if (lo < 0) alts.push_back("\"-\" " + nonneg_range(std::max<int64_t>(1, hi < 0 ? -hi : 1), -lo));
    if (hi >= 0) alts.push_back(nonneg_range(std::max<int64_t>(lo, 0), hi));
    std::string out;
    for (const std::string& a : alts) out += (out.empty() ? "(" : " | ") + a;
    return out + ")";
}

}  // namespace

std::string json_schema_ebnf::literal(const std::string& bytes) {
    static const char* kHex = "0123456789abcdef";
    std::string out = "\"";
    for (unsigned char c : bytes) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20) {
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

std::string json_schema_ebnf::rule(const std::string& body) {
    const std::string name = prefix_ + "-" + std::to_string(counter_++);
    rules_.emplace_back(name, body);
    return name;
}

std::string json_schema_ebnf::add(const ojson& schema, const std::string& prefix, const std::string& where) {
    root_ = &schema;
    prefix_ = prefix;
    where_ = where;
    refs_.clear();
    counter_ = 0;
    return value(schema, "");
}

std::string json_schema_ebnf::value(const ojson& s, const std::string& path) {
    const std::string at = where_ + (path.empty() ? "" : " at " + path);
    if (s.is_boolean()) {
        if (!s.get<bool>()) throw error(errc::invalid_argument, at + ": the schema false accepts nothing");
        return "json-value";
    }
    if (!s.is_object()) throw error(errc::invalid_argument, at + ": a schema must be an object");
    for (const auto& [k, v] : s.items())
        if (!annotations().count(k) && !supported().count(k))
            throw error(errc::invalid_argument, at + ": the JSON Schema keyword '" + k + "' is not supported");
    if (s.contains("$ref")) {
        const std::string ref = s["$ref"].is_string() ? s["$ref"].get<std::string>() : "";
        for (const auto& [r, name] : refs_)
            if (r == ref) return name;
        const ojson* target = nullptr;
        for (const std::string base : {"#/$defs/", "#/definitions/"}) {
            if (ref.rfind(base, 0) != 0) continue;
            const std::string key = base.substr(2, base.size() - 3);
            const std::string name = ref.substr(base.size());
            if (root_->contains(key) && (*root_)[key].contains(name)) target = &(*root_)[key][name];
        }
        if (!target) throw error(errc::invalid_argument, at + ": '$ref' " + ref + " does not resolve");
        // Named before its body is written, so that a recursive reference finds it.
        const std::string name = prefix_ + "-" + std::to_string(counter_++);
        refs_.emplace_back(ref, name);
        const size_t slot = rules_.size();
        rules_.emplace_back(name, "");
        const std::string body = value(*target, ref);
        rules_[slot].second = body;
        return name;
    }
    if (s.contains("const")) return literal(dumps(s["const"]));
    if (s.contains("enum")) {
        if (!s["enum"].is_array() || s["enum"].empty())
            throw error(errc::invalid_argument, at + ": 'enum' must be a non-empty list");
        std::string alts;
        for (const ojson& v : s["enum"]) alts += (alts.empty() ? "" : " | ") + literal(dumps(v));
        return "(" + alts + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
        if (!s.contains(key)) continue;
        if (!s[key].is_array() || s[key].empty())
            throw error(errc::invalid_argument, at + ": '" + key + "' must be a non-empty list");
        std::string alts;
        for (size_t i = 0; i < s[key].size(); ++i)
            alts += (alts.empty() ? "" : " | ") + value(s[key][i], path + "/" + key + "/" + std::to_string(i));
        return rule(alts);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
        if (s["type"].is_string()) {
            types.push_back(s["type"]);
        } else if (s["type"].is_array()) {
            for (const ojson& t : s["type"])
                if (t.is_string()) types.push_back(t);
        }
        if (types.empty()) throw error(errc::invalid_argument, at + ": 'type' must be a string or a list of them");
    } else if (s.contains("properties")) {
        types.push_back("object");
    } else if (s.contains("items")) {
        types.push_back("array");
    } else {
        return "json-value";
    }
    if (s.value("nullable", false)) types.push_back("null");
    std::string alts;
    for (const std::string& t : types) {
        std::string e;
        if (t == "object") {
            e = object(s, path);
        } else if (t == "array") {
            e = array(s, path);
        } else if (t == "string") {
            const size_t lo = count_field(s, "minLength", at);
            const size_t hi = s.contains("maxLength") ? count_field(s, "maxLength", at) : SIZE_MAX;
            if (lo == 0 && hi == SIZE_MAX)
                e = "json-string";
            else
                e = "\"\\\"\" json-char{" + std::to_string(lo) + "," + (hi == SIZE_MAX ? "" : std::to_string(hi)) +
                    "} \"\\\"\"";
        } else if (t == "integer") {
            e = integer(s, at);
        } else if (t == "number") {
            for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
                if (s.contains(k))
                    throw error(errc::invalid_argument,
                                at + ": '" + std::string(k) + "' on a number is not supported (on an integer it is)");
            e = "json-number";
        } else if (t == "boolean") {
            e = "(\"true\" | \"false\")";
        } else if (t == "null") {
            e = "\"null\"";
        } else {
            throw error(errc::invalid_argument, at + ": unknown type '" + t + "'");
        }
        alts += (alts.empty() ? "" : " | ") + e;
    }
    return types.size() == 1 ? alts : "(" + alts + ")";
}

std::string json_schema_ebnf::integer(const ojson& s, const std::string& at) {
    int64_t lo = -kMaxInteger, hi = kMaxInteger;
    const auto bound = [&](const char* key) -> std::optional<double> {
        if (!s.contains(key)) return std::nullopt;
        if (!s[key].is_number()) throw error(errc::invalid_argument, at + ": '" + key + "' must be a number");
        return s[key].get<double>();
    };
    const auto clamp = [](double v) { return static_cast<int64_t>(std::max(-1e16, std::min(1e16, v))); };
    if (auto v = bound("minimum")) lo = std::max(lo, clamp(std::ceil(*v)));
    if (auto v = bound("exclusiveMinimum")) lo = std::max(lo, clamp(std::floor(*v) + 1));
    if (auto v = bound("maximum")) hi = std::min(hi, clamp(std::floor(*v)));
    if (auto v = bound("exclusiveMaximum")) hi = std::min(hi, clamp(std::ceil(*v) - 1));
    lo = std::max(lo, -kMaxInteger);
    hi = std::min(hi, kMaxInteger);
    if (lo > hi) throw error(errc::invalid_argument, at + ": no integer lies within its bounds");
    if (lo == -kMaxInteger && hi == kMaxInteger) return "json-integer";
    return integer_range(lo, hi);
}

std::string json_schema_ebnf::object(const ojson& s, const std::string& path) {
    const std::string at = where_ + (path.empty() ? "" : " at " + path);
    const ojson* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (s.contains("additionalProperties") && !(s["additionalProperties"].is_boolean() && !s["additionalProperties"])) {
        if (props && !props->empty())
            throw error(errc::invalid_argument,
                        at + ": 'additionalProperties' other than false beside 'properties' is not supported");
        return "json-object";
    }
    if (!props) return "json-object";
    if (!props->is_object()) throw error(errc::invalid_argument, at + ": 'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
        if (!s["required"].is_array()) throw error(errc::invalid_argument, at + ": 'required' must be a list");
        for (const ojson& r : s["required"]) {
            if (!r.is_string() || !props->contains(r.get<std::string>()))
                throw error(errc::invalid_argument, at + ": 'required' names " + dump(r) + ", not among 'properties'");
            required.insert(r.get<std::string>());
        }
    }
    std::vector<std::pair<std::string, bool>> kv;  // "key": value, required
    for (const auto& [k, v] : props->items())
        kv.emplace_back(literal(dump(ojson(k)) + ": ") + " " + value(v, path + "/properties/" + k),
                        required.count(k) > 0);
    // tail(i): properties i.. after one was written; head(i): properties i.. before any was.
    const size_t n = kv.size();
    std::vector<std::string> tail(n + 1), head(n + 1);
    for (size_t i = n; i-- > 0;) {
        const std::string item = "\", \" " + kv[i].first;
        tail[i] = (kv[i].second ? item : "(" + item + ")?") + (tail[i + 1].empty() ? "" : " " + tail[i + 1]);
        const std::string first = kv[i].first + (tail[i + 1].empty() ? "" : " " + tail[i + 1]);
        if (kv[i].second)
            head[i] = first;
        else if (head[i + 1].empty())
            head[i] = "(" + first + ")?";
        else
            head[i] = "(" + first + " | " + head[i + 1] + ")";
        if (!head[i].empty()) head[i] = rule(head[i]);
        if (!tail[i].empty()) tail[i] = rule(tail[i]);
    }
    return rule("\"{\" " + (head[0].empty() ? "" : head[0] + " ") + "\"}\"");
}

std::string json_schema_ebnf::array(const ojson& s, const std::string& path) {
    const std::string at = where_ + (path.empty() ? "" : " at " + path);
    const std::string item = s.contains("items") ? value(s["items"], path + "/items") : "json-value";
    const size_t lo = count_field(s, "minItems", at);
    const size_t hi = s.contains("maxItems") ? count_field(s, "maxItems", at) : SIZE_MAX;
    if (hi < lo) throw error(errc::invalid_argument, at + ": 'maxItems' < 'minItems'");
    const std::string body = repeat(item, "\", \"", lo, hi);
    return rule("\"[\" " + (body.empty() ? "" : body + " ") + "\"]\"");
}

std::string json_schema_ebnf::text() const {
    std::string out;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    out +=
        "json-value ::= json-object | json-array | json-string | json-number | \"true\" | \"false\" | \"null\"\n"
        "json-object ::= \"{\" (json-string \": \" json-value (\", \" json-string \": \" json-value)*)? \"}\"\n"
        "json-array ::= \"[\" (json-value (\", \" json-value)*)? \"]\"\n"
        "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
        "json-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
        "json-integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
        "json-number ::= json-integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?\n";
    return out;
}

}  // namespace zmoe::tool_calls
