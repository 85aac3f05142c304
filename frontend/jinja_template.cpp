#include "frontend/jinja_template.hpp"

#include <cmath>

#include "frontend/jinja_builtins.hpp"
#include "frontend/jinja_parser.hpp"

namespace zmoe::jinja {

namespace {

enum class flow : uint8_t { normal, break_, continue_ };

[[noreturn]] void undefined_error(const value& v) {
    throw render_error("'" + (v.name().empty() ? std::string("value") : v.name()) + "' is undefined");
}

value arithmetic(const std::string& op, const value& a, const value& b) {
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
    const bool nums = a.is_number() && b.is_number();
    const auto unsupported = [&]() -> value {
        throw render_error("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) +
                           "'");
    };
    if (op == "+") {
        if (ints) return value(json(as_int(a) + as_int(b)));
        if (nums) return value(json(as_double(a) + as_double(b)));
        if (a.is_string() && b.is_string()) return value(json(a.str_ref() + b.str_ref()));
        if (a.is_list() && b.is_list()) {
            json out = a.data();
            for (const auto& e : b.data()) out.push_back(e);
            return value(std::move(out));
        }
        return unsupported();
    }
    if (op == "-") {
        if (ints) return value(json(as_int(a) - as_int(b)));
        if (nums) return value(json(as_double(a) - as_double(b)));
        return unsupported();
    }
    if (op == "*") {
        if (ints) return value(json(as_int(a) * as_int(b)));
        if (nums) return value(json(as_double(a) * as_double(b)));
        const value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
        const value* count = seq == &a ? &b : &a;
        if (!seq || !(count->is_int() || count->is_bool())) return unsupported();
        const int64_t n = as_int(*count);
        if (seq->is_string()) {
            std::string out;
            for (int64_t i = 0; i < n; ++i) out += seq->str_ref();
            return value(json(out));
        }
        json out = json::array();
        for (int64_t i = 0; i < n; ++i)
            for (const auto& e : seq->data()) out.push_back(e);
        return value(std::move(out));
    }
    if (op == "/" || op == "//" || op == "%") {
        if (a.is_string() && op == "%") {
            call_args args;
            if (b.is_list())
                for (const auto& e : b.data()) args.positional.emplace_back(e);
            else
                args.positional.push_back(b);
            return apply_filter("format", a, args);
        }
        if (!nums) return unsupported();
        if (as_double(b) == 0.0) throw render_error("division by zero");
        if (op == "/") return value(json(as_double(a) / as_double(b)));
        if (ints) {
            const int64_t x = as_int(a), y = as_int(b);
            int64_t q = x / y, r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) {
                --q;
                r += y;
            }
            return value(json(op == "//" ? q : r));
        }
        const double x = as_double(a), y = as_double(b);
        if (op == "//") return value(json(std::floor(x / y)));
        double r = std::fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return value(json(r));
    }
    if (op == "**") {
        if (ints && as_int(b) >= 0) {
            int64_t r = 1;
            for (int64_t i = 0; i < as_int(b); ++i) r *= as_int(a);
            return value(json(r));
        }
        if (nums) return value(json(std::pow(as_double(a), as_double(b))));
        return unsupported();
    }
    return unsupported();
}

class interpreter {
  public:
    explicit interpreter(object globals) { frames_.push_back(std::move(globals)); }

    flow exec(const body& b, std::string& out) {
        for (const auto& s : b) {
            const flow f = exec(*s, out);
            if (f != flow::normal) return f;
        }
        return flow::normal;
    }

  private:
    value lookup(const std::string& name) const {
        for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
            auto found = it->find(name);
            if (found != it->end()) return found->second;
        }
        return value::undefined(name);
    }

