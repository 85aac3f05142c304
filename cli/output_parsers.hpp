#pragma once
// --tool-call-parser / --reasoning-parser (vLLM's flags): a parser name, "none", or "auto" (zmoe serve's default:
// the format the model's chat template shows, when it shows exactly one; docs/tool_calling.md).

#include <string>

namespace zmoe::cli {

struct output_parser_names {
    std::string tool_call;  ///< empty: none
    std::string reasoning;  ///< empty: none
};

/// Resolves the two flags. "auto" reads the chat template: `chat_template_file` when given, else the tokenizer
/// directory's chat_template.jinja or tokenizer_config.json's chat_template (every named template of a list).
/// Throws zmoe::error(invalid_argument) naming the flag for an unknown name.
output_parser_names resolve_output_parsers(const std::string& tool_call_flag, const std::string& reasoning_flag,
                                           const std::string& tokenizer_dir, const std::string& chat_template_file);

}  // namespace zmoe::cli
