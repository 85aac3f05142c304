#pragma once
// The parsers of each format (hermes_parser.cpp, deepseek_v3_parser.cpp, llama3_json_parser.cpp,
// mistral_parser.cpp); tool_call_parser.hpp is the interface.

#include "tool_calls/tool_call_parser.hpp"

namespace zmoe::tool_calls {

std::unique_ptr<tool_call_parser> make_hermes_parser(std::function<std::string()> make_id);
std::unique_ptr<tool_call_parser> make_deepseek_v3_parser(std::function<std::string()> make_id);
std::unique_ptr<tool_call_parser> make_llama3_json_parser(std::function<std::string()> make_id);
std::unique_ptr<tool_call_parser> make_mistral_parser(std::function<std::string()> make_id);

}  // namespace zmoe::tool_calls
