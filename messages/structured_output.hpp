#pragma once
// A structured-output constraint as it travels: client -> frontend (client_generate), frontend -> engine core
// (engine_add_request), engine core -> the worker that samples the sequence (scheduled_seq). The frontend checks
// that it compiles before queueing the request; the worker compiles it again against its vocabulary (cached by
// kind and text) and masks every sample of the sequence with it (docs/structured_outputs.md).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zmoe {

enum class structured_kind : uint8_t {
    none = 0,         ///< unconstrained ("" on the wire)
    json_schema = 1,  ///< text: a JSON Schema
    json_object = 2,  ///< any JSON object; text empty
    regex = 3,        ///< text: a regular expression, matched in full
    choice = 4,       ///< text: a JSON array of strings, one of which is produced verbatim
    grammar = 5,      ///< text: a GBNF-like EBNF grammar with a rule `root`
};

/// "", "json_schema", "json_object", "regex", "choice", "grammar".
std::string_view structured_kind_name(structured_kind k);
/// The inverse of structured_kind_name; nullopt for an unknown name.
std::optional<structured_kind> structured_kind_from_name(std::string_view name);

struct structured_output {
    structured_kind kind = structured_kind::none;
    std::string text;
    bool active() const { return kind != structured_kind::none; }
    bool operator==(const structured_output&) const = default;
};

}  // namespace zmoe
