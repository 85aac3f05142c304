#include "frontend/jinja_builtins.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>

#if defined(ZMOE_WITH_ICU)
#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#endif

namespace zmoe::jinja {

namespace {

// Argument `index` (positional) or `key` (keyword), or nullptr.
const value* find_arg(const call_args& args, size_t index, const char* key) {
    if (index < args.positional.size()) return &args.positional[index];
    for (const auto& [k, v] : args.keyword)
        if (k == key) return &v;
    return nullptr;
}

value arg_or(const call_args& args, size_t index, const char* key, value fallback) {
    const value* v = find_arg(args, index, key);
    return v ? *v : std::move(fallback);
}

[[noreturn]] void type_error(const std::string& what) { throw render_error(what); }

const std::string& need_str(const value& v, const char* what) {
    if (!v.is_string()) type_error(std::string(what) + " expects a string, got " + type_name(v));
    return v.str_ref();
}

value make_list(const std::vector<value>& items) {
    json arr = json::array();
    for (const auto& v : items) arr.push_back(v.to_json("a list element"));
    return value(std::move(arr));
}

// Python whitespace (str.isspace) as UTF-8 code points.
bool is_py_space(const std::string& cp) {
    if (cp.size() == 1) {
        const unsigned char c = static_cast<unsigned char>(cp[0]);
        return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
    }
    static const std::set<std::string> kWide = {
        "\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81", "\xe2\x80\x82", "\xe2\x80\x83",
        "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a",
        "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
    return kWide.count(cp) > 0;
}

#if defined(ZMOE_WITH_ICU)
// Python's str.lower()/upper() use Unicode's full case mappings (ß -> SS); ICU's root locale gives the same.
std::string py_lower(const std::string& s) {
    std::string out;
    icu::UnicodeString::fromUTF8(s).toLower(icu::Locale::getRoot()).toUTF8String(out);
    return out;
}
std::string py_upper(const std::string& s) {
    std::string out;
    icu::UnicodeString::fromUTF8(s).toUpper(icu::Locale::getRoot()).toUTF8String(out);
    return out;
}
bool is_cased_letter(const std::string& cp) {
    const icu::UnicodeString u = icu::UnicodeString::fromUTF8(cp);
    return u.length() > 0 &&
           (u_isUUppercase(u.char32At(0)) || u_isULowercase(u.char32At(0)) || u_istitle(u.char32At(0)));
}
#else
std::string py_lower(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}
std::string py_upper(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}
bool is_cased_letter(const std::string& cp) {
    return cp.size() == 1 && std::isalpha(static_cast<unsigned char>(cp[0]));
}
#endif

// First code point upper-cased, the rest lower-cased (Python's str.capitalize).
std::string capitalize(const std::string& s) {
    const auto cps = code_points(s);
    std::string out;
    for (size_t i = 0; i < cps.size(); ++i) out += i == 0 ? py_upper(cps[i]) : py_lower(cps[i]);
    return out;
}

std::vector<std::string> py_split(const std::string& s, const value* sep, int64_t maxsplit) {
    std::vector<std::string> out;
    if (!sep || sep->is_none()) {
        const auto cps = code_points(s);
        std::string cur;
        bool in_word = false;
        size_t i = 0;
        for (; i < cps.size(); ++i) {
            if (is_py_space(cps[i])) {
                if (in_word) {
                    out.push_back(cur);
                    cur.clear();
                    in_word = false;
                }
                continue;
            }
            if (!in_word && maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
            in_word = true;
            cur += cps[i];
        }
        if (in_word) out.push_back(cur);
        if (i < cps.size()) {
            std::string rest;
            for (; i < cps.size(); ++i) rest += cps[i];
            out.push_back(py_strip(rest, nullptr, false, true));
        }
        return out;
    }
    const std::string& d = need_str(*sep, "split");
    if (d.empty()) type_error("empty separator");
    size_t start = 0;
    while (true) {
        if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
        const size_t p = s.find(d, start);
        if (p == std::string::npos) break;
        out.push_back(s.substr(start, p - start));
        start = p + d.size();
    }
    out.push_back(s.substr(start));
    return out;
}

std::vector<std::string> py_rsplit(const std::string& s, const value* sep, int64_t maxsplit) {
    if (!sep || sep->is_none() || maxsplit < 0) return py_split(s, sep, maxsplit);
    const std::string& d = need_str(*sep, "rsplit");
    if (d.empty()) type_error("empty separator");
    std::vector<std::string> out;
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
        if (end < d.size()) break;
        const size_t p = s.rfind(d, end - d.size());
        if (p == std::string::npos) break;
        out.push_back(s.substr(p + d.size(), end - p - d.size()));
        end = p;
    }
    out.push_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
}

value str_list(const std::vector<std::string>& parts) {
    json arr = json::array();
    for (const auto& p : parts) arr.push_back(p);
    return value(std::move(arr));
}

int64_t norm_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

bool prefix_match(const std::string& s, const value& what, bool suffix) {
    const auto one = [&](const std::string& p) {
        if (p.size() > s.size()) return false;
        return suffix ? s.compare(s.size() - p.size(), p.size(), p) == 0 : s.compare(0, p.size(), p) == 0;
    };
    if (what.is_list()) {
        for (const auto& e : what.data())
            if (e.is_string() && one(e.get_ref<const std::string&>())) return true;
        return false;
    }
    return one(need_str(what, suffix ? "endswith" : "startswith"));
}

// str.title(): a cased letter after a non-cased character starts a word.
std::string title_case(const std::string& s) {
    std::string out;
    bool prev_cased = false;
    for (const auto& cp : code_points(s)) {
        const bool cased = is_cased_letter(cp);
        out += cased ? (prev_cased ? py_lower(cp) : py_upper(cp)) : cp;
        prev_cased = cased;
    }
    return out;
}

// jinja2's title filter: words start after runs of '-', whitespace, '(', '{', '[', '<'.
std::string title_filter(const std::string& s) {
    std::string out;
    bool word_start = true;
    for (const auto& cp : code_points(s)) {
        const bool sep = is_py_space(cp) || cp == "-" || cp == "(" || cp == "{" || cp == "[" || cp == "<";
        if (sep) {
            out += cp;
            word_start = true;
        } else {
            out += word_start ? py_upper(cp) : py_lower(cp);
            word_start = false;
        }
    }
    return out;
}

// A bound method on a str.
value string_method(const std::string& s, const std::string& name) {
    const auto m = [&](auto fn) { return value::make_callable("str." + name, fn); };
    if (name == "startswith" || name == "endswith") {
        const bool suffix = name == "endswith";
        return m([s, suffix](call_args& a) -> value {
            if (a.positional.empty()) type_error("startswith/endswith takes a prefix");
            return value(json(prefix_match(s, a.positional[0], suffix)));
        });
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const bool left = name != "rstrip", right = name != "lstrip";
        return m([s, left, right](call_args& a) -> value {
            const value* chars = find_arg(a, 0, "chars");
            if (chars && !chars->is_none()) return value(json(py_strip(s, &need_str(*chars, "strip"), left, right)));
            return value(json(py_strip(s, nullptr, left, right)));
        });
    }
    if (name == "split" || name == "rsplit") {
        const bool r = name == "rsplit";
        return m([s, r](call_args& a) -> value {
            const value* sep = find_arg(a, 0, "sep");
            const value maxsplit = arg_or(a, 1, "maxsplit", value(json(-1)));
            return str_list(r ? py_rsplit(s, sep, as_int(maxsplit)) : py_split(s, sep, as_int(maxsplit)));
        });
    }
    if (name == "lower") return m([s](call_args&) -> value { return value(json(py_lower(s))); });
    if (name == "upper") return m([s](call_args&) -> value { return value(json(py_upper(s))); });
    if (name == "title") return m([s](call_args&) -> value { return value(json(title_case(s))); });
    if (name == "capitalize") return m([s](call_args&) -> value { return value(json(capitalize(s))); });
    if (name == "replace")
        return m([s](call_args& a) -> value {
            if (a.positional.size() < 2) type_error("replace takes old and new");
            const std::string& from = need_str(a.positional[0], "replace");
            const std::string& to = need_str(a.positional[1], "replace");
            int64_t count = a.positional.size() > 2 ? as_int(a.positional[2]) : -1;
            std::string out;
            if (from.empty()) {
                // Python inserts `to` between every code point.
                const auto cps = code_points(s);
                for (size_t i = 0; i <= cps.size(); ++i) {
                    if (count < 0 || static_cast<int64_t>(i) < count) out += to;
                    if (i < cps.size()) out += cps[i];
                }
                return value(json(out));
            }
            size_t start = 0;
            for (size_t p; count != 0 && (p = s.find(from, start)) != std::string::npos; --count) {
                out += s.substr(start, p - start) + to;
                start = p + from.size();
            }
            out += s.substr(start);
            return value(json(out));
        });
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
        return m([s, name](call_args& a) -> value {
            if (a.positional.empty()) type_error(name + " takes a substring");
            const std::string& sub = need_str(a.positional[0], name.c_str());
            if (name == "count") {
                if (sub.empty()) return value(json(static_cast<int64_t>(num_code_points(s) + 1)));
                int64_t n = 0;
                for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
                return value(json(n));
            }
            const size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
            if (p == std::string::npos) {
                if (name == "index" || name == "rindex") type_error("substring not found");
                return value(json(-1));
            }
            return value(json(static_cast<int64_t>(num_code_points(s.substr(0, p)))));
        });
    if (name == "join")
        return m([s](call_args& a) -> value {
            if (a.positional.empty()) type_error("join takes an iterable");
            std::string out;
            bool first = true;
            for (const auto& e : iterate(a.positional[0])) {
                if (!first) out += s;
                first = false;
                out += need_str(e, "join");
            }
            return value(json(out));
        });
    if (name == "splitlines")
        return m([s](call_args& a) -> value {
            const bool keep = truthy(arg_or(a, 0, "keepends", value(json(false))));
            std::vector<std::string> lines;
            std::string cur;
            for (size_t i = 0; i < s.size(); ++i) {
                const char c = s[i];
                if (c == '\n' || c == '\r') {
                    std::string end(1, c);
                    if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') end += s[++i];
                    lines.push_back(keep ? cur + end : cur);
                    cur.clear();
                } else {
                    cur.push_back(c);
                }
            }
            if (!cur.empty()) lines.push_back(cur);
            return str_list(lines);
        });
    const auto all_of = [&](auto pred) {
        return m([s, pred](call_args&) -> value {
            if (s.empty()) return value(json(false));
            for (char c : s)
                if (!pred(static_cast<unsigned char>(c))) return value(json(false));
            return value(json(true));
        });
    };
    if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
        return all_of([](unsigned char c) { return std::isdigit(c) != 0; });
    if (name == "isalpha") return all_of([](unsigned char c) { return std::isalpha(c) != 0 || c >= 0x80; });
    if (name == "isalnum") return all_of([](unsigned char c) { return std::isalnum(c) != 0 || c >= 0x80; });
    if (name == "isspace")
        return m([s](call_args&) -> value {
            const auto cps = code_points(s);
            return value(json(!cps.empty() && std::all_of(cps.begin(), cps.end(), is_py_space)));
        });
    if (name == "islower" || name == "isupper") {
        const bool lower = name == "islower";
        return m([s, lower](call_args&) -> value {
            bool cased = false;
            for (char c : s) {
                const unsigned char u = static_cast<unsigned char>(c);
                if (std::isalpha(u)) {
                    cased = true;
                    if (lower ? std::isupper(u) : std::islower(u)) return value(json(false));
                }
            }
            return value(json(cased));
        });
    }
    return value::undefined("str." + name);
}

value unsafe_method(const std::string& type, const std::string& name) {
    return value::make_callable(type + "." + name, [type, name](call_args&) -> value {
        throw render_error("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
    });
}

value dict_method(const json& d, const std::string& name) {
    if (name == "items")
        return value::make_callable("dict.items", [d](call_args&) -> value {
            json arr = json::array();
            for (auto it = d.begin(); it != d.end(); ++it) arr.push_back(json::array({it.key(), it.value()}));
            return value(std::move(arr));
        });
    if (name == "keys")
        return value::make_callable("dict.keys", [d](call_args&) -> value {
            json arr = json::array();
            for (auto it = d.begin(); it != d.end(); ++it) arr.push_back(it.key());
            return value(std::move(arr));
        });
    if (name == "values")
        return value::make_callable("dict.values", [d](call_args&) -> value {
            json arr = json::array();
            for (auto it = d.begin(); it != d.end(); ++it) arr.push_back(it.value());
            return value(std::move(arr));
        });
    if (name == "get")
        return value::make_callable("dict.get", [d](call_args& a) -> value {
            if (a.positional.empty()) type_error("get takes a key");
            const value fallback = arg_or(a, 1, "default", value(json(nullptr)));
            if (!a.positional[0].is_string()) return fallback;
            auto it = d.find(a.positional[0].str_ref());
            return it == d.end() ? fallback : value(*it);
        });
    if (name == "copy") return value::make_callable("dict.copy", [d](call_args&) -> value { return value(d); });
    if (name == "update" || name == "pop" || name == "popitem" || name == "setdefault" || name == "clear")
        return unsafe_method("dict", name);
    return value();  // not a method: caller falls back to the item
}

value list_method(const json& l, const std::string& name) {
    if (name == "index" || name == "count")
        return value::make_callable("list." + name, [l, name](call_args& a) -> value {
            if (a.positional.empty()) type_error(name + " takes a value");
            int64_t n = 0;
            for (size_t i = 0; i < l.size(); ++i) {
                if (!equals(value(l[i]), a.positional[0])) continue;
                if (name == "index") return value(json(static_cast<int64_t>(i)));
                ++n;
            }
            if (name == "index") type_error("value is not in list");
            return value(json(n));
        });
    if (name == "copy") return value::make_callable("list.copy", [l](call_args&) -> value { return value(l); });
    if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
        name == "clear" || name == "sort" || name == "reverse")
        return unsafe_method("list", name);
    return value::undefined("list." + name);
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out.push_back(c);
        }
    }
    return out;
}

// Sort key comparison for sort/dictsort/unique/min/max: strings case-folded unless case_sensitive.
value sort_key(const value& v, bool case_sensitive) {
    if (!case_sensitive && v.is_string()) return value(json(py_lower(v.str_ref())));
    return v;
}

value attribute_path(const value& v, const value& attr) {
    if (attr.is_int()) return get_item(v, attr);
    value cur = v;
    const std::string& path = need_str(attr, "attribute");
    size_t start = 0;
    while (true) {
        const size_t dot = path.find('.', start);
        const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        bool all_digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
        });
        cur = all_digits ? get_item(cur, value(json(std::stoll(part)))) : get_item(cur, value(json(part)));
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    return cur;
}

}  // namespace

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
    const auto cps = code_points(s);
    std::set<std::string> strip_set;
    if (chars)
        for (const auto& c : code_points(*chars)) strip_set.insert(c);
    const auto strip_it = [&](const std::string& cp) { return chars ? strip_set.count(cp) > 0 : is_py_space(cp); };
    size_t b = 0, e = cps.size();
    if (left)
        while (b < e && strip_it(cps[b])) ++b;
    if (right)
        while (e > b && strip_it(cps[e - 1])) --e;
    std::string out;
    for (size_t i = b; i < e; ++i) out += cps[i];
    return out;
}

