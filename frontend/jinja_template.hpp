#pragma once
// A compiled Jinja template and its renderer: jinja2 semantics as Hugging Face's chat templates rely on them
// (scoping: each for-loop iteration and each macro call is a new scope, `set` inside a loop does not leak out,
// namespace() objects carry state across iterations; loop.index/index0/revindex/first/last/length/previtem/
// nextitem/cycle; break/continue; macros with defaults and caller()).

#include <string>

#include "frontend/jinja_ast.hpp"
#include "frontend/jinja_lexer.hpp"
#include "frontend/jinja_value.hpp"

namespace zmoe::jinja {

class jinja_template {
  public:
    /// Parses `source`; throws render_error on a syntax error.
    explicit jinja_template(const std::string& source, const lexer_options& options = {});

    /// Renders with `variables` (a JSON object: the render() keyword arguments) over `globals` (callables and
    /// values added to jinja2's default globals: range, dict, namespace). Throws render_error.
    std::string render(const json& variables, const object& globals = {}) const;

    /// The parsed statements (to inspect the template without rendering it).
    const body& statements() const { return body_; }

  private:
    body body_;
};

}  // namespace zmoe::jinja
