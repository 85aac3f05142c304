#include "frontend/chat_template_shape.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace zmoe {

using jinja::body;
using jinja::expr;
using jinja::expr_ptr;
using jinja::stmt;

namespace {

// Every expression, assignment and for-loop of a template, macros and blocks included.
struct syntax_index {
    std::vector<const expr*> exprs;
    std::vector<const stmt*> sets;   ///< {% set name = value %} with one name
    std::vector<const stmt*> loops;  ///< {% for ... in value %}

    void add(const expr_ptr& e) {
        if (!e) return;
        exprs.push_back(e.get());
        for (const expr_ptr& item : e->items) add(item);
        for (const auto& [name, value] : e->kwargs) add(value);
    }

    void add(const body& statements) {
        for (const auto& s : statements) {
            switch (s->k) {
                case stmt::kind::set:
                    if (s->targets.size() == 1 && s->attr.empty()) sets.push_back(s.get());
                    break;
                case stmt::kind::for_:
                    loops.push_back(s.get());
                    break;
                case stmt::kind::text:
                case stmt::kind::output:
                case stmt::kind::if_:
                case stmt::kind::set_block:
                case stmt::kind::macro:
                case stmt::kind::call_block:
                case stmt::kind::filter_block:
                case stmt::kind::break_:
                case stmt::kind::continue_:
                case stmt::kind::scope:
                    break;
            }
            add(s->value);
            add(s->cond);
            for (const auto& [cond, branch] : s->branches) {
                add(cond);
                add(branch);
            }
            add(s->main);
            add(s->else_body);
            for (const auto& p : s->params) add(p.default_value);
            for (const auto& [name, value] : s->assignments) add(value);
        }
    }
};

bool is_name(const expr_ptr& e, const std::string& name) { return e && e->k == expr::kind::name && e->name == name; }

// `var`, or `var.key` / `var['key']` when key is given, seen through filters, tests and slices (vLLM's rule).
bool accesses(const expr* e, const std::string& var, const std::string& key = {}) {
    if (!e) return false;
    switch (e->k) {
        case expr::kind::filter:
        case expr::kind::test:
        case expr::kind::slice:
            return !e->items.empty() && accesses(e->items[0].get(), var, key);
        case expr::kind::name:
            return key.empty() && e->name == var;
        case expr::kind::getattr:
            return !key.empty() && e->name == key && is_name(e->items[0], var);
        case expr::kind::getitem:
            return !key.empty() && is_name(e->items[0], var) && e->items[1]->k == expr::kind::literal &&
                   e->items[1]->literal == key;
        default:
            return false;
    }
}

// x.arguments or x['arguments']
bool is_arguments(const expr_ptr& e) {
    if (!e) return false;
    if (e->k == expr::kind::getattr) return e->name == "arguments";
    return e->k == expr::kind::getitem && e->items[1]->k == expr::kind::literal && e->items[1]->literal == "arguments";
}

bool contains(const std::vector<std::string>& names, const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
}

}  // namespace

chat_message_shape detect_message_shape(const body& statements) {
    syntax_index index;
    index.add(statements);

    // Variables holding the messages: `messages` and what is set from it (through filters and slices).
    std::vector<std::string> messages_vars = {"messages"};
    for (size_t i = 0; i < messages_vars.size(); ++i)
        for (const stmt* s : index.sets)
            if (accesses(s->value.get(), messages_vars[i]) && !contains(messages_vars, s->targets[0]))
                messages_vars.push_back(s->targets[0]);
    // Loop variables over the messages.
    std::vector<std::string> message_vars;
    for (const stmt* loop : index.loops)
        if (loop->targets.size() == 1)
            for (const std::string& v : messages_vars)
                if (accesses(loop->value.get(), v) && !contains(message_vars, loop->targets[0]))
                    message_vars.push_back(loop->targets[0]);

    chat_message_shape shape;
    for (const stmt* loop : index.loops)
        for (const std::string& m : message_vars)
            if (accesses(loop->value.get(), m, "content")) shape.content = chat_content_format::openai;
    for (const expr* e : index.exprs) {
        if (e->k == expr::kind::test && e->name == "none")
            for (const std::string& m : message_vars)
                if (accesses(e->items[0].get(), m, "content")) shape.null_content = true;
        if (e->k == expr::kind::binary && (e->name == "+" || e->name == "~") &&
            (is_arguments(e->items[0]) || is_arguments(e->items[1])))
            shape.string_arguments = true;
    }
    return shape;
}

}  // namespace zmoe
