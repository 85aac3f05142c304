#include "grammar/regex.hpp"

#include <algorithm>

#include "base/error.hpp"

namespace zmoe::grammar {

namespace {

using ranges_t = std::vector<std::pair<uint32_t, uint32_t>>;
constexpr int32_t kMaxRepeat = 10000;

[[noreturn]] void fail(const std::string& what) { throw zmoe::error(errc::invalid_argument, what); }

/// Decodes one UTF-8 code point at s[i], advancing i.
uint32_t decode_utf8(std::string_view s, size_t& i) {
    auto c = static_cast<uint8_t>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > s.size()) fail("regex: invalid UTF-8 at byte " + std::to_string(i));
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + static_cast<size_t>(k)]) & 0x3Fu);
    i += static_cast<size_t>(n);
    return cp;
}

const ranges_t kDigit{{'0', '9'}};
const ranges_t kWord{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const ranges_t kSpace{{'\t', '\r'}, {' ', ' '}};

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

class parser {
  public:
    explicit parser(std::string_view s) : s_(s) {}

    parsed_regex parse() {
        parsed_regex out;
        if (i_ < s_.size() && s_[i_] == '^') out.anchored_start = true, ++i_;
        out.root = alternation();
        if (i_ < s_.size()) fail("regex: unbalanced ')' at offset " + std::to_string(i_));
        if (ends_anchor_) out.anchored_end = true;
        return out;
    }

  private:
    re_node alternation() {
        std::vector<re_node> alts{sequence()};
        while (i_ < s_.size() && s_[i_] == '|') {
            ++i_;
            alts.push_back(sequence());
        }
        if (alts.size() == 1) return std::move(alts[0]);
        re_node n;
        n.k = re_node::kind::alternate;
        n.children = std::move(alts);
        return n;
    }

    re_node sequence() {
        re_node n;
        n.k = re_node::kind::concat;
        while (i_ < s_.size() && s_[i_] != '|' && s_[i_] != ')') {
            if (s_[i_] == '$') {
                if (i_ + 1 != s_.size()) fail("regex: '$' is supported only at the end of the pattern");
                ++i_;
                ends_anchor_ = true;
                break;
            }
            if (s_[i_] == '^') fail("regex: '^' is supported only at the start of the pattern");
            re_node atom_node = atom();
            try {
                n.children.push_back(parse_quantifiers(s_, i_, std::move(atom_node), /*regex_suffixes=*/true));
            } catch (const zmoe::error& e) {
                fail(std::string("regex: ") + e.what());
            }
        }
        return n;
    }

    re_node chars(ranges_t r) {
        re_node n;
        n.k = re_node::kind::chars;
        n.ranges = normalize_ranges(std::move(r));
        return n;
    }

    re_node atom() {
        char c = s_[i_];
        if (c == '(') {
            ++i_;
            if (i_ < s_.size() && s_[i_] == '?') {
                ++i_;
                if (i_ < s_.size() && s_[i_] == ':') {
                    ++i_;
                } else if (i_ < s_.size() && (s_[i_] == '=' || s_[i_] == '!')) {
                    fail("regex: lookahead (?= / (?! is not supported");
                } else if (i_ + 1 < s_.size() && s_[i_] == '<' && (s_[i_ + 1] == '=' || s_[i_ + 1] == '!')) {
                    fail("regex: lookbehind (?<= / (?<! is not supported");
                } else if (i_ < s_.size() &&
                           (s_[i_] == '<' || (s_[i_] == 'P' && i_ + 1 < s_.size() && s_[i_ + 1] == '<'))) {
                    size_t close = s_.find('>', i_);
                    if (close == std::string_view::npos) fail("regex: unterminated group name");
                    i_ = close + 1;
                } else {
                    fail("regex: inline flags and other (? groups are not supported");
                }
            }
            re_node inner = alternation();
            if (i_ >= s_.size() || s_[i_] != ')') fail("regex: missing ')'");
            ++i_;
            return inner;
        }
        if (c == '[') return char_class();
        if (c == '.') {
            ++i_;
            return chars(complement_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
        }
        if (c == '\\') {
            ++i_;
            return chars(parse_escape(s_, i_, false));
        }
        if (c == '*' || c == '+' || c == '?')
            fail("regex: quantifier without an operand at offset " + std::to_string(i_));
        uint32_t cp = decode_utf8(s_, i_);
        return chars({{cp, cp}});
    }

    re_node char_class() {
        ++i_;  // '['
        bool negate = false;
        if (i_ < s_.size() && s_[i_] == '^') negate = true, ++i_;
        ranges_t r;
        bool first = true;
        while (true) {
            if (i_ >= s_.size()) fail("regex: unterminated character class");
            if (s_[i_] == ']' && !first) break;
            first = false;
            ranges_t lo_set;
            uint32_t lo;
            bool single_lo = true;
            if (s_[i_] == '\\') {
                ++i_;
                lo_set = parse_escape(s_, i_, true);
                single_lo = lo_set.size() == 1 && lo_set[0].first == lo_set[0].second;
                lo = lo_set[0].first;
            } else if (s_[i_] == '[' && i_ + 1 < s_.size() && s_[i_ + 1] == ':') {
                fail("regex: POSIX classes [:name:] are not supported");
            } else {
                lo = decode_utf8(s_, i_);
                lo_set = {{lo, lo}};
            }
            if (single_lo && i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
                ++i_;
                uint32_t hi;
                if (s_[i_] == '\\') {
                    ++i_;
                    ranges_t h = parse_escape(s_, i_, true);
                    if (h.size() != 1 || h[0].first != h[0].second) fail("regex: a class range ends in a class escape");
                    hi = h[0].first;
                } else {
                    hi = decode_utf8(s_, i_);
                }
                if (hi < lo) fail("regex: class range out of order");
                r.push_back({lo, hi});
            } else {
                r.insert(r.end(), lo_set.begin(), lo_set.end());
            }
        }
        ++i_;  // ']'
        r = normalize_ranges(std::move(r));
        return chars(negate ? complement_ranges(r) : r);
    }

    std::string_view s_;
    size_t i_ = 0;
    bool ends_anchor_ = false;
};

}  // namespace

ranges_t normalize_ranges(ranges_t r) {
    std::sort(r.begin(), r.end());
    ranges_t out;
    for (const auto& [lo, hi] : r) {
        if (!out.empty() && lo <= out.back().second + 1)
            out.back().second = std::max(out.back().second, hi);
        else
            out.push_back({lo, hi});
    }
    return out;
}

ranges_t complement_ranges(const ranges_t& in) {
    ranges_t r = normalize_ranges(in), out;
    uint32_t next = 0;
    for (const auto& [lo, hi] : r) {
        if (lo > next) out.push_back({next, lo - 1});
        next = hi + 1;
    }
    if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
    return out;
}

ranges_t parse_escape(std::string_view s, size_t& i, bool in_class) {
    if (i >= s.size()) fail("regex: trailing backslash");
    char c = s[i++];
    switch (c) {
        case 'd':
            return kDigit;
        case 'D':
            return complement_ranges(kDigit);
        case 'w':
            return kWord;
        case 'W':
            return complement_ranges(kWord);
        case 's':
            return kSpace;
        case 'S':
            return complement_ranges(kSpace);
        case 't':
            return {{'\t', '\t'}};
        case 'n':
            return {{'\n', '\n'}};
        case 'r':
            return {{'\r', '\r'}};
        case 'f':
            return {{'\f', '\f'}};
        case 'v':
            return {{'\v', '\v'}};
        case '0':
            return {{0, 0}};
        case 'b':
            if (in_class) return {{'\b', '\b'}};
            fail("regex: word boundaries (\\b) are not supported");
        case 'B':
            fail("regex: word boundaries (\\B) are not supported");
        case 'k':
            fail("regex: backreferences (\\k) are not supported");
        case 'x':
        case 'u': {
            size_t n = c == 'x' ? 2 : 4;
            uint32_t v = 0;
            if (c == 'u' && i < s.size() && s[i] == '{') {
                size_t close = s.find('}', i);
                if (close == std::string_view::npos) fail("regex: unterminated \\u{...}");
                for (size_t k = i + 1; k < close; ++k) {
                    int h = hex_value(s[k]);
                    if (h < 0) fail("regex: bad hex digit in \\u{...}");
                    v = v * 16 + static_cast<uint32_t>(h);
                    if (v > 0x10FFFF) fail("regex: code point above U+10FFFF");
                }
                i = close + 1;
                return {{v, v}};
            }
            for (size_t k = 0; k < n; ++k) {
                if (i >= s.size() || hex_value(s[i]) < 0) fail(std::string("regex: bad \\") + c + " escape");
                v = v * 16 + static_cast<uint32_t>(hex_value(s[i++]));
            }
            return {{v, v}};
        }
        default:
            if (c >= '1' && c <= '9') fail("regex: backreferences (\\1 .. \\9) are not supported");
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail(std::string("regex: unknown escape \\") + c);
            {
                --i;
                uint32_t cp = decode_utf8(s, i);
                return {{cp, cp}};
            }
    }
}

parsed_regex parse_regex(std::string_view pattern) { return parser(pattern).parse(); }

fragment emit_chars(nfa& a, const ranges_t& ranges, char_encoding enc) {
    fragment f{a.add_state(), a.add_state()};
    if (enc == char_encoding::utf8) {
        for (const auto& [lo, hi] : ranges) add_code_point_range(a, f.start, f.end, lo, hi);
        return f;
    }
    for (const auto& [lo, hi] : ranges) {
        // Code points JSON writes escaped: controls, '"', '\\'.
        for (uint32_t cp = lo; cp <= std::min<uint32_t>(hi, 0x5C); ++cp) {
            if (cp >= 0x20 && cp != '"' && cp != '\\') continue;
            std::string esc;
            switch (cp) {
                case '"':
                    esc = "\\\"";
                    break;
                case '\\':
                    esc = "\\\\";
                    break;
                case '\b':
                    esc = "\\b";
                    break;
                case '\f':
                    esc = "\\f";
                    break;
                case '\n':
                    esc = "\\n";
                    break;
                case '\r':
                    esc = "\\r";
                    break;
                case '\t':
                    esc = "\\t";
                    break;
                default: {
                    static const char* kHex = "0123456789abcdef";
                    esc = std::string("\\u00") + kHex[cp >> 4] + kHex[cp & 15];
                }
            }
            fragment lit = a.literal(esc);
            a.add_epsilon(f.start, lit.start);
            a.add_epsilon(lit.end, f.end);
        }
        // The rest raw, minus those code points.
        ranges_t raw = normalize_ranges({{lo, hi}});
        ranges_t cut;
        for (const auto& [l, h] : raw) {
            uint32_t cur = l;
            for (uint32_t x : {0x00u, 0x22u, 0x5Cu}) {
                uint32_t xl = x, xh = x == 0 ? 0x1F : x;
                if (xh < cur || xl > h) continue;
                if (xl > cur) cut.push_back({cur, xl - 1});
                cur = std::max(cur, xh + 1);
            }
            if (cur <= h) cut.push_back({cur, h});
        }
        for (const auto& [l, h] : cut) add_code_point_range(a, f.start, f.end, l, h);
    }
    return f;
}

fragment emit_regex(nfa& a, const re_node& n, char_encoding enc,
                    const std::function<int32_t(const std::string&)>& resolve) {
    switch (n.k) {
        case re_node::kind::empty:
            return a.empty();
        case re_node::kind::chars:
            return emit_chars(a, n.ranges, enc);
        case re_node::kind::literal_bytes:
            return a.literal(n.text);
        case re_node::kind::concat: {
            std::vector<fragment> parts;
            for (const re_node& c : n.children) parts.push_back(emit_regex(a, c, enc, resolve));
            return a.concat(parts);
        }
        case re_node::kind::alternate: {
            std::vector<fragment> parts;
            for (const re_node& c : n.children) parts.push_back(emit_regex(a, c, enc, resolve));
            return a.alternate(parts);
        }
        case re_node::kind::repeat: {
            std::vector<fragment> parts;
            for (int32_t k = 0; k < n.min; ++k) parts.push_back(emit_regex(a, n.children[0], enc, resolve));
            if (n.max < 0) {
                parts.push_back(a.star(emit_regex(a, n.children[0], enc, resolve)));
            } else if (n.max > n.min) {
                // x{0,k} as (x(x(x)?)?)? : linear in k.
                fragment tail = a.optional(emit_regex(a, n.children[0], enc, resolve));
                for (int32_t k = n.min + 1; k < n.max; ++k) {
                    fragment x = emit_regex(a, n.children[0], enc, resolve);
                    tail = a.optional(a.concat({x, tail}));
                }
                parts.push_back(tail);
            }
            return a.concat(parts);
        }
        case re_node::kind::rule_ref:
            if (!resolve) throw zmoe::error(errc::internal, "regex: rule reference without a resolver");
            return a.call(resolve(n.text));
    }
    throw zmoe::error(errc::internal, "regex: unknown node kind");
}

namespace {

/// {m}, {m,}, {m,n} at s[i] ('{'): the bounds (hi -1: none) and i past the '}', or false and i unchanged.
bool parse_braces(std::string_view s, size_t& i, int32_t& lo, int32_t& hi) {
    size_t j = i + 1;
    auto number = [&](int32_t& v) {
        size_t start = j;
        int64_t x = 0;
        while (j < s.size() && s[j] >= '0' && s[j] <= '9') {
            x = x * 10 + (s[j] - '0');
            if (x > kMaxRepeat) fail("repetition bound above " + std::to_string(kMaxRepeat));
            ++j;
        }
        v = static_cast<int32_t>(x);
        return j > start;
    };
    if (!number(lo)) return false;
    if (j < s.size() && s[j] == '}') {
        hi = lo;
    } else if (j < s.size() && s[j] == ',') {
        ++j;
        if (j < s.size() && s[j] == '}')
            hi = -1;
        else if (!number(hi))
            return false;
        if (j >= s.size() || s[j] != '}') return false;
        if (hi >= 0 && hi < lo) fail("repetition {m,n} with n < m");
    } else {
        return false;
    }
    i = j + 1;
    return true;
}

}  // namespace

re_node parse_quantifiers(std::string_view s, size_t& i, re_node a, bool regex_suffixes) {
    while (i < s.size()) {
        const char c = s[i];
        int32_t lo = 0, hi = 0;
        if (c == '?')
            lo = 0, hi = 1, ++i;
        else if (c == '*')
            lo = 0, hi = -1, ++i;
        else if (c == '+')
            lo = 1, hi = -1, ++i;
        else if (c != '{' || !parse_braces(s, i, lo, hi))
            break;
        if (regex_suffixes && i < s.size() && s[i] == '?')
            ++i;  // lazy: same language
        else if (regex_suffixes && i < s.size() && s[i] == '+')
            fail("possessive quantifiers are not supported");
        re_node r;
        r.k = re_node::kind::repeat;
        r.min = lo;
        r.max = hi;
        r.children.push_back(std::move(a));
        a = std::move(r);
    }
    return a;
}

}  // namespace zmoe::grammar
