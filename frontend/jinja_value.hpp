#pragma once
// The values a Jinja template computes with, with Python's semantics (jinja2 runs on Python): JSON data
// (None, bool, int, float, str, list, dict in insertion order), jinja2's Undefined, mutable objects
// (namespace(), the loop variable) and callables (macros, globals such as range or raise_exception).
// Strings are UTF-8; lengths, indices and slices count code points as Python's str does.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"

namespace zmoe::jinja {

/// JSON with Python dict semantics: keys keep their insertion order.
using json = nlohmann::ordered_json;

class value;

/// Positional and keyword arguments of a call.
struct call_args {
    std::vector<value> positional;
    std::vector<std::pair<std::string, value>> keyword;
};

using function = std::function<value(call_args&)>;
/// A mutable attribute bag (namespace(), loop): shared by every copy of the value, as Python objects are.
using object = std::map<std::string, value>;

/// A template error: a raise_exception() call, a Python TypeError/UndefinedError equivalent, or a syntax error.
/// `what()` carries jinja2's wording where it matters to users (raise_exception's message verbatim).
class render_error : public zmoe::error {
  public:
    explicit render_error(const std::string& what) : zmoe::error(errc::invalid_argument, what) {}
};

class value {
  public:
    enum class kind : uint8_t { undefined, data, object, callable };

    value() = default;                                         ///< Undefined
    value(json j) : kind_(kind::data), data_(std::move(j)) {}  // NOLINT: implicit on purpose
    static value undefined(std::string name = {}) {
        value v;
        v.undefined_name_ = std::move(name);
        return v;
    }
    static value make_object(std::string type_name) {
        value v;
        v.kind_ = kind::object;
        v.object_ = std::make_shared<object>();
        v.undefined_name_ = std::move(type_name);
        return v;
    }
    static value make_callable(std::string name, function fn) {
        value v;
        v.kind_ = kind::callable;
        v.fn_ = std::make_shared<function>(std::move(fn));
        v.undefined_name_ = std::move(name);
        return v;
    }

    kind type() const { return kind_; }
    bool is_undefined() const { return kind_ == kind::undefined; }
    bool is_data() const { return kind_ == kind::data; }
    bool is_object() const { return kind_ == kind::object; }
    bool is_callable() const { return kind_ == kind::callable; }
    bool is_none() const { return is_data() && data_.is_null(); }
    bool is_string() const { return is_data() && data_.is_string(); }
    bool is_bool() const { return is_data() && data_.is_boolean(); }
    bool is_int() const { return is_data() && data_.is_number_integer(); }
    bool is_number() const { return is_data() && (data_.is_number() || data_.is_boolean()); }
    bool is_list() const { return is_data() && data_.is_array(); }
    bool is_dict() const { return is_data() && data_.is_object(); }

    const json& data() const { return data_; }
    json& data() { return data_; }
    const std::string& str_ref() const { return data_.get_ref<const std::string&>(); }
    object& obj() const { return *object_; }
    const function& fn() const { return *fn_; }
    /// For an Undefined: the name it was looked up by (for messages); for objects/callables: their type name.
    const std::string& name() const { return undefined_name_; }
    /// Same object (Python's `is`) for objects and callables.
    bool same_object(const value& other) const {
        return (object_ && object_ == other.object_) || (fn_ && fn_ == other.fn_);
    }

    /// Whether the value is data that can live inside a list or dict.
    json to_json(const char* what) const;

  private:
    kind kind_ = kind::undefined;
    json data_;
    std::shared_ptr<object> object_;
    std::shared_ptr<function> fn_;
    std::string undefined_name_;
};

// ---- Python semantics ----

/// bool(v)
bool truthy(const value& v);
/// str(v): None, True, 'repr' inside containers, Python float repr.
std::string to_str(const value& v);
/// repr(v) for data.
std::string repr(const json& j);
/// Python's repr(float).
std::string float_repr(double d);
/// a == b (1 == 1.0 == True; Undefined equals only Undefined).
bool equals(const value& a, const value& b);
/// a < b for numbers, strings and lists; TypeError otherwise.
bool less(const value& a, const value& b);
/// Python's json.dumps(j, ensure_ascii=False, indent=indent (<0: None), separators=default, sort_keys=sort).
std::string json_dumps(const json& j, int indent, bool sort_keys);
/// The Python type name (for error messages).
std::string type_name(const value& v);
/// Numeric value of an int/float/bool.
double as_double(const value& v);
int64_t as_int(const value& v);

// ---- UTF-8 code point helpers (Python str indexing) ----
std::vector<std::string> code_points(const std::string& s);
size_t num_code_points(const std::string& s);

}  // namespace zmoe::jinja
