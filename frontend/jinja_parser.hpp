#pragma once
// Tokens to a syntax tree, following jinja2's grammar and operator precedence (conditional < or < and < not <
// comparisons and `in` < + - < ~ < * / // % < ** < unary - + < postfix (. [] ()) and filters/tests).
// Statements: if/elif/else, for (tuple targets, `if` filter, else, recursive), set (names, tuples,
// namespace attributes, blocks), macro, call, filter, with, generation, break, continue.

#include <string>

#include "frontend/jinja_ast.hpp"
#include "frontend/jinja_lexer.hpp"

namespace zmoe::jinja {

/// Parses a whole template; throws render_error naming the line on a syntax error.
body parse_template(const std::string& source, const lexer_options& options = {});

}  // namespace zmoe::jinja
