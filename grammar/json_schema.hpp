#pragma once
// JSON Schema to grammar. The subset is what OpenAI's strict mode and the common generators (pydantic, zod) emit;
// docs/structured_outputs.md lists it. Every keyword outside it is refused by name (zmoe::error invalid_argument),
// except annotations (title, description, examples, default, $schema, $id, $comment, ...), which are ignored.
//
// Output layout: with any_whitespace off (the default) exactly one spelling per value, Python json.dumps' default
// ("{\"a\": 1, \"b\": [1, 2]}"): ", " between items and ": " after keys, no other whitespace. With
// any_whitespace, optional runs of [ \t\n\r] are allowed wherever JSON allows them.
// Properties come in the order the schema lists them; optional ones may be left out.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "grammar/grammar.hpp"

namespace zmoe::grammar {

struct json_schema_options {
    bool any_whitespace = false;
    /// Objects without "additionalProperties" allow no other keys (OpenAI strict mode's reading). When false,
    /// JSON Schema's own default applies (any other key, any value).
    bool strict = true;
};

/// Compiles a JSON Schema given as JSON text.
grammar compile_json_schema(std::string_view schema, const json_schema_options& options = {});

/// Any JSON value that is an object (response_format json_object).
grammar compile_json_object(const json_schema_options& options = {});

/// `v` in the one spelling the grammar produces with any_whitespace off (Python json.dumps' defaults, raw UTF-8,
/// keys in their order): how `const` and `enum` values are matched.
std::string canonical_json(const nlohmann::ordered_json& v);

}  // namespace zmoe::grammar
