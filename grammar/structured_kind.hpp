#pragma once
// The wire's structured-output kinds (messages/structured_output.hpp) as the grammar engine's, in one place for the
// frontend (which checks that a request compiles) and the workers (which compile it against their vocabulary).
// Header only: zmoe_grammar itself does not depend on zmoe_messages.

#include "grammar/grammar_compiler.hpp"
#include "messages/structured_output.hpp"

namespace zmoe::grammar {

/// The grammar kind of an active constraint (structured_kind::none has none: zmoe::error(invalid_argument)).
inline grammar_kind grammar_kind_of(structured_kind k) {
    switch (k) {
        case structured_kind::json_schema:
            return grammar_kind::json_schema;
        case structured_kind::json_object:
            return grammar_kind::json_object;
        case structured_kind::regex:
            return grammar_kind::regex;
        case structured_kind::choice:
            return grammar_kind::choice;
        case structured_kind::grammar:
            return grammar_kind::ebnf;
        case structured_kind::none:
            break;
    }
    throw error(errc::invalid_argument, "structured output: no constraint to compile");
}

}  // namespace zmoe::grammar