    flow exec(const stmt& s, std::string& out) {
        switch (s.k) {
            case stmt::kind::text:
                out += s.text;
                return flow::normal;
            case stmt::kind::output:
                out += to_str(eval(*s.value));
                return flow::normal;
            case stmt::kind::if_:
                for (const auto& [cond, branch] : s.branches)
                    if (truthy(eval(*cond))) return exec(branch, out);
                return exec(s.else_body, out);
            case stmt::kind::for_:
                return exec_for(s, out);
            case stmt::kind::set:
                exec_set(s);
                return flow::normal;
            case stmt::kind::set_block: {
                std::string captured;
                frames_.emplace_back();
                exec(s.main, captured);
                frames_.pop_back();
                value v{json(captured)};
                if (s.value) v = apply_placeholder(*s.value, v);
                frames_.back()[s.targets[0]] = v;
                return flow::normal;
            }
            case stmt::kind::macro:
                frames_.back()[s.text] = make_macro(s);
                return flow::normal;
            case stmt::kind::call_block: {
                const stmt* block = &s;
                std::vector<object> call_site = frames_;
                pending_caller_ = value::make_callable("caller", [this, block, call_site](call_args&) -> value {
                    std::vector<object> saved = std::move(frames_);
                    frames_ = call_site;
                    frames_.emplace_back();
                    std::string text;
                    exec(block->main, text);
                    frames_ = std::move(saved);
                    return value(json(text));
                });
                out += to_str(eval(*s.value));
                pending_caller_ = value();
                return flow::normal;
            }
            case stmt::kind::filter_block: {
                std::string captured;
                frames_.emplace_back();
                const flow f = exec(s.main, captured);
                frames_.pop_back();
                out += to_str(apply_placeholder(*s.value, value(json(captured))));
                return f;
            }
            case stmt::kind::break_:
                return flow::break_;
            case stmt::kind::continue_:
                return flow::continue_;
            case stmt::kind::scope: {
                object scope;
                for (const auto& [name, e] : s.assignments) scope[name] = eval(*e);
                frames_.push_back(std::move(scope));
                const flow f = exec(s.main, out);
                frames_.pop_back();
                return f;
            }
        }
        return flow::normal;
    }

    value apply_placeholder(const expr& filter_chain, const value& subject) {
        frames_.push_back({{"", subject}});
        value v = eval(filter_chain);
        frames_.pop_back();
        return v;
    }

    void bind_targets(const std::vector<std::string>& targets, const value& item, object& frame) {
        if (targets.size() == 1) {
            frame[targets[0]] = item;
            return;
        }
        const auto items = iterate(item);
        if (items.size() != targets.size())
            throw render_error("cannot unpack " + std::to_string(items.size()) + " values into " +
                               std::to_string(targets.size()) + " names");
        for (size_t i = 0; i < targets.size(); ++i) frame[targets[i]] = items[i];
    }

    flow exec_for(const stmt& s, std::string& out) {
        if (s.recursive) throw render_error("recursive for loops are not supported");
        const value iterable = eval(*s.value);
        std::vector<value> items = iterate(iterable);
        if (s.cond) {
            std::vector<value> kept;
            for (auto& item : items) {
                object frame;
                bind_targets(s.targets, item, frame);
                frames_.push_back(std::move(frame));
                const bool keep = truthy(eval(*s.cond));
                frames_.pop_back();
                if (keep) kept.push_back(std::move(item));
            }
            items = std::move(kept);
        }
        if (items.empty()) return exec(s.else_body, out);
        const int64_t n = static_cast<int64_t>(items.size());
        for (int64_t i = 0; i < n; ++i) {
            object frame;
            bind_targets(s.targets, items[static_cast<size_t>(i)], frame);
            value loop = value::make_object("LoopContext");
            object& l = loop.obj();
            l["index0"] = value(json(i));
            l["index"] = value(json(i + 1));
            l["revindex"] = value(json(n - i));
            l["revindex0"] = value(json(n - i - 1));
            l["first"] = value(json(i == 0));
            l["last"] = value(json(i == n - 1));
            l["length"] = value(json(n));
            l["depth"] = value(json(1));
            l["depth0"] = value(json(0));
            l["previtem"] = i > 0 ? items[static_cast<size_t>(i - 1)] : value::undefined("previtem");
            l["nextitem"] = i + 1 < n ? items[static_cast<size_t>(i + 1)] : value::undefined("nextitem");
            l["cycle"] = value::make_callable("cycle", [i](call_args& a) -> value {
                if (a.positional.empty()) throw render_error("no items for cycling given");
                return a.positional[static_cast<size_t>(i) % a.positional.size()];
            });
            frame["loop"] = loop;
            frames_.push_back(std::move(frame));
            const flow f = exec(s.main, out);
            frames_.pop_back();
            if (f == flow::break_) break;
        }
        return flow::normal;
    }

