#include "frontend/jinja_parser.hpp"

#include <cstdlib>
#include <initializer_list>

namespace zmoe::jinja {

namespace {

class parser {
  public:
    explicit parser(std::vector<token> tokens) : tokens_(std::move(tokens)) {}

    body parse_all() {
        std::string end;
        body b = parse_body({}, end);
        if (!end.empty()) fail("unexpected '" + end + "'");
        return b;
    }

  private:
    const token& cur() const { return tokens_[pos_]; }
    const token& peek(size_t ahead = 1) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
    void advance() {
        if (pos_ + 1 < tokens_.size()) ++pos_;
    }
    bool is_op(const char* op) const { return cur().kind == token_kind::op && cur().value == op; }
    bool is_name(const char* name) const { return cur().kind == token_kind::name && cur().value == name; }
    bool accept_op(const char* op) {
        if (!is_op(op)) return false;
        advance();
        return true;
    }
    bool accept_name(const char* name) {
        if (!is_name(name)) return false;
        advance();
        return true;
    }
    [[noreturn]] void fail(const std::string& what) const {
        throw render_error("template syntax error, line " + std::to_string(cur().line) + ": " + what);
    }
    void expect_op(const char* op) {
        if (!accept_op(op)) fail(std::string("expected '") + op + "', got '" + cur().value + "'");
    }
    std::string expect_name() {
        if (cur().kind != token_kind::name) fail("expected a name, got '" + cur().value + "'");
        std::string n = cur().value;
        advance();
        return n;
    }
    void expect_block_end() {
        if (cur().kind != token_kind::block_end) fail("expected '%}', got '" + cur().value + "'");
        advance();
    }

    static std::shared_ptr<expr> node(expr::kind k, int line) {
        auto e = std::make_shared<expr>();
        e->k = k;
        e->line = line;
        return e;
    }

    // ---- statements ----

    // Parses statements until a block tag whose name is in `ends`; leaves pos_ after that name, sets `end`.
    body parse_body(std::initializer_list<const char*> ends, std::string& end) {
        body out;
        end.clear();
        while (cur().kind != token_kind::eof) {
            const token& t = cur();
            if (t.kind == token_kind::text) {
                auto s = std::make_shared<stmt>();
                s->k = stmt::kind::text;
                s->text = t.value;
                out.push_back(s);
                advance();
            } else if (t.kind == token_kind::var_begin) {
                advance();
                auto s = std::make_shared<stmt>();
                s->k = stmt::kind::output;
                s->line = t.line;
                s->value = parse_tuple(true, false);
                if (cur().kind != token_kind::var_end) fail("expected '}}', got '" + cur().value + "'");
                advance();
                out.push_back(s);
            } else if (t.kind == token_kind::block_begin) {
                advance();
                if (cur().kind != token_kind::name) fail("expected a statement name");
                const std::string name = cur().value;
                for (const char* e : ends)
                    if (name == e) {
                        advance();
                        end = name;
                        return out;
                    }
                out.push_back(parse_statement());
            } else {
                fail("unexpected '" + t.value + "'");
            }
        }
        if (ends.size() != 0) fail(std::string("unexpected end of template, expected '") + *ends.begin() + "'");
        return out;
    }

