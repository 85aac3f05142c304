#include "frontend/jinja_lexer.hpp"

#include <cctype>
#include <cstring>

#include "frontend/jinja_value.hpp"

namespace zmoe::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalize_newlines(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\r') {
            out.push_back('\n');
            if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
        } else {
            out.push_back(s[i]);
        }
    }
    return out;
}

void append_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
        out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
}

// Python's unicode-escape decoding of a string literal body (unknown escapes stay as written).
std::string unescape(const std::string& body) {
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
        if (body[i] != '\\' || i + 1 == body.size()) {
            out.push_back(body[i]);
            continue;
        }
        const char c = body[++i];
        const auto hex = [&](size_t n) -> bool {
            uint32_t cp = 0;
            for (size_t k = 1; k <= n; ++k) {
                if (i + k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + k]))) return false;
                const char h = body[i + k];
                cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                         ? h - '0'
                                                         : (std::tolower(h) - 'a' + 10));
            }
            append_utf8(cp, out);
            i += n;
            return true;
        };
        switch (c) {
            case 'n':
                out.push_back('\n');
                break;
            case 't':
                out.push_back('\t');
                break;
            case 'r':
                out.push_back('\r');
                break;
            case '\\':
                out.push_back('\\');
                break;
            case '\'':
                out.push_back('\'');
                break;
            case '"':
                out.push_back('"');
                break;
            case 'a':
                out.push_back('\a');
                break;
            case 'b':
                out.push_back('\b');
                break;
            case 'f':
                out.push_back('\f');
                break;
            case 'v':
                out.push_back('\v');
                break;
            case '0':
                out.push_back('\0');
                break;
            case '\n':
                break;  // line continuation
            case 'x':
                if (!hex(2)) throw render_error("truncated \\x escape in a string literal");
                break;
            case 'u':
                if (!hex(4)) throw render_error("truncated \\u escape in a string literal");
                break;
            case 'U':
                if (!hex(8)) throw render_error("truncated \\U escape in a string literal");
                break;
            default:
                out.push_back('\\');
                out.push_back(c);
        }
    }
    return out;
}

class lexer {
  public:
    lexer(std::string src, const lexer_options& options) : src_(std::move(src)), options_(options) {}

