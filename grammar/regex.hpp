#pragma once
// Regular expressions (and the bodies of EBNF rules) as a small syntax tree over Unicode code points, and its
// translation into NFA fragments over UTF-8 bytes. Supported: literals, escapes (\d \D \w \W \s \S \t \n \r \f \v
// \xHH \uHHHH and escaped punctuation), '.', classes [...] with ranges and negation, groups ( ) (?: ) (?<name> ),
// alternation, quantifiers ? * + {m} {m,} {m,n} (lazy forms match the same language). ^ and $ are allowed only at
// the very start and end. Refused, naming the construct: lookaround, backreferences, word boundaries, inline flags,
// possessive quantifiers.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/grammar.hpp"

namespace zmoe::grammar {

struct re_node {
    enum class kind : uint8_t { empty, chars, literal_bytes, concat, alternate, repeat, rule_ref };
    kind k = kind::empty;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  ///< chars: sorted disjoint code point ranges
    std::string text;                                   ///< literal_bytes: raw bytes; rule_ref: the rule's name
    std::vector<re_node> children;                      ///< concat, alternate: the parts; repeat: one child
    int32_t min = 0, max = 0;                           ///< repeat: bounds, max -1 for unbounded
};

/// How code points are written out.
enum class char_encoding : uint8_t {
    utf8,         ///< raw UTF-8
    json_string,  ///< inside a JSON string: '"', '\\' and control characters as their JSON escapes
};

struct parsed_regex {
    re_node root;
    bool anchored_start = false;  ///< the pattern began with ^
    bool anchored_end = false;    ///< the pattern ended with $
};

/// Parses `pattern`. Throws zmoe::error(invalid_argument) naming the unsupported construct or syntax error.
parsed_regex parse_regex(std::string_view pattern);

/// Sorted, merged code point ranges; complement within the Unicode scalar values.
std::vector<std::pair<uint32_t, uint32_t>> normalize_ranges(std::vector<std::pair<uint32_t, uint32_t>> r);
std::vector<std::pair<uint32_t, uint32_t>> complement_ranges(const std::vector<std::pair<uint32_t, uint32_t>>& r);

/// Emits `node` into `a` as a fragment. `resolve` maps a rule_ref's name to a rule id (may be empty when the tree
/// has no rule_ref).
fragment emit_regex(nfa& a, const re_node& node, char_encoding enc,
                    const std::function<int32_t(const std::string&)>& resolve = {});

/// Emits the JSON-string spelling of one code point range set (used by emit_regex and the JSON Schema compiler).
fragment emit_chars(nfa& a, const std::vector<std::pair<uint32_t, uint32_t>>& ranges, char_encoding enc);

/// The quantifiers ? * + {m} {m,} {m,n} following an atom at s[i], each wrapping `a` in a repeat node (none: `a`
/// unchanged), advancing i past them; the regex and EBNF parsers share it. A '{' that does not start a bound is left
/// where it is (a literal in a regex). With `regex_suffixes` a lazy '?' after a quantifier is taken (the same
/// language) and a possessive '+' refused. Throws zmoe::error(invalid_argument) for bounds n < m or above 10 000.
re_node parse_quantifiers(std::string_view s, size_t& i, re_node a, bool regex_suffixes);

/// Parses a regex escape after the backslash at `s[i]` (i points past '\\'); shared with the EBNF parser.
/// Returns the code point ranges it stands for and advances `i`.
std::vector<std::pair<uint32_t, uint32_t>> parse_escape(std::string_view s, size_t& i, bool in_class);

}  // namespace zmoe::grammar