std::vector<value> iterate(const value& v) {
    std::vector<value> out;
    if (v.is_undefined()) return out;
    if (v.is_string()) {
        for (auto& cp : code_points(v.str_ref())) out.emplace_back(json(std::move(cp)));
        return out;
    }
    if (v.is_list()) {
        out.reserve(v.data().size());
        for (const auto& e : v.data()) out.emplace_back(e);
        return out;
    }
    if (v.is_dict()) {
        for (auto it = v.data().begin(); it != v.data().end(); ++it) out.emplace_back(json(it.key()));
        return out;
    }
    if (v.is_object()) {
        for (const auto& [k, _] : v.obj()) out.emplace_back(json(k));
        return out;
    }
    type_error("'" + type_name(v) + "' object is not iterable");
}

value get_attribute(const value& subject, const std::string& name) {
    if (subject.is_undefined())
        type_error("'" + (subject.name().empty() ? std::string("value") : subject.name()) + "' is undefined");
    if (!name.empty() && name[0] == '_') return value::undefined(name);  // sandbox: private attributes
    if (subject.is_object()) {
        auto it = subject.obj().find(name);
        return it == subject.obj().end() ? value::undefined(name) : it->second;
    }
    if (!subject.is_data()) return value::undefined(name);
    const json& j = subject.data();
    if (j.is_object()) {
        value method = dict_method(j, name);
        if (!method.is_undefined()) return method;
        auto it = j.find(name);
        return it == j.end() ? value::undefined(name) : value(*it);
    }
    if (j.is_string()) return string_method(j.get_ref<const std::string&>(), name);
    if (j.is_array()) return list_method(j, name);
    return value::undefined(name);
}