    void exec_set(const stmt& s) {
        const value v = eval(*s.value);
        if (!s.attr.empty()) {
            const value target = lookup(s.targets[0]);
            if (!target.is_object() || target.name() != "Namespace")
                throw render_error("cannot assign attribute on non-namespace object");
            target.obj()[s.attr] = v;
            return;
        }
        bind_targets(s.targets, v, frames_.back());
    }

    value make_macro(const stmt& s) {
        const stmt* m = &s;
        return value::make_callable(s.text, [this, m](call_args& a) -> value {
            object frame;
            size_t next = 0;
            for (const auto& p : m->params) {
                const value* given = nullptr;
                if (next < a.positional.size()) {
                    given = &a.positional[next++];
                } else {
                    for (const auto& [k, v] : a.keyword)
                        if (k == p.name) given = &v;
                }
                if (given)
                    frame[p.name] = *given;
                else if (p.default_value)
                    frame[p.name] = eval(*p.default_value);
                else
                    frame[p.name] = value::undefined(p.name);
            }
            json varargs = json::array();
            for (; next < a.positional.size(); ++next) varargs.push_back(a.positional[next].to_json("varargs"));
            frame["varargs"] = value(std::move(varargs));
            json kwargs = json::object();
            for (const auto& [k, v] : a.keyword) {
                bool is_param = false;
                for (const auto& p : m->params) is_param = is_param || p.name == k;
                if (!is_param) kwargs[k] = v.to_json("kwargs");
            }
            frame["kwargs"] = value(std::move(kwargs));
            if (!pending_caller_.is_undefined()) {
                frame["caller"] = pending_caller_;
                pending_caller_ = value();
            }
            // A macro sees the template's globals and top-level names, not its caller's locals.
            std::vector<object> saved(std::make_move_iterator(frames_.begin() + 1),
                                      std::make_move_iterator(frames_.end()));
            frames_.resize(1);
            frames_.push_back(std::move(frame));
            std::string text;
            try {
                exec(m->main, text);
            } catch (...) {
                frames_.resize(1);
                for (auto& f : saved) frames_.push_back(std::move(f));
                throw;
            }
            frames_.resize(1);
            for (auto& f : saved) frames_.push_back(std::move(f));
            return value(json(text));
        });
    }

    call_args eval_args(const expr& e, size_t first) {
        call_args args;
        for (size_t i = first; i < e.items.size(); ++i) args.positional.push_back(eval(*e.items[i]));
        for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
        return args;
    }