    std::vector<token> run() {
        while (pos_ < src_.size()) {
            size_t found = std::string::npos;
            for (size_t p = src_.find('{', pos_); p != std::string::npos; p = src_.find('{', p + 1)) {
                if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
                    found = p;
                    break;
                }
            }
            if (found == std::string::npos) {
                emit_text(src_.substr(pos_));
                pos_ = src_.size();
                break;
            }
            std::string text = src_.substr(pos_, found - pos_);
            const char kind = src_[found + 1];
            const char sign = found + 2 < src_.size() ? src_[found + 2] : '\0';
            if (sign == '-') {
                size_t end = text.size();
                while (end > 0 && is_space(text[end - 1])) --end;
                text.resize(end);
            } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
                const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
                const bool line_starting = pos_ == 0 || src_[pos_ - 1] == '\n';
                if (l_pos > 0 || line_starting) {
                    bool only_blank = l_pos < text.size();
                    for (size_t i = l_pos; i < text.size(); ++i)
                        if (text[i] != ' ' && text[i] != '\t') only_blank = false;
                    if (only_blank) text.resize(l_pos);
                }
            }
            emit_text(text);
            line_ += count_newlines(pos_, found);
            pos_ = found + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
            if (kind == '#') {
                comment();
            } else if (kind == '{') {
                out_.push_back({token_kind::var_begin, "{{", line_});
                tag('}');
            } else {
                if (raw_block()) continue;
                out_.push_back({token_kind::block_begin, "{%", line_});
                tag('%');
            }
        }
        out_.push_back({token_kind::eof, "", line_});
        return std::move(out_);
    }

  private:
    int count_newlines(size_t from, size_t to) const {
        int n = 0;
        for (size_t i = from; i < to && i < src_.size(); ++i) n += src_[i] == '\n';
        return n;
    }

    void emit_text(const std::string& text) {
        if (!text.empty()) out_.push_back({token_kind::text, text, line_});
    }

    [[noreturn]] void fail(const std::string& what) const {
        throw render_error("template syntax error, line " + std::to_string(line_) + ": " + what);
    }

    // After an end delimiter at pos_ of length n (its leading '-'/'+' already consumed into `sign`).
    void after_end(char sign, bool is_block_or_comment) {
        if (sign == '-') {
            while (pos_ < src_.size() && is_space(src_[pos_])) {
                line_ += src_[pos_] == '\n';
                ++pos_;
            }
        } else if (sign != '+' && is_block_or_comment && options_.trim_blocks && pos_ < src_.size() &&
                   src_[pos_] == '\n') {
            ++line_;
            ++pos_;
        }
    }

    void comment() {
        const size_t end = src_.find("#}", pos_);
        if (end == std::string::npos) fail("unterminated comment");
        const char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
        line_ += count_newlines(pos_, end);
        pos_ = end + 2;
        after_end(sign, true);
    }

    // `{% raw %}...{% endraw %}`: returns true when pos_ (just after `{%[-+]?`) starts a raw tag.
    bool raw_block() {
        size_t p = pos_;
        while (p < src_.size() && is_space(src_[p])) ++p;
        if (src_.compare(p, 3, "raw") != 0 ||
            (p + 3 < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p + 3])) || src_[p + 3] == '_')))
            return false;
        p += 3;
        while (p < src_.size() && is_space(src_[p])) ++p;
        char sign = '\0';
        if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
        if (src_.compare(p, 2, "%}") != 0) fail("expected %} after raw");
        pos_ = p + 2;
        after_end(sign, true);
        // Find {% endraw %} (with optional whitespace control).
        for (size_t q = src_.find("{%", pos_); q != std::string::npos; q = src_.find("{%", q + 2)) {
            size_t r = q + 2;
            char open_sign = '\0';
            if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) open_sign = src_[r++];
            while (r < src_.size() && is_space(src_[r])) ++r;
            if (src_.compare(r, 6, "endraw") != 0) continue;
            r += 6;
            while (r < src_.size() && is_space(src_[r])) ++r;
            char close_sign = '\0';
            if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) close_sign = src_[r++];
            if (src_.compare(r, 2, "%}") != 0) continue;
            std::string body = src_.substr(pos_, q - pos_);
            if (open_sign == '-') {
                while (!body.empty() && is_space(body.back())) body.pop_back();
            } else if (open_sign != '+' && options_.lstrip_blocks) {
                const size_t l_pos = body.rfind('\n') == std::string::npos ? 0 : body.rfind('\n') + 1;
                bool only_blank = l_pos < body.size();
                for (size_t i = l_pos; i < body.size(); ++i)
                    if (body[i] != ' ' && body[i] != '\t') only_blank = false;
                if (only_blank && (l_pos > 0 || pos_ == 0 || src_[pos_ - 1] == '\n')) body.resize(l_pos);
            }
            emit_text(body);
            line_ += count_newlines(pos_, r + 2);
            pos_ = r + 2;
            after_end(close_sign, true);
            return true;
        }
        fail("missing {% endraw %}");
    }

    // Expression tokens up to the end delimiter ('}' for }}, '%' for %}).
    void tag(char end_char) {
        int depth = 0;
        while (true) {
            while (pos_ < src_.size() && is_space(src_[pos_])) {
                line_ += src_[pos_] == '\n';
                ++pos_;
            }
            if (pos_ >= src_.size())
                fail(end_char == '}' ? "unexpected end of template, expected '}}'"
                                     : "unexpected end of template, expected '%}'");
            if (depth == 0) {
                char sign = '\0';
                size_t p = pos_;
                if (src_[p] == '-' || src_[p] == '+') sign = src_[p++];
                if (p + 1 < src_.size() && src_[p] == end_char && src_[p + 1] == '}' &&
                    (sign != '+' || end_char == '%')) {
                    // `-}}` only counts as an end when '-' is not a binary minus... jinja2 treats "-}}" as the end.
                    pos_ = p + 2;
                    out_.push_back({end_char == '}' ? token_kind::var_end : token_kind::block_end,
                                    end_char == '}' ? "}}" : "%}", line_});
                    after_end(sign, end_char == '%');
                    return;
                }
            }
            const char c = src_[pos_];
            if (c == '\'' || c == '"') {
                size_t p = pos_ + 1;
                while (p < src_.size() && src_[p] != c) p += src_[p] == '\\' ? 2 : 1;
                if (p >= src_.size()) fail("unterminated string");
                const std::string body = src_.substr(pos_ + 1, p - pos_ - 1);
                out_.push_back({token_kind::string, unescape(body), line_});
                line_ += count_newlines(pos_, p);
                pos_ = p + 1;
            } else if (std::isdigit(static_cast<unsigned char>(c))) {
                size_t p = pos_;
                while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
                bool is_float = false;
                if (p + 1 < src_.size() && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
                    is_float = true;
                    ++p;
                    while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
                        ++p;
                }
                if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
                    size_t q = p + 1;
                    if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
                    if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
                        is_float = true;
                        p = q;
                        while (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
                    }
                }
                std::string text;
                for (size_t i = pos_; i < p; ++i)
                    if (src_[i] != '_') text.push_back(src_[i]);
                out_.push_back({is_float ? token_kind::floating : token_kind::integer, text, line_});
                pos_ = p;
            } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                size_t p = pos_;
                while (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
                out_.push_back({token_kind::name, src_.substr(pos_, p - pos_), line_});
                pos_ = p;
            } else {
                static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
                std::string op;
                for (const char* two : kTwo)
                    if (src_.compare(pos_, 2, two) == 0) op = two;
                if (op.empty()) {
                    if (!std::strchr("+-/*%~[](){}<>=.:|,;", c)) fail(std::string("unexpected character '") + c + "'");
                    op = std::string(1, c);
                }
                if (op == "(" || op == "[" || op == "{") ++depth;
                if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
                out_.push_back({token_kind::op, op, line_});
                pos_ += op.size();
            }
        }
    }

    std::string src_;
    lexer_options options_;
    size_t pos_ = 0;
    int line_ = 1;
    std::vector<token> out_;
};

}  // namespace

std::vector<token> tokenize_template(const std::string& source, const lexer_options& options) {
    std::string src = normalize_newlines(source);
    if (!src.empty() && src.back() == '\n') src.pop_back();
    return lexer(std::move(src), options).run();
}

}  // namespace zmoe::jinja
