// The Jinja interpreter against jinja2's behaviour (expected strings are what jinja2 3.1 renders with
// trim_blocks=True, lstrip_blocks=True in an ImmutableSandboxedEnvironment).

#include "frontend/jinja_template.hpp"

#include <gtest/gtest.h>

namespace zmoe::jinja {
namespace {

std::string render(const std::string& src, const json& vars = json::object()) {
    return jinja_template(src).render(vars);
}

TEST(JinjaTemplate, TrimBlocksAndLstripBlocks) {
    EXPECT_EQ(render("{% if true %}\n  a\n{% endif %}\nb\n"), "  a\nb");
    EXPECT_EQ(render("x\n    {% if true %}\ny\n    {% endif %}\nz"), "x\ny\nz");
    EXPECT_EQ(render("x  {%- if true -%}  y  {%- endif %}"), "xy");
    EXPECT_EQ(render("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
    EXPECT_EQ(render("a {{- 'b' -}} c"), "abc");
    EXPECT_EQ(render("a\n  {# comment #}\nb"), "a\nb");
    EXPECT_EQ(render("{% raw %}{{ not evaluated }}{% endraw %}"), "{{ not evaluated }}");
    EXPECT_EQ(render("line\r\nnext\n"), "line\nnext");
}

TEST(JinjaTemplate, ScopingFollowsJinja2) {
    // A set inside a loop iteration does not leak to the next iteration or out of the loop.
    EXPECT_EQ(render("{% for i in [1,2,3] %}{% if i==1 %}{% set x=5 %}{% endif %}[{{x}}]{% endfor %}[{{x}}]"),
              "[5][][][]");
    EXPECT_EQ(render("{% set x=1 %}{% for i in [1,2] %}{{x}}{% set x=i+10 %}{{x}}{% endfor %}{{x}}"), "1111121");
    EXPECT_EQ(
        render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
        "6");
    EXPECT_EQ(render("{% macro m(a, b=2) %}{{a}}-{{b}}-{{y}}{% endmacro %}{% set y=7 %}{{ m(1) }}{{ m(1, b=3) }}",
                     json{{"y", 3}}),
              "1-2-71-3-7");
}

TEST(JinjaTemplate, LoopVariablesAndControls) {
    EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
                     "{{ loop.last }}{{ loop.length }};{% endfor %}"),
              "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
    EXPECT_EQ(render("{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break %}"
                     "{% endif %}{{ i }}{% endfor %}"),
              "0246");
    EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
    EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}"), "a=1 b=2 ");
    EXPECT_EQ(render("{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}"), "2242");
}

TEST(JinjaTemplate, PythonValueFormatting) {
    EXPECT_EQ(render("{{ 1.0 }} {{ 1e20 }} {{ 0.0001 }} {{ 1e-05 }} {{ 10/4 }} {{ 7//2 }} {{ -7 % 3 }}"),
              "1.0 1e+20 0.0001 1e-05 2.5 3 2");
    EXPECT_EQ(render("{{ [1, 'a', None, True] }} {{ {'k': \"it's\"} }} {{ none }}"),
              "[1, 'a', None, True] {'k': \"it's\"} None");
    EXPECT_EQ(render("{{ x | tojson }}", json{{"x", json::parse(R"({"b": [1, 2.5, "é\n"], "a": null})")}}),
              R"({"b": [1, 2.5, "é\n"], "a": null})");
    EXPECT_EQ(render("{{ x | tojson(indent=2) }}", json{{"x", json::parse(R"({"a": [1], "b": {}})")}}),
              "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
}

TEST(JinjaTemplate, StringMethodsSlicesAndFilters) {
    EXPECT_EQ(render("{{ s.split('</think>')[-1].lstrip('\\n') }}|{{ s.startswith('<think>') }}|{{ s[::-1][:3] }}",
                     json{{"s", "<think>x</think>\n\nanswer"}}),
              "answer|True|rew");
    EXPECT_EQ(render("{{ 'a b  c'.split() }} {{ '  x '.strip() }}| {{ 'Ab'.upper() }} {{ 'ÄB' | lower }}"),
              "['a', 'b', 'c'] x| AB äb");
    EXPECT_EQ(render("{{ xs | map(attribute='n') | join(',') }} {{ xs | selectattr('n', 'gt', 1) | list | length }}",
                     json{{"xs", json::parse(R"([{"n": 1}, {"n": 2}, {"n": 3}])")}}),
              "1,2,3 2");
    EXPECT_EQ(render("{{ missing | default('d') }} {{ '' | default('e', true) }} {{ [3,1,2] | sort | first }}"),
              "d e 1");
}

TEST(JinjaTemplate, ErrorsAsJinja2Raises) {
    EXPECT_THROW(render("{{ missing.attr }}"), render_error);
    EXPECT_THROW(render("{{ 'a' + 1 }}"), render_error);
    EXPECT_THROW(render("{{ x.append(1) }}", json{{"x", json::array()}}), render_error);  // sandbox: immutable
    EXPECT_THROW(render("{% if x %}"), render_error);                                     // unclosed block
    EXPECT_THROW(render("{{ x | no_such_filter }}"), render_error);
    EXPECT_EQ(render("{{ x._private }}", json{{"x", json::object()}}), "");  // sandbox: private attributes hidden
}

}  // namespace
}  // namespace zmoe::jinja
