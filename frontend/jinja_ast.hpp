#pragma once
// The syntax tree of a parsed Jinja template: expressions and statements, one node type each with a kind.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frontend/jinja_value.hpp"

namespace zmoe::jinja {

struct expr;
using expr_ptr = std::shared_ptr<const expr>;

struct expr {
    enum class kind : uint8_t {
        literal,  ///< literal
        name,     ///< name
        list,     ///< items
        tuple,    ///< items (a list at run time)
        dict,     ///< items as key, value pairs
        getattr,  ///< items[0].name
        getitem,  ///< items[0][items[1]]
        slice,    ///< items[0][items[1]:items[2]:items[3]] (null entries: omitted)
        call,     ///< items[0](items[1..], kwargs)
        filter,   ///< items[0] | name(items[1..], kwargs)
        test,     ///< items[0] is [not] name(items[1..], kwargs)
        unary,    ///< op items[0] ("not", "-", "+")
        binary,   ///< items[0] op items[1] (arithmetic, "~", "and", "or", "in", "not in")
        compare,  ///< items[0] ops[0] items[1] ops[1] items[2] ... (chained)
        cond,     ///< items[1] if items[0] else items[2] (items[2] may be null)
    };
    kind k;
    int line = 0;
    json literal;
    std::string name;  ///< name / attribute / filter / test / operator
    std::vector<expr_ptr> items;
    std::vector<std::pair<std::string, expr_ptr>> kwargs;
    std::vector<std::string> ops;  ///< compare operators
    bool negated = false;          ///< `is not`
};

struct stmt;
using stmt_ptr = std::shared_ptr<const stmt>;
using body = std::vector<stmt_ptr>;

struct macro_param {
    std::string name;
    expr_ptr default_value;  ///< null when required
};

struct stmt {
    enum class kind : uint8_t {
        text,          ///< text
        output,        ///< {{ value }}
        if_,           ///< branches (cond, body) ..., else_body
        for_,          ///< for targets in value [if cond] body [else else_body]
        set,           ///< set targets = value; or set target.attr = value (attr non-empty)
        set_block,     ///< {% set targets[0] %} body {% endset %}
        macro,         ///< macro name(params) body
        call_block,    ///< {% call value %} body {% endcall %}: caller() renders body
        filter_block,  ///< {% filter value %} body: value is a filter expr over a placeholder
        break_,
        continue_,
        scope,  ///< body in a new scope ({% with %} after its assignments, {% generation %})
    };
    kind k;
    int line = 0;
    std::string text;
    expr_ptr value;
    expr_ptr cond;
    std::vector<std::string> targets;
    std::string attr;
    std::vector<std::pair<expr_ptr, body>> branches;
    body main;
    body else_body;
    std::vector<macro_param> params;
    std::vector<std::pair<std::string, expr_ptr>> assignments;  ///< {% with a = x %}
    bool recursive = false;
};

}  // namespace zmoe::jinja
