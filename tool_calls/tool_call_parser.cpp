#include "tool_calls/tool_call_parser.hpp"

#include "tool_calls/formats.hpp"

namespace zmoe::tool_calls {

std::optional<tool_call_format> tool_call_format_from_name(std::string_view name) {
    if (name == "hermes" || name == "qwen3") return tool_call_format::hermes;
    if (name == "deepseek_v3") return tool_call_format::deepseek_v3;
    if (name == "llama3_json" || name == "llama3") return tool_call_format::llama3_json;
    if (name == "mistral") return tool_call_format::mistral;
    return std::nullopt;
}

const char* tool_call_format_name(tool_call_format f) {
    switch (f) {
        case tool_call_format::hermes:
            return "hermes";
        case tool_call_format::deepseek_v3:
            return "deepseek_v3";
        case tool_call_format::llama3_json:
            return "llama3_json";
        case tool_call_format::mistral:
            return "mistral";
    }
    return "?";
}

std::unique_ptr<tool_call_parser> make_tool_call_parser(tool_call_format format, std::function<std::string()> make_id) {
    switch (format) {
        case tool_call_format::hermes:
            return make_hermes_parser(std::move(make_id));
        case tool_call_format::deepseek_v3:
            return make_deepseek_v3_parser(std::move(make_id));
        case tool_call_format::llama3_json:
            return make_llama3_json_parser(std::move(make_id));
        case tool_call_format::mistral:
            return make_mistral_parser(std::move(make_id));
    }
    return nullptr;
}

std::optional<tool_call_format> detect_tool_call_format(std::string_view t) {
    const auto has = [t](std::string_view s) { return t.find(s) != std::string_view::npos; };
    if (has("<｜tool▁calls▁begin｜>")) return tool_call_format::deepseek_v3;
    if (has("<tool_call>")) return tool_call_format::hermes;
    if (has("[TOOL_CALLS]")) return tool_call_format::mistral;
    if (has("<|python_tag|>") || (has("<|start_header_id|>") && has("\"parameters\"")))
        return tool_call_format::llama3_json;
    return std::nullopt;
}

}  // namespace zmoe::tool_calls
