#pragma once
// GBNF-like EBNF grammars:
//   root   ::= "{" ws pair ("," ws pair)* "}"      # the start rule is `root`
//   pair   ::= [a-z_]+ ":" ws value
//   value  ::= "true" | "false" | [0-9]+ | "\"" ([^"\\] | "\\" .)* "\""
//   ws     ::= [ \t\n]*
// Rules are `name ::= alternatives`, a rule running until the next `name ::=`; names are [A-Za-z0-9_-]+.
// Elements: "literal" (escapes \n \t \r \\ \" \xHH \uHHHH), [class] ([^...] negated; ranges; escapes), '.' (any
// code point), rule names, ( ), |, and the quantifiers ? * + {m} {m,} {m,n}. '#' starts a comment to the end of
// the line. Refused: undefined rules, left recursion, grammars that accept nothing.

#include <string_view>

#include "grammar/grammar.hpp"

namespace zmoe::grammar {

grammar compile_ebnf(std::string_view text, std::string_view root_rule = "root");

}  // namespace zmoe::grammar