    value eval(const expr& e) {
        switch (e.k) {
            case expr::kind::literal:
                return value(e.literal);
            case expr::kind::name:
                return lookup(e.name);
            case expr::kind::list:
            case expr::kind::tuple: {
                json arr = json::array();
                for (const auto& item : e.items) arr.push_back(eval(*item).to_json("a list element"));
                return value(std::move(arr));
            }
            case expr::kind::dict: {
                json d = json::object();
                for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
                    const value k = eval(*e.items[i]);
                    if (!k.is_string()) throw render_error("dict keys must be strings here");
                    d[k.str_ref()] = eval(*e.items[i + 1]).to_json("a dict value");
                }
                return value(std::move(d));
            }
            case expr::kind::getattr:
                return get_attribute(eval(*e.items[0]), e.name);
            case expr::kind::getitem:
                return get_item(eval(*e.items[0]), eval(*e.items[1]));
            case expr::kind::slice: {
                const auto part = [&](size_t i) { return e.items[i] ? eval(*e.items[i]) : value(); };
                return get_slice(eval(*e.items[0]), part(1), part(2), part(3));
            }
            case expr::kind::call: {
                const value callee = eval(*e.items[0]);
                if (callee.is_undefined()) undefined_error(callee);
                if (!callee.is_callable()) throw render_error("'" + type_name(callee) + "' object is not callable");
                call_args args = eval_args(e, 1);
                return callee.fn()(args);
            }
            case expr::kind::filter: {
                const value subject = eval(*e.items[0]);
                call_args args = eval_args(e, 1);
                return apply_filter(e.name, subject, args);
            }
            case expr::kind::test: {
                const value subject = eval(*e.items[0]);
                call_args args = eval_args(e, 1);
                return value(json(apply_test(e.name, subject, args) != e.negated));
            }
            case expr::kind::unary: {
                const value v = eval(*e.items[0]);
                if (e.name == "not") return value(json(!truthy(v)));
                if (v.is_undefined()) undefined_error(v);
                if (e.name == "-") {
                    if (v.is_int() || v.is_bool()) return value(json(-as_int(v)));
                    return value(json(-as_double(v)));
                }
                if (!v.is_number()) throw render_error("bad operand type for unary +: '" + type_name(v) + "'");
                return v;
            }
            case expr::kind::binary: {
                if (e.name == "and") {
                    value a = eval(*e.items[0]);
                    return truthy(a) ? eval(*e.items[1]) : a;
                }
                if (e.name == "or") {
                    value a = eval(*e.items[0]);
                    return truthy(a) ? a : eval(*e.items[1]);
                }
                const value a = eval(*e.items[0]);
                const value b = eval(*e.items[1]);
                if (e.name == "~") return value(json(to_str(a) + to_str(b)));
                return arithmetic(e.name, a, b);
            }
            case expr::kind::compare: {
                value left = eval(*e.items[0]);
                for (size_t i = 0; i < e.ops.size(); ++i) {
                    value right = eval(*e.items[i + 1]);
                    const std::string& op = e.ops[i];
                    bool r;
                    if (op == "==")
                        r = equals(left, right);
                    else if (op == "!=")
                        r = !equals(left, right);
                    else if (op == "<")
                        r = less(left, right);
                    else if (op == ">")
                        r = less(right, left);
                    else if (op == "<=")
                        r = !less(right, left);
                    else if (op == ">=")
                        r = !less(left, right);
                    else if (op == "in")
                        r = contains(right, left);
                    else
                        r = !contains(right, left);
                    if (!r) return value(json(false));
                    left = std::move(right);
                }
                return value(json(true));
            }
            case expr::kind::cond:
                if (truthy(eval(*e.items[0]))) return eval(*e.items[1]);
                return e.items[2] ? eval(*e.items[2]) : value::undefined();
        }
        return value::undefined();
    }

    std::vector<object> frames_;
    value pending_caller_;
};

}  // namespace

jinja_template::jinja_template(const std::string& source, const lexer_options& options)
    : body_(parse_template(source, options)) {}

std::string jinja_template::render(const json& variables, const object& globals) const {
    object root;
    add_default_globals(root);
    for (const auto& [k, v] : globals) root[k] = v;
    if (variables.is_object())
        for (auto it = variables.begin(); it != variables.end(); ++it) root[it.key()] = value(it.value());
    interpreter interp(std::move(root));
    std::string out;
    interp.exec(body_, out);
    return out;
}

}  // namespace zmoe::jinja