    stmt_ptr parse_statement() {
        const int line = cur().line;
        const std::string name = expect_name();
        auto s = std::make_shared<stmt>();
        s->line = line;
        std::string end;
        if (name == "if") {
            s->k = stmt::kind::if_;
            expr_ptr cond = parse_tuple(true, false);
            expect_block_end();
            while (true) {
                body b = parse_body({"elif", "else", "endif"}, end);
                s->branches.emplace_back(cond, std::move(b));
                if (end == "elif") {
                    cond = parse_tuple(true, false);
                    expect_block_end();
                    continue;
                }
                if (end == "else") {
                    expect_block_end();
                    s->else_body = parse_body({"endif"}, end);
                }
                break;
            }
            expect_block_end();
        } else if (name == "for") {
            s->k = stmt::kind::for_;
            s->targets = parse_targets();
            if (!accept_name("in")) fail("expected 'in' in a for loop");
            s->value = parse_tuple(false, false);
            if (accept_name("if")) s->cond = parse_tuple(true, false);
            if (accept_name("recursive")) s->recursive = true;
            expect_block_end();
            s->main = parse_body({"endfor", "else"}, end);
            if (end == "else") {
                expect_block_end();
                s->else_body = parse_body({"endfor"}, end);
            }
            expect_block_end();
        } else if (name == "set") {
            const std::string first = expect_name();
            if (accept_op(".")) {
                s->k = stmt::kind::set;
                s->targets = {first};
                s->attr = expect_name();
                expect_op("=");
                s->value = parse_tuple(true, false);
                expect_block_end();
            } else {
                s->targets = {first};
                while (accept_op(",")) s->targets.push_back(expect_name());
                if (accept_op("=")) {
                    s->k = stmt::kind::set;
                    s->value = parse_tuple(true, false);
                    expect_block_end();
                } else {
                    s->k = stmt::kind::set_block;
                    if (accept_op("|")) s->value = parse_filter_chain(node(expr::kind::name, line));
                    expect_block_end();
                    s->main = parse_body({"endset"}, end);
                    expect_block_end();
                }
            }
        } else if (name == "macro") {
            s->k = stmt::kind::macro;
            s->text = expect_name();
            expect_op("(");
            while (!accept_op(")")) {
                if (!s->params.empty()) expect_op(",");
                if (accept_op(")")) break;
                macro_param p{.name = expect_name(), .default_value = nullptr};
                if (accept_op("=")) p.default_value = parse_expression();
                s->params.push_back(std::move(p));
            }
            expect_block_end();
            s->main = parse_body({"endmacro"}, end);
            expect_block_end();
        } else if (name == "call") {
            s->k = stmt::kind::call_block;
            if (is_op("(")) fail("call blocks with caller arguments are not supported");
            s->value = parse_expression();
            expect_block_end();
            s->main = parse_body({"endcall"}, end);
            expect_block_end();
        } else if (name == "filter") {
            s->k = stmt::kind::filter_block;
            s->value = parse_filter_chain(node(expr::kind::name, line), true);
            expect_block_end();
            s->main = parse_body({"endfilter"}, end);
            expect_block_end();
        } else if (name == "with") {
            s->k = stmt::kind::scope;
            while (cur().kind != token_kind::block_end) {
                if (!s->assignments.empty()) expect_op(",");
                std::string target = expect_name();
                expect_op("=");
                s->assignments.emplace_back(std::move(target), parse_expression());
            }
            expect_block_end();
            s->main = parse_body({"endwith"}, end);
            expect_block_end();
        } else if (name == "generation") {
            s->k = stmt::kind::scope;
            expect_block_end();
            s->main = parse_body({"endgeneration"}, end);
            expect_block_end();
        } else if (name == "break" || name == "continue") {
            s->k = name == "break" ? stmt::kind::break_ : stmt::kind::continue_;
            expect_block_end();
        } else {
            fail("unknown statement '" + name + "'");
        }
        return s;
    }

    std::vector<std::string> parse_targets() {
        std::vector<std::string> targets;
        const bool paren = accept_op("(");
        targets.push_back(expect_name());
        while (accept_op(",")) {
            if (paren && is_op(")")) break;
            targets.push_back(expect_name());
        }
        if (paren) expect_op(")");
        return targets;
    }

    // ---- expressions ----

    // An expression, or a tuple of them when commas follow (`a, b`).
    expr_ptr parse_tuple(bool with_condexpr, bool explicit_parens) {
        const int line = cur().line;
        std::vector<expr_ptr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) {
                if (!accept_op(",")) break;
                is_tuple = true;
            }
            if (cur().kind == token_kind::block_end || cur().kind == token_kind::var_end || is_op(")") ||
                (!items.empty() && (is_name("if") || is_name("recursive")) && !with_condexpr) ||
                (!items.empty() && is_op("=")))
                break;
            items.push_back(with_condexpr ? parse_expression() : parse_or());
        }
        if (!is_tuple) {
            if (items.empty()) {
                if (explicit_parens) return node(expr::kind::tuple, line);
                fail("expected an expression, got '" + cur().value + "'");
            }
            return items[0];
        }
        auto t = node(expr::kind::tuple, line);
        t->items = std::move(items);
        return t;
    }

    expr_ptr parse_expression() {
        expr_ptr e = parse_or();
        while (is_name("if")) {
            const int line = cur().line;
            advance();
            auto c = node(expr::kind::cond, line);
            expr_ptr test = parse_or();
            expr_ptr otherwise = accept_name("else") ? parse_expression() : nullptr;
            c->items = {test, e, otherwise};
            e = c;
        }
        return e;
    }

    expr_ptr binary(const std::string& op, expr_ptr a, expr_ptr b, int line) {
        auto n = node(expr::kind::binary, line);
        n->name = op;
        n->items = {std::move(a), std::move(b)};
        return n;
    }

