#include "frontend/jinja_value.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace zmoe::jinja {

json value::to_json(const char* what) const {
    if (is_data()) return data_;
    throw render_error(std::string("cannot use ") + (is_undefined() ? "an undefined value" : "a " + name()) + " as " +
                       what);
}

bool truthy(const value& v) {
    switch (v.type()) {
        case value::kind::undefined:
            return false;
        case value::kind::object:
        case value::kind::callable:
            return true;
        case value::kind::data:
            break;
    }
    const json& j = v.data();
    switch (j.type()) {
        case json::value_t::null:
            return false;
        case json::value_t::boolean:
            return j.get<bool>();
        case json::value_t::number_integer:
        case json::value_t::number_unsigned:
            return j.get<int64_t>() != 0;
        case json::value_t::number_float:
            return j.get<double>() != 0.0;
        case json::value_t::string:
            return !j.get_ref<const std::string&>().empty();
        case json::value_t::array:
        case json::value_t::object:
            return !j.empty();
        default:
            return false;
    }
}

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
    // Shortest round-trip digits, as Python's repr.
    char buf[64];
    int precision = 1;
    for (; precision <= 17; ++precision) {
        std::snprintf(buf, sizeof buf, "%.*e", precision - 1, d);
        if (std::strtod(buf, nullptr) == d) break;
    }
    // buf = [-]d[.ddd]e[+-]XX
    std::string s(buf);
    bool negative = s[0] == '-';
    if (negative) s.erase(0, 1);
    const size_t e_pos = s.find('e');
    const int exponent = std::atoi(s.c_str() + e_pos + 1);
    std::string digits;
    for (size_t i = 0; i < e_pos; ++i)
        if (s[i] != '.') digits.push_back(s[i]);
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    std::string out;
    if (exponent >= -5 + 1 && exponent < 16) {
        if (exponent < 0) {
            out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
        } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
            out = digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
        } else {
            out = digits.substr(0, static_cast<size_t>(exponent) + 1) + "." +
                  digits.substr(static_cast<size_t>(exponent) + 1);
        }
    } else {
        out = digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char e[16];
        std::snprintf(e, sizeof e, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
        out += e;
    }
    return negative ? "-" + out : out;
}

