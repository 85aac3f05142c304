#pragma once
// jinja2's built-in filters, tests and globals, and the Python methods templates call on str, list and dict
// values (startswith, split, strip, items, get, ...), with jinja2's ImmutableSandboxedEnvironment rules:
// names starting with '_' are not reachable and methods that modify a list or dict raise.

#include <string>

#include "frontend/jinja_value.hpp"

namespace zmoe::jinja {

/// `subject | name(args)`; throws render_error for an unknown filter.
value apply_filter(const std::string& name, const value& subject, call_args& args);
/// `subject is name(args)`; throws render_error for an unknown test.
bool apply_test(const std::string& name, const value& subject, call_args& args);
/// `subject.name` (Python getattr first, then item, as jinja2's Environment.getattr).
value get_attribute(const value& subject, const std::string& name);
/// `subject[key]` (item first, then attribute for string keys, as jinja2's Environment.getitem).
value get_item(const value& subject, const value& key);
/// `subject[start:stop:step]` on a str or list (null values: omitted).
value get_slice(const value& subject, const value& start, const value& stop, const value& step);
/// `needle in haystack`.
bool contains(const value& haystack, const value& needle);
/// Elements of an iterable (list items, str code points, dict keys); Undefined iterates as empty.
std::vector<value> iterate(const value& v);
/// jinja2's default globals: range, dict, namespace, cycler-free subset.
void add_default_globals(object& globals);
/// Python's str.strip family on code points (chars empty: Python whitespace).
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);

}  // namespace zmoe::jinja