    expr_ptr parse_or() {
        expr_ptr e = parse_and();
        while (is_name("or")) {
            const int line = cur().line;
            advance();
            e = binary("or", e, parse_and(), line);
        }
        return e;
    }

    expr_ptr parse_and() {
        expr_ptr e = parse_not();
        while (is_name("and")) {
            const int line = cur().line;
            advance();
            e = binary("and", e, parse_not(), line);
        }
        return e;
    }

    expr_ptr parse_not() {
        if (is_name("not")) {
            const int line = cur().line;
            advance();
            auto n = node(expr::kind::unary, line);
            n->name = "not";
            n->items = {parse_not()};
            return n;
        }
        return parse_compare();
    }

    expr_ptr parse_compare() {
        const int line = cur().line;
        expr_ptr first = parse_math1();
        std::shared_ptr<expr> cmp;
        while (true) {
            std::string op;
            if (cur().kind == token_kind::op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                                 cur().value == ">" || cur().value == "<=" || cur().value == ">=")) {
                op = cur().value;
                advance();
            } else if (is_name("in")) {
                op = "in";
                advance();
            } else if (is_name("not") && peek().kind == token_kind::name && peek().value == "in") {
                op = "not in";
                advance();
                advance();
            } else {
                break;
            }
            if (!cmp) {
                cmp = node(expr::kind::compare, line);
                cmp->items.push_back(first);
            }
            cmp->ops.push_back(op);
            cmp->items.push_back(parse_math1());
        }
        return cmp ? cmp : first;
    }

    expr_ptr parse_math1() {
        expr_ptr e = parse_concat();
        while (is_op("+") || is_op("-")) {
            const std::string op = cur().value;
            const int line = cur().line;
            advance();
            e = binary(op, e, parse_concat(), line);
        }
        return e;
    }

    expr_ptr parse_concat() {
        expr_ptr e = parse_math2();
        while (is_op("~")) {
            const int line = cur().line;
            advance();
            e = binary("~", e, parse_math2(), line);
        }
        return e;
    }

    expr_ptr parse_math2() {
        expr_ptr e = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const std::string op = cur().value;
            const int line = cur().line;
            advance();
            e = binary(op, e, parse_pow(), line);
        }
        return e;
    }

    expr_ptr parse_pow() {
        expr_ptr e = parse_unary(true);
        while (is_op("**")) {
            const int line = cur().line;
            advance();
            e = binary("**", e, parse_unary(true), line);
        }
        return e;
    }

    expr_ptr parse_unary(bool with_filter) {
        const int line = cur().line;
        expr_ptr e;
        if (is_op("-") || is_op("+")) {
            const std::string op = cur().value;
            advance();
            auto n = node(expr::kind::unary, line);
            n->name = op;
            n->items = {parse_unary(false)};
            e = n;
        } else {
            e = parse_primary();
        }
        e = parse_postfix(e);
        if (with_filter) e = parse_filter_expr(e);
        return e;
    }

    expr_ptr parse_primary() {
        const token t = cur();
        if (t.kind == token_kind::name) {
            advance();
            if (t.value == "true" || t.value == "True") return literal(json(true), t.line);
            if (t.value == "false" || t.value == "False") return literal(json(false), t.line);
            if (t.value == "none" || t.value == "None") return literal(json(nullptr), t.line);
            auto n = node(expr::kind::name, t.line);
            n->name = t.value;
            return n;
        }
        if (t.kind == token_kind::string) {
            std::string s;
            while (cur().kind == token_kind::string) {
                s += cur().value;
                advance();
            }
            return literal(json(s), t.line);
        }
        if (t.kind == token_kind::integer) {
            advance();
            return literal(json(std::strtoll(t.value.c_str(), nullptr, 10)), t.line);
        }
        if (t.kind == token_kind::floating) {
            advance();
            return literal(json(std::strtod(t.value.c_str(), nullptr)), t.line);
        }
        if (accept_op("(")) {
            expr_ptr e = parse_tuple(true, true);
            expect_op(")");
            return e;
        }
        if (accept_op("[")) {
            auto n = node(expr::kind::list, t.line);
            while (!is_op("]")) {
                if (!n->items.empty()) {
                    expect_op(",");
                    if (is_op("]")) break;
                }
                n->items.push_back(parse_expression());
            }
            expect_op("]");
            return n;
        }
        if (accept_op("{")) {
            auto n = node(expr::kind::dict, t.line);
            while (!is_op("}")) {
                if (!n->items.empty()) {
                    expect_op(",");
                    if (is_op("}")) break;
                }
                n->items.push_back(parse_expression());
                expect_op(":");
                n->items.push_back(parse_expression());
            }
            expect_op("}");
            return n;
        }
        fail("unexpected '" + t.value + "'");
    }

    static expr_ptr literal(json j, int line) {
        auto n = node(expr::kind::literal, line);
        n->literal = std::move(j);
        return n;
    }

    expr_ptr parse_postfix(expr_ptr e) {
        while (true) {
            const int line = cur().line;
            if (accept_op(".")) {
                if (cur().kind == token_kind::integer) {
                    auto n = node(expr::kind::getitem, line);
                    n->items = {e, literal(json(std::strtoll(cur().value.c_str(), nullptr, 10)), line)};
                    advance();
                    e = n;
                } else {
                    auto n = node(expr::kind::getattr, line);
                    n->name = expect_name();
                    n->items = {e};
                    e = n;
                }
            } else if (accept_op("[")) {
                e = parse_subscript(e, line);
            } else if (is_op("(")) {
                e = parse_call(e);
            } else {
                return e;
            }
        }
    }

    expr_ptr parse_subscript(expr_ptr target, int line) {
        expr_ptr parts[3];
        int colons = 0;
        for (int i = 0; i < 3; ++i) {
            if (!is_op(":") && !is_op("]")) parts[i] = parse_expression();
            if (i < 2 && accept_op(":")) {
                ++colons;
                continue;
            }
            break;
        }
        expect_op("]");
        if (colons == 0) {
            if (!parts[0]) fail("empty subscript");
            auto n = node(expr::kind::getitem, line);
            n->items = {target, parts[0]};
            return n;
        }
        auto n = node(expr::kind::slice, line);
        n->items = {target, parts[0], parts[1], parts[2]};
        return n;
    }

    void parse_call_args(std::shared_ptr<expr>& n) {
        expect_op("(");
        while (!accept_op(")")) {
            if (n->items.size() > 1 || !n->kwargs.empty()) {
                expect_op(",");
                if (accept_op(")")) break;
            }
            if (cur().kind == token_kind::name && peek().kind == token_kind::op && peek().value == "=") {
                std::string key = cur().value;
                advance();
                advance();
                n->kwargs.emplace_back(std::move(key), parse_expression());
            } else {
                if (!n->kwargs.empty()) fail("positional argument after a keyword argument");
                n->items.push_back(parse_expression());
            }
        }
    }

    expr_ptr parse_call(expr_ptr callee) {
        auto n = node(expr::kind::call, cur().line);
        n->items = {std::move(callee)};
        parse_call_args(n);
        return n;
    }

    // `| name(args)` repeated; with only_one, a {% filter %} tag's chain applied to `subject`.
    expr_ptr parse_filter_chain(expr_ptr subject, bool first_without_pipe = false) {
        bool first = true;
        while ((first && first_without_pipe) || accept_op("|")) {
            first = false;
            auto n = node(expr::kind::filter, cur().line);
            n->name = expect_name();
            while (accept_op(".")) n->name += "." + expect_name();
            n->items = {subject};
            if (is_op("(")) parse_call_args(n);
            subject = n;
        }
        return subject;
    }

    expr_ptr parse_filter_expr(expr_ptr e) {
        while (true) {
            if (is_op("|")) {
                e = parse_filter_chain(e);
            } else if (is_name("is")) {
                advance();
                auto n = node(expr::kind::test, cur().line);
                n->negated = accept_name("not");
                n->name = expect_name();
                while (accept_op(".")) n->name += "." + expect_name();
                n->items = {e};
                if (is_op("(")) {
                    parse_call_args(n);
                } else if ((cur().kind == token_kind::name || cur().kind == token_kind::string ||
                            cur().kind == token_kind::integer || cur().kind == token_kind::floating || is_op("[") ||
                            is_op("{")) &&
                           !is_name("else") && !is_name("or") && !is_name("and")) {
                    if (is_name("is")) fail("you cannot chain multiple tests with is");
                    n->items.push_back(parse_postfix(parse_primary()));
                }
                e = n;
            } else if (is_op("(")) {
                e = parse_call(e);
            } else {
                return e;
            }
        }
    }

    std::vector<token> tokens_;
    size_t pos_ = 0;
};

}  // namespace

body parse_template(const std::string& source, const lexer_options& options) {
    return parser(tokenize_template(source, options)).parse_all();
}

}  // namespace zmoe::jinja
