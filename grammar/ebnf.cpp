#include "grammar/ebnf.hpp"

#include <map>

#include "base/error.hpp"
#include "grammar/regex.hpp"

namespace zmoe::grammar {

namespace {

[[noreturn]] void fail(size_t line, const std::string& what) {
    throw zmoe::error(errc::invalid_argument, "ebnf: line " + std::to_string(line) + ": " + what);
}

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

class ebnf_parser {
  public:
    explicit ebnf_parser(std::string_view s) : s_(s) {}

    std::vector<std::pair<std::string, re_node>> parse() {
        std::vector<std::pair<std::string, re_node>> rules;
        skip_space();
        while (i_ < s_.size()) {
            std::string name = parse_name();
            if (name.empty()) fail(line_, "expected a rule name");
            skip_space();
            if (s_.substr(i_, 3) != "::=") fail(line_, "expected '::=' after rule name '" + name + "'");
            i_ += 3;
            rules.emplace_back(name, alternation());
            skip_space();
        }
        return rules;
    }

  private:
    void skip_space() {
        while (i_ < s_.size()) {
            char c = s_[i_];
            if (c == '\n')
                ++line_, ++i_;
            else if (c == ' ' || c == '\t' || c == '\r')
                ++i_;
            else if (c == '#') {
                while (i_ < s_.size() && s_[i_] != '\n') ++i_;
            } else
                break;
        }
    }
    std::string parse_name() {
        size_t start = i_;
        while (i_ < s_.size() && is_name_char(s_[i_])) ++i_;
        return std::string(s_.substr(start, i_ - start));
    }
    bool at_rule_start() {
        size_t j = i_;
        while (j < s_.size() && is_name_char(s_[j])) ++j;
        if (j == i_) return false;
        while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t')) ++j;
        return s_.substr(j, 3) == "::=";
    }

    re_node alternation() {
        re_node alt;
        alt.k = re_node::kind::alternate;
        alt.children.push_back(sequence());
        skip_space();
        while (i_ < s_.size() && s_[i_] == '|') {
            ++i_;
            alt.children.push_back(sequence());
            skip_space();
        }
        if (alt.children.size() == 1) return std::move(alt.children[0]);
        return alt;
    }

    re_node sequence() {
        re_node seq;
        seq.k = re_node::kind::concat;
        while (true) {
            skip_space();
            if (i_ >= s_.size() || s_[i_] == '|' || s_[i_] == ')' || at_rule_start()) break;
            re_node a = atom();
            try {
                seq.children.push_back(parse_quantifiers(s_, i_, std::move(a), /*regex_suffixes=*/false));
            } catch (const zmoe::error& e) {
                fail(line_, e.what());
            }
        }
        return seq;
    }

    re_node atom() {
        char c = s_[i_];
        if (c == '"') {
            ++i_;
            re_node lit;
            lit.k = re_node::kind::literal_bytes;
            while (true) {
                if (i_ >= s_.size() || s_[i_] == '\n') fail(line_, "unterminated string literal");
                if (s_[i_] == '"') break;
                if (s_[i_] == '\\') {
                    ++i_;
                    auto r = parse_escape(s_, i_, true);
                    if (r.size() != 1 || r[0].first != r[0].second)
                        fail(line_, "a class escape inside a string literal");
                    append_utf8(lit.text, r[0].first);
                } else {
                    lit.text += s_[i_++];
                }
            }
            ++i_;
            return lit;
        }
        if (c == '(') {
            ++i_;
            re_node inner = alternation();
            skip_space();
            if (i_ >= s_.size() || s_[i_] != ')') fail(line_, "missing ')'");
            ++i_;
            return inner;
        }
        if (c == '[' || c == '.') {
            // Character classes and '.' share the regex syntax.
            size_t j = i_;
            if (c == '[') {
                ++j;
                if (j < s_.size() && s_[j] == '^') ++j;
                if (j < s_.size() && s_[j] == ']') ++j;
                while (j < s_.size() && s_[j] != ']') j += s_[j] == '\\' ? 2 : 1;
                if (j >= s_.size()) fail(line_, "unterminated character class");
                ++j;
            } else {
                ++j;
            }
            std::string_view piece = s_.substr(i_, j - i_);
            i_ = j;
            re_node n = parse_regex(piece == "." ? std::string_view("[\\s\\S]") : piece).root;
            if (n.k == re_node::kind::concat && n.children.size() == 1) return std::move(n.children[0]);
            return n;
        }
        if (is_name_char(c)) {
            re_node ref;
            ref.k = re_node::kind::rule_ref;
            ref.text = parse_name();
            ref.min = static_cast<int32_t>(line_);
            return ref;
        }
        fail(line_, std::string("unexpected character '") + c + "'");
    }

    std::string_view s_;
    size_t i_ = 0;
    size_t line_ = 1;
};

}  // namespace

grammar compile_ebnf(std::string_view text, std::string_view root_rule) {
    std::vector<std::pair<std::string, re_node>> rules;
    try {
        rules = ebnf_parser(text).parse();
    } catch (const zmoe::error& e) {
        std::string what = e.what();
        if (what.rfind("ebnf:", 0) != 0) what = "ebnf: " + what;
        throw zmoe::error(errc::invalid_argument, what);
    }
    grammar_builder b;
    std::map<std::string, int32_t> ids;
    for (const auto& [name, body] : rules) {
        if (ids.count(name)) throw zmoe::error(errc::invalid_argument, "ebnf: rule '" + name + "' is defined twice");
        ids[name] = b.add_rule(name);
    }
    auto root = ids.find(std::string(root_rule));
    if (root == ids.end())
        throw zmoe::error(errc::invalid_argument, "ebnf: no rule named '" + std::string(root_rule) + "'");
    auto resolve = [&](const std::string& name) {
        auto it = ids.find(name);
        if (it == ids.end()) throw zmoe::error(errc::invalid_argument, "ebnf: undefined rule '" + name + "'");
        return it->second;
    };
    for (const auto& [name, body] : rules) {
        nfa& a = b.rule(ids[name]);
        a.set_body(emit_regex(a, body, char_encoding::utf8, resolve));
    }
    return b.build(root->second);
}

}  // namespace zmoe::grammar
