#pragma once
// A tool's `parameters` JSON Schema as rules of an EBNF grammar (grammar/ebnf.hpp's dialect), so that a grammar of
// tool calls can embed each function's arguments. The spelling is Python json.dumps' default (", " between items,
// ": " after keys, raw UTF-8), the one the chat templates show the model; properties in the schema's order,
// optional ones may be left out. Subset: type (one or a list), properties, required, additionalProperties (false or
// absent: no other keys; an object schema without properties takes any object), items, minItems, maxItems, enum,
// const, anyOf, oneOf, $ref into #/$defs or #/definitions (recursion allowed), minLength, maxLength, nullable, and
// minimum/maximum/exclusiveMinimum/exclusiveMaximum on integers (not on numbers: refused).
// Numbers are bounded so that every parser reads them as doubles: at most 16 integer and 16 fraction digits, a
// two-digit exponent. Annotations (title, description, examples, default, $schema, $id, $comment, strict, ...) are
// ignored; every other keyword is refused by name (zmoe::error invalid_argument), never ignored.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zmoe::tool_calls {

/// Collects the rules of several schemas under distinct prefixes; text() is the rules, one per line.
class json_schema_ebnf {
  public:
    /// Adds the rules of `schema` (`where` names it in errors) and returns the expression matching its values.
    std::string add(const nlohmann::ordered_json& schema, const std::string& prefix, const std::string& where);
    /// Every rule added, plus the shared JSON rules (json-value, json-string, ...) that they use.
    std::string text() const;

    /// An EBNF string literal of `bytes` (raw UTF-8; quotes, backslashes and control bytes escaped).
    static std::string literal(const std::string& bytes);

  private:
    std::string value(const nlohmann::ordered_json& s, const std::string& path);
    std::string object(const nlohmann::ordered_json& s, const std::string& path);
    std::string array(const nlohmann::ordered_json& s, const std::string& path);
    std::string integer(const nlohmann::ordered_json& s, const std::string& at);
    std::string rule(const std::string& body);

    std::vector<std::pair<std::string, std::string>> rules_;
    const nlohmann::ordered_json* root_ = nullptr;
    std::string prefix_, where_;
    std::vector<std::pair<std::string, std::string>> refs_;  // $ref -> rule name, for the current schema
    int counter_ = 0;
};

}  // namespace zmoe::tool_calls