value get_item(const value& subject, const value& key) {
    if (subject.is_undefined())
        type_error("'" + (subject.name().empty() ? std::string("value") : subject.name()) + "' is undefined");
    if (subject.is_object()) {
        if (!key.is_string()) return value::undefined();
        return get_attribute(subject, key.str_ref());
    }
    if (!subject.is_data()) return value::undefined();
    const json& j = subject.data();
    if (j.is_object()) {
        if (key.is_string()) {
            auto it = j.find(key.str_ref());
            if (it != j.end()) return value(*it);
            return get_attribute(subject, key.str_ref());
        }
        return value::undefined();
    }
    if (j.is_array() || j.is_string()) {
        if (key.is_string()) return get_attribute(subject, key.str_ref());
        if (!key.is_int() && !key.is_bool()) return value::undefined();
        if (j.is_array()) {
            const int64_t i = norm_index(as_int(key), static_cast<int64_t>(j.size()));
            if (i < 0 || i >= static_cast<int64_t>(j.size())) return value::undefined();
            return value(j[static_cast<size_t>(i)]);
        }
        const auto cps = code_points(j.get_ref<const std::string&>());
        const int64_t i = norm_index(as_int(key), static_cast<int64_t>(cps.size()));
        if (i < 0 || i >= static_cast<int64_t>(cps.size())) return value::undefined();
        return value(json(cps[static_cast<size_t>(i)]));
    }
    return value::undefined();
}

