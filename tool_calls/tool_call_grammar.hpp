#pragma once
// The grammar that constrains tool_choice "required" and a named function (vLLM builds the same from the tools'
// schemas): the output is one call, or with parallel_tool_calls one or more, written exactly as the format's parser
// reads them, each with a name from the tools (or the named one) and arguments valid against that function's
// `parameters` (json_schema_ebnf.hpp's subset). EBNF text in grammar/ebnf.hpp's dialect, for the sampler's grammar
// constraint (grammar_kind::ebnf). With a reasoning format, thinking may come first (DeepSeek-R1: must, since its
// output starts inside the thinking), as the reasoning parser splits it.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tool_calls/reasoning_parser.hpp"
#include "tool_calls/tool_call_parser.hpp"

namespace zmoe::tool_calls {

struct tool_call_grammar_request {
    tool_call_format format = tool_call_format::hermes;
    nlohmann::ordered_json tools;  ///< the request's tools: [{"type": "function", "function": {"name", "parameters"?}}]
    std::string only_function{};   ///< non-empty: calls of this function only (tool_choice named)
    bool parallel = true;          ///< one or more calls; false: exactly one
    std::optional<reasoning_format> reasoning{};
};

/// The EBNF text (root rule `root`). Throws zmoe::error(invalid_argument) naming the tool and what is refused (a
/// schema keyword outside the subset, an unknown function).
std::string tool_call_ebnf(const tool_call_grammar_request& request);

}  // namespace zmoe::tool_calls