namespace {

std::string repr_string(const std::string& s) {
    const bool has_single = s.find('\'') != std::string::npos;
    const bool has_double = s.find('"') != std::string::npos;
    const char quote = (has_single && !has_double) ? '"' : '\'';
    std::string out(1, quote);
    for (unsigned char c : s) {
        if (c == '\\') {
            out += "\\\\";
        } else if (c == static_cast<unsigned char>(quote)) {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    out += quote;
    return out;
}

void dump_string(const std::string& s, std::string& out) {
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    out += '"';
}

void dump(const json& j, int indent, bool sort_keys, int level, std::string& out) {
    const auto newline = [&](int lvl) {
        out += '\n';
        out.append(static_cast<size_t>(indent * lvl), ' ');
    };
    switch (j.type()) {
        case json::value_t::null:
            out += "null";
            return;
        case json::value_t::boolean:
            out += j.get<bool>() ? "true" : "false";
            return;
        case json::value_t::number_integer:
            out += std::to_string(j.get<int64_t>());
            return;
        case json::value_t::number_unsigned:
            out += std::to_string(j.get<uint64_t>());
            return;
        case json::value_t::number_float: {
            const double d = j.get<double>();
            if (std::isnan(d))
                out += "NaN";
            else if (std::isinf(d))
                out += d < 0 ? "-Infinity" : "Infinity";
            else
                out += float_repr(d);
            return;
        }
        case json::value_t::string:
            dump_string(j.get_ref<const std::string&>(), out);
            return;
        case json::value_t::array: {
            if (j.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            bool first = true;
            for (const auto& e : j) {
                if (!first) out += indent >= 0 ? "," : ", ";
                first = false;
                if (indent >= 0) newline(level + 1);
                dump(e, indent, sort_keys, level + 1, out);
            }
            if (indent >= 0) newline(level);
            out += ']';
            return;
        }
        case json::value_t::object: {
            if (j.empty()) {
                out += "{}";
                return;
            }
            std::vector<std::pair<const std::string*, const json*>> items;
            for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(&it.key(), &it.value());
            if (sort_keys)
                std::stable_sort(items.begin(), items.end(),
                                 [](const auto& a, const auto& b) { return *a.first < *b.first; });
            out += '{';
            bool first = true;
            for (const auto& [k, v] : items) {
                if (!first) out += indent >= 0 ? "," : ", ";
                first = false;
                if (indent >= 0) newline(level + 1);
                dump_string(*k, out);
                out += ": ";
                dump(*v, indent, sort_keys, level + 1, out);
            }
            if (indent >= 0) newline(level);
            out += '}';
            return;
        }
        default:
            out += "null";
    }
}

bool json_equals(const json& a, const json& b) {
    const bool a_num = a.is_number() || a.is_boolean();
    const bool b_num = b.is_number() || b.is_boolean();
    if (a_num && b_num) {
        if ((a.is_number_integer() || a.is_boolean()) && (b.is_number_integer() || b.is_boolean())) {
            const int64_t x = a.is_boolean() ? a.get<bool>() : a.get<int64_t>();
            const int64_t y = b.is_boolean() ? b.get<bool>() : b.get<int64_t>();
            return x == y;
        }
        const double x = a.is_boolean() ? a.get<bool>() : a.get<double>();
        const double y = b.is_boolean() ? b.get<bool>() : b.get<double>();
        return x == y;
    }
    if (a.type() != b.type()) return false;
    if (a.is_array()) {
        if (a.size() != b.size()) return false;
        for (size_t i = 0; i < a.size(); ++i)
            if (!json_equals(a[i], b[i])) return false;
        return true;
    }
    if (a.is_object()) {
        if (a.size() != b.size()) return false;
        for (auto it = a.begin(); it != a.end(); ++it) {
            auto other = b.find(it.key());
            if (other == b.end() || !json_equals(it.value(), *other)) return false;
        }
        return true;
    }
    return a == b;
}

}  // namespace

std::string repr(const json& j) {
    switch (j.type()) {
        case json::value_t::null:
            return "None";
        case json::value_t::boolean:
            return j.get<bool>() ? "True" : "False";
        case json::value_t::number_integer:
            return std::to_string(j.get<int64_t>());
        case json::value_t::number_unsigned:
            return std::to_string(j.get<uint64_t>());
        case json::value_t::number_float:
            return float_repr(j.get<double>());
        case json::value_t::string:
            return repr_string(j.get_ref<const std::string&>());
        case json::value_t::array: {
            std::string out = "[";
            for (size_t i = 0; i < j.size(); ++i) {
                if (i) out += ", ";
                out += repr(j[i]);
            }
            return out + "]";
        }
        case json::value_t::object: {
            std::string out = "{";
            bool first = true;
            for (auto it = j.begin(); it != j.end(); ++it) {
                if (!first) out += ", ";
                first = false;
                out += repr_string(it.key()) + ": " + repr(it.value());
            }
            return out + "}";
        }
        default:
            return "None";
    }
}

std::string to_str(const value& v) {
    switch (v.type()) {
        case value::kind::undefined:
            return "";
        case value::kind::object:
            return "<" + v.name() + " object>";
        case value::kind::callable:
            return "<function " + v.name() + ">";
        case value::kind::data:
            break;
    }
    if (v.data().is_string()) return v.str_ref();
    return repr(v.data());
}

bool equals(const value& a, const value& b) {
    if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
    if (!a.is_data() || !b.is_data()) return a.same_object(b);
    return json_equals(a.data(), b.data());
}

std::string type_name(const value& v) {
    switch (v.type()) {
        case value::kind::undefined:
            return "Undefined";
        case value::kind::object:
        case value::kind::callable:
            return v.name();
        case value::kind::data:
            break;
    }
    switch (v.data().type()) {
        case json::value_t::null:
            return "NoneType";
        case json::value_t::boolean:
            return "bool";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned:
            return "int";
        case json::value_t::number_float:
            return "float";
        case json::value_t::string:
            return "str";
        case json::value_t::array:
            return "list";
        case json::value_t::object:
            return "dict";
        default:
            return "object";
    }
}

double as_double(const value& v) {
    if (v.is_bool()) return v.data().get<bool>() ? 1.0 : 0.0;
    if (v.is_number()) return v.data().get<double>();
    throw render_error("expected a number, got " + type_name(v));
}

int64_t as_int(const value& v) {
    if (v.is_bool()) return v.data().get<bool>() ? 1 : 0;
    if (v.is_int()) return v.data().get<int64_t>();
    if (v.is_number()) return static_cast<int64_t>(v.data().get<double>());
    throw render_error("expected an integer, got " + type_name(v));
}

bool less(const value& a, const value& b) {
    if (a.is_number() && b.is_number()) {
        if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool())) return as_int(a) < as_int(b);
        return as_double(a) < as_double(b);
    }
    if (a.is_string() && b.is_string()) return a.str_ref() < b.str_ref();
    if (a.is_list() && b.is_list()) {
        const json& x = a.data();
        const json& y = b.data();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (json_equals(x[i], y[i])) continue;
            return less(value(x[i]), value(y[i]));
        }
        return x.size() < y.size();
    }
    throw render_error("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::string json_dumps(const json& j, int indent, bool sort_keys) {
    std::string out;
    dump(j, indent, sort_keys, 0, out);
    return out;
}

std::vector<std::string> code_points(const std::string& s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        n = std::min(n, s.size() - i);
        out.emplace_back(s.substr(i, n));
        i += n;
    }
    return out;
}

size_t num_code_points(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s)
        if ((c & 0xc0) != 0x80) ++n;
    return n;
}

}  // namespace zmoe::jinja