value get_slice(const value& subject, const value& start_v, const value& stop_v, const value& step_v) {
    const bool is_str = subject.is_string();
    if (!is_str && !subject.is_list()) type_error("'" + type_name(subject) + "' object is not subscriptable");
    std::vector<json> items;
    if (is_str) {
        for (auto& cp : code_points(subject.str_ref())) items.emplace_back(std::move(cp));
    } else {
        for (const auto& e : subject.data()) items.push_back(e);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    const int64_t step = (step_v.is_undefined() || step_v.is_none()) ? 1 : as_int(step_v);
    if (step == 0) type_error("slice step cannot be zero");
    const auto bound = [&](const value& v, int64_t dflt) -> int64_t {
        if (v.is_undefined() || v.is_none()) return dflt;
        int64_t i = as_int(v);
        if (i < 0) i += n;
        if (step > 0) return std::clamp<int64_t>(i, 0, n);
        return std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t start = bound(start_v, step > 0 ? 0 : n - 1);
    const int64_t stop = bound(stop_v, step > 0 ? n : -1);
    json out = is_str ? json("") : json::array();
    std::string s;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (is_str)
            s += items[static_cast<size_t>(i)].get_ref<const std::string&>();
        else
            out.push_back(items[static_cast<size_t>(i)]);
    }
    return is_str ? value(json(s)) : value(std::move(out));
}

bool contains(const value& haystack, const value& needle) {
    if (haystack.is_string()) return haystack.str_ref().find(need_str(needle, "'in <string>'")) != std::string::npos;
    if (haystack.is_dict()) return needle.is_string() && haystack.data().contains(needle.str_ref());
    if (haystack.is_object()) return needle.is_string() && haystack.obj().count(needle.str_ref()) > 0;
    for (const auto& e : iterate(haystack))
        if (equals(e, needle)) return true;
    return false;
}

// ---- filters ----

value apply_filter(const std::string& name, const value& v, call_args& a) {
    if (name == "length" || name == "count") {
        if (v.is_string()) return value(json(static_cast<int64_t>(num_code_points(v.str_ref()))));
        if (v.is_list() || v.is_dict()) return value(json(static_cast<int64_t>(v.data().size())));
        if (v.is_undefined()) return value(json(0));
        if (v.is_object()) return value(json(static_cast<int64_t>(v.obj().size())));
        type_error("object of type '" + type_name(v) + "' has no len()");
    }
    if (name == "tojson") {
        const value indent = arg_or(a, 0, "indent", value(json(nullptr)));
        const bool sort_keys = truthy(arg_or(a, 99, "sort_keys", value(json(false))));
        if (v.is_undefined()) type_error("Object of type Undefined is not JSON serializable");
        return value(
            json(json_dumps(v.to_json("JSON"), indent.is_none() ? -1 : static_cast<int>(as_int(indent)), sort_keys)));
    }
    if (name == "trim") {
        const value* chars = find_arg(a, 0, "chars");
        const std::string s = to_str(v);
        if (chars && !chars->is_none()) return value(json(py_strip(s, &need_str(*chars, "trim"), true, true)));
        return value(json(py_strip(s, nullptr, true, true)));
    }
    if (name == "string") return value(json(to_str(v)));
    if (name == "upper") return value(json(py_upper(to_str(v))));
    if (name == "lower") return value(json(py_lower(to_str(v))));
    if (name == "title") return value(json(title_filter(to_str(v))));
    if (name == "capitalize") return value(json(capitalize(to_str(v))));
    if (name == "default" || name == "d") {
        const value fallback = arg_or(a, 0, "default_value", value(json("")));
        const bool boolean = truthy(arg_or(a, 1, "boolean", value(json(false))));
        if (v.is_undefined() || (boolean && !truthy(v))) return fallback;
        return v;
    }
    if (name == "safe" || (name == "list" && v.is_list())) return v;
    if (name == "list") return make_list(iterate(v));
    if (name == "e" || name == "escape" || name == "forceescape") return value(json(html_escape(to_str(v))));
    if (name == "first") {
        auto items = iterate(v);
        return items.empty() ? value::undefined("first") : items.front();
    }
    if (name == "last") {
        auto items = iterate(v);
        return items.empty() ? value::undefined("last") : items.back();
    }
    if (name == "reverse") {
        if (v.is_string()) return get_slice(v, value(), value(), value(json(-1)));
        auto items = iterate(v);
        std::reverse(items.begin(), items.end());
        return make_list(items);
    }
    if (name == "join") {
        const std::string sep = to_str(arg_or(a, 0, "d", value(json(""))));
        const value* attr = find_arg(a, 1, "attribute");
        std::string out;
        bool first = true;
        for (const auto& e : iterate(v)) {
            if (!first) out += sep;
            first = false;
            out += to_str(attr ? attribute_path(e, *attr) : e);
        }
        return value(json(out));
    }
    if (name == "replace") {
        call_args sub;
        sub.positional.assign(a.positional.begin(), a.positional.end());
        for (const auto& [k, val] : a.keyword)
            if (k == "count") sub.positional.push_back(val);
        return get_attribute(value(json(to_str(v))), "replace").fn()(sub);
    }
    if (name == "int") {
        const value fallback = arg_or(a, 0, "default", value(json(0)));
        if (v.is_bool() || v.is_int()) return value(json(as_int(v)));
        if (v.is_number()) return value(json(static_cast<int64_t>(std::trunc(as_double(v)))));
        if (v.is_string()) {
            const std::string s = py_strip(v.str_ref(), nullptr, true, true);
            char* end = nullptr;
            const long long i = std::strtoll(s.c_str(), &end, 10);
            if (!s.empty() && end && *end == '\0') return value(json(static_cast<int64_t>(i)));
            const double d = std::strtod(s.c_str(), &end);
            if (!s.empty() && end && *end == '\0') return value(json(static_cast<int64_t>(std::trunc(d))));
        }
        return fallback;
    }
    if (name == "float") {
        const value fallback = arg_or(a, 0, "default", value(json(0.0)));
        if (v.is_number()) return value(json(as_double(v)));
        if (v.is_string()) {
            const std::string s = py_strip(v.str_ref(), nullptr, true, true);
            char* end = nullptr;
            const double d = std::strtod(s.c_str(), &end);
            if (!s.empty() && end && *end == '\0') return value(json(d));
        }
        return fallback;
    }
    if (name == "abs") {
        if (v.is_int() || v.is_bool()) return value(json(std::llabs(as_int(v))));
        return value(json(std::fabs(as_double(v))));
    }
    if (name == "round") {
        const int64_t precision = as_int(arg_or(a, 0, "precision", value(json(0))));
        const std::string method = to_str(arg_or(a, 1, "method", value(json("common"))));
        const double scale = std::pow(10.0, static_cast<double>(precision));
        const double x = as_double(v) * scale;
        double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
        return value(json(r / scale));
    }
    if (name == "items") {
        if (v.is_undefined()) return value(json::array());
        if (!v.is_dict()) type_error("items filter expects a mapping");
        return get_attribute(v, "items").fn()(a);
    }
    if (name == "dictsort") {
        if (!v.is_dict()) type_error("dictsort expects a mapping");
        const bool case_sensitive = truthy(arg_or(a, 0, "case_sensitive", value(json(false))));
        const std::string by = to_str(arg_or(a, 1, "by", value(json("key"))));
        const bool rev = truthy(arg_or(a, 2, "reverse", value(json(false))));
        std::vector<std::pair<value, value>> items;
        for (auto it = v.data().begin(); it != v.data().end(); ++it) items.emplace_back(json(it.key()), it.value());
        std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
            const value& kx = by == "value" ? x.second : x.first;
            const value& ky = by == "value" ? y.second : y.first;
            return rev ? less(sort_key(ky, case_sensitive), sort_key(kx, case_sensitive))
                       : less(sort_key(kx, case_sensitive), sort_key(ky, case_sensitive));
        });
        json arr = json::array();
        for (auto& [k, val] : items) arr.push_back(json::array({k.data(), val.data()}));
        return value(std::move(arr));
    }
    if (name == "sort") {
        const bool rev = truthy(arg_or(a, 0, "reverse", value(json(false))));
        const bool case_sensitive = truthy(arg_or(a, 1, "case_sensitive", value(json(false))));
        const value* attr = find_arg(a, 2, "attribute");
        auto items = iterate(v);
        std::stable_sort(items.begin(), items.end(), [&](const value& x, const value& y) {
            value kx = sort_key(attr ? attribute_path(x, *attr) : x, case_sensitive);
            value ky = sort_key(attr ? attribute_path(y, *attr) : y, case_sensitive);
            return rev ? less(ky, kx) : less(kx, ky);
        });
        return make_list(items);
    }
    if (name == "unique") {
        const bool case_sensitive = truthy(arg_or(a, 0, "case_sensitive", value(json(false))));
        const value* attr = find_arg(a, 1, "attribute");
        std::vector<value> out, seen;
        for (const auto& e : iterate(v)) {
            const value key = sort_key(attr ? attribute_path(e, *attr) : e, case_sensitive);
            if (std::any_of(seen.begin(), seen.end(), [&](const value& s) { return equals(s, key); })) continue;
            seen.push_back(key);
            out.push_back(e);
        }
        return make_list(out);
    }
    if (name == "min" || name == "max") {
        const bool case_sensitive = truthy(arg_or(a, 0, "case_sensitive", value(json(false))));
        const value* attr = find_arg(a, 1, "attribute");
        auto items = iterate(v);
        if (items.empty()) return value::undefined(name);
        value best = items[0];
        for (size_t i = 1; i < items.size(); ++i) {
            const value kb = sort_key(attr ? attribute_path(best, *attr) : best, case_sensitive);
            const value ki = sort_key(attr ? attribute_path(items[i], *attr) : items[i], case_sensitive);
            if (name == "min" ? less(ki, kb) : less(kb, ki)) best = items[i];
        }
        return best;
    }
    if (name == "sum") {
        const value* attr = find_arg(a, 0, "attribute");
        value total = arg_or(a, 1, "start", value(json(0)));
        for (const auto& e : iterate(v)) {
            const value x = attr ? attribute_path(e, *attr) : e;
            if ((total.is_int() || total.is_bool()) && (x.is_int() || x.is_bool()))
                total = value(json(as_int(total) + as_int(x)));
            else
                total = value(json(as_double(total) + as_double(x)));
        }
        return total;
    }
    if (name == "map") {
        std::vector<value> out;
        const value* attr = nullptr;
        for (const auto& [k, val] : a.keyword)
            if (k == "attribute") attr = &val;
        if (attr) {
            const value* dflt = nullptr;
            for (const auto& [k, val] : a.keyword)
                if (k == "default") dflt = &val;
            for (const auto& e : iterate(v)) {
                value x = attribute_path(e, *attr);
                out.push_back(x.is_undefined() && dflt ? *dflt : x);
            }
            return make_list(out);
        }
        if (a.positional.empty()) type_error("map requires a filter name or attribute=");
        const std::string filter = need_str(a.positional[0], "map");
        call_args rest;
        rest.positional.assign(a.positional.begin() + 1, a.positional.end());
        rest.keyword = a.keyword;
        for (const auto& e : iterate(v)) out.push_back(apply_filter(filter, e, rest));
        return make_list(out);
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
        const bool by_attr = name.size() > 6;
        const bool keep_if = name.rfind("select", 0) == 0;
        size_t i = 0;
        const value* attr = nullptr;
        if (by_attr) {
            if (a.positional.empty()) type_error(name + " requires an attribute");
            attr = &a.positional[i++];
        }
        std::string test;
        if (i < a.positional.size()) test = need_str(a.positional[i++], name.c_str());
        call_args rest;
        rest.positional.assign(a.positional.begin() + static_cast<long>(std::min(i, a.positional.size())),
                               a.positional.end());
        std::vector<value> out;
        for (const auto& e : iterate(v)) {
            const value x = attr ? attribute_path(e, *attr) : e;
            const bool pass = test.empty() ? truthy(x) : apply_test(test, x, rest);
            if (pass == keep_if) out.push_back(e);
        }
        return make_list(out);
    }
    if (name == "indent") {
        const value width = arg_or(a, 0, "width", value(json(4)));
        const bool first = truthy(arg_or(a, 1, "first", value(json(false))));
        const bool blank = truthy(arg_or(a, 2, "blank", value(json(false))));
        const std::string indention =
            width.is_string() ? width.str_ref() : std::string(static_cast<size_t>(as_int(width)), ' ');
        std::string s = to_str(v) + "\n";
        std::vector<std::string> lines;
        {
            call_args none;
            const value split = get_attribute(value(json(s)), "splitlines").fn()(none);
            for (const auto& l : split.data()) lines.push_back(l.get<std::string>());
        }
        std::string rv;
        if (blank) {
            for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + indention : "") + lines[k];
        } else {
            rv = lines.empty() ? "" : lines[0];
            for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : indention + lines[k]);
        }
        if (first) rv = indention + rv;
        return value(json(rv));
    }
    if (name == "center") {
        const int64_t width = as_int(arg_or(a, 0, "width", value(json(80))));
        const std::string s = to_str(v);
        const int64_t n = static_cast<int64_t>(num_code_points(s));
        if (n >= width) return value(json(s));
        const int64_t total = width - n, left = total / 2 + (total & width & 1);
        return value(json(std::string(static_cast<size_t>(left), ' ') + s +
                          std::string(static_cast<size_t>(total - left), ' ')));
    }
    if (name == "wordcount") return value(json(static_cast<int64_t>(py_split(to_str(v), nullptr, -1).size())));
    if (name == "attr") {
        if (a.positional.empty()) type_error("attr requires a name");
        return get_attribute(v, need_str(a.positional[0], "attr"));
    }
    if (name == "format") {
        // printf-style: %s %d %i %r %f %%.
        const std::string& fmt = need_str(v, "format");
        std::string out;
        size_t next = 0;
        for (size_t i = 0; i < fmt.size(); ++i) {
            if (fmt[i] != '%' || i + 1 == fmt.size()) {
                out.push_back(fmt[i]);
                continue;
            }
            const char c = fmt[++i];
            if (c == '%') {
                out.push_back('%');
                continue;
            }
            if (next >= a.positional.size()) type_error("not enough arguments for format string");
            const value& x = a.positional[next++];
            if (c == 's')
                out += to_str(x);
            else if (c == 'r')
                out += x.is_data() ? repr(x.data()) : to_str(x);
            else if (c == 'd' || c == 'i')
                out += std::to_string(as_int(x));
            else if (c == 'f') {
                char buf[64];
                std::snprintf(buf, sizeof buf, "%f", as_double(x));
                out += buf;
            } else
                type_error(std::string("unsupported format character '") + c + "'");
        }
        return value(json(out));
    }
    type_error("no filter named '" + name + "'");
}

