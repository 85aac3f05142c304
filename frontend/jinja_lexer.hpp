#pragma once
// Jinja template source to tokens, with jinja2's whitespace rules as Hugging Face configures them:
// trim_blocks (the first newline after a block or comment tag is dropped), lstrip_blocks (spaces and tabs
// before a block or comment tag at the start of a line are dropped), `-` on either side of a tag strips all
// whitespace on that side, `+` keeps it; \r\n and \r become \n and one trailing newline of the source is
// dropped (keep_trailing_newline=False). `{% raw %}` bodies come out as text.

#include <string>
#include <vector>

namespace zmoe::jinja {

enum class token_kind : uint8_t {
    text,         ///< literal template text (value = the text)
    var_begin,    ///< {{
    var_end,      ///< }}
    block_begin,  ///< {%
    block_end,    ///< %}
    name,         ///< identifier or keyword
    string,       ///< string literal (value = unescaped contents)
    integer,      ///< integer literal (value = digits)
    floating,     ///< float literal (value = its text)
    op,           ///< operator or punctuation (value = its text)
    eof,
};

struct token {
    token_kind kind;
    std::string value;
    int line = 1;
};

struct lexer_options {
    bool trim_blocks = true;
    bool lstrip_blocks = true;
};

/// Tokenizes a template; throws render_error (with the line) on an unterminated tag or string.
std::vector<token> tokenize_template(const std::string& source, const lexer_options& options = {});

}  // namespace zmoe::jinja