// ---- tests ----

bool apply_test(const std::string& name, const value& v, call_args& a) {
    const auto other = [&]() -> const value& {
        if (a.positional.empty()) type_error("test '" + name + "' takes an argument");
        return a.positional[0];
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_data() && v.data().is_number_float();
    if (name == "boolean") return v.is_bool();
    if (name == "true") return v.is_bool() && v.data().get<bool>();
    if (name == "false") return v.is_bool() && !v.data().get<bool>();
    if (name == "mapping") return v.is_dict();
    if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
    if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() || v.is_object();
    if (name == "callable") return v.is_callable();
    if (name == "odd") return as_int(v) % 2 != 0;
    if (name == "even") return as_int(v) % 2 == 0;
    if (name == "divisibleby") return as_int(v) % as_int(other()) == 0;
    if (name == "eq" || name == "equalto" || name == "==") return equals(v, other());
    if (name == "ne" || name == "!=") return !equals(v, other());
    if (name == "lt" || name == "lessthan" || name == "<") return less(v, other());
    if (name == "le" || name == "<=") return !less(other(), v);
    if (name == "gt" || name == "greaterthan" || name == ">") return less(other(), v);
    if (name == "ge" || name == ">=") return !less(v, other());
    if (name == "in") return contains(other(), v);
    if (name == "sameas") {
        const value& o = other();
        if (v.is_data() && o.is_data() && (v.data().is_null() || v.data().is_boolean()))
            return v.data().type() == o.data().type() && v.data() == o.data();
        return v.same_object(o);
    }
    if (name == "lower") return v.is_string() && py_lower(v.str_ref()) == v.str_ref();
    if (name == "upper") return v.is_string() && py_upper(v.str_ref()) == v.str_ref();
    if (name == "escaped") return false;
    type_error("no test named '" + name + "'");
}

// ---- globals ----

void add_default_globals(object& g) {
    g["range"] = value::make_callable("range", [](call_args& a) -> value {
        int64_t start = 0, stop = 0, step = 1;
        if (a.positional.size() == 1) {
            stop = as_int(a.positional[0]);
        } else if (a.positional.size() >= 2) {
            start = as_int(a.positional[0]);
            stop = as_int(a.positional[1]);
            if (a.positional.size() > 2) step = as_int(a.positional[2]);
        } else {
            type_error("range expected at least 1 argument");
        }
        if (step == 0) type_error("range() arg 3 must not be zero");
        json arr = json::array();
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            arr.push_back(i);
            if (arr.size() > 100000) type_error("range too big");
        }
        return value(std::move(arr));
    });
    g["dict"] = value::make_callable("dict", [](call_args& a) -> value {
        json d = json::object();
        if (!a.positional.empty() && a.positional[0].is_dict()) d = a.positional[0].data();
        for (const auto& [k, v] : a.keyword) d[k] = v.to_json("a dict value");
        return value(std::move(d));
    });
    g["namespace"] = value::make_callable("namespace", [](call_args& a) -> value {
        value ns = value::make_object("Namespace");
        if (!a.positional.empty() && a.positional[0].is_dict())
            for (auto it = a.positional[0].data().begin(); it != a.positional[0].data().end(); ++it)
                ns.obj()[it.key()] = value(it.value());
        for (const auto& [k, v] : a.keyword) ns.obj()[k] = v;
        return ns;
    });
}

}  // namespace zmoe::jinja
