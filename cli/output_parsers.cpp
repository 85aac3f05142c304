#include "cli/output_parsers.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.hpp"
#include "tool_calls/reasoning_parser.hpp"
#include "tool_calls/tool_call_parser.hpp"

namespace zmoe::cli {

namespace {

std::string read_file(const std::filesystem::path& p) {
    std::ifstream f(p);
    if (!f) return {};
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

/// Every chat template text the tokenizer directory holds (empty when none).
std::string template_text(const std::string& tokenizer_dir, const std::string& chat_template_file) {
    if (!chat_template_file.empty()) return read_file(chat_template_file);
    std::filesystem::path dir(tokenizer_dir);
    if (std::filesystem::is_regular_file(dir)) dir = dir.parent_path();
    if (std::string t = read_file(dir / "chat_template.jinja"); !t.empty()) return t;
    const std::string config = read_file(dir / "tokenizer_config.json");
    if (config.empty()) return {};
    const nlohmann::json j = nlohmann::json::parse(config, nullptr, false);
    if (!j.is_object() || !j.contains("chat_template")) return {};
    const nlohmann::json& t = j["chat_template"];
    if (t.is_string()) return t.get<std::string>();
    std::string all;
    if (t.is_array())
        for (const auto& e : t)
            if (e.is_object() && e.contains("template") && e["template"].is_string())
                all += e["template"].get<std::string>();
    return all;
}

}  // namespace

output_parser_names resolve_output_parsers(const std::string& tool_call_flag, const std::string& reasoning_flag,
                                           const std::string& tokenizer_dir, const std::string& chat_template_file) {
    output_parser_names names;
    std::string text;
    bool read = false;
    const auto tmpl = [&]() -> const std::string& {
        if (!read) text = template_text(tokenizer_dir, chat_template_file);
        read = true;
        return text;
    };
    if (tool_call_flag == "auto") {
        if (auto f = tool_calls::detect_tool_call_format(tmpl()))
            names.tool_call = tool_calls::tool_call_format_name(*f);
    } else if (tool_call_flag != "none" && !tool_call_flag.empty()) {
        const auto f = tool_calls::tool_call_format_from_name(tool_call_flag);
        if (!f)
            throw error(errc::invalid_argument,
                        "--tool-call-parser " + tool_call_flag +
                            ": not one of hermes, deepseek_v3, llama3_json, mistral, auto, none");
        names.tool_call = tool_calls::tool_call_format_name(*f);
    }
    if (reasoning_flag == "auto") {
        if (auto f = tool_calls::detect_reasoning_format(tmpl()))
            names.reasoning = tool_calls::reasoning_format_name(*f);
    } else if (reasoning_flag != "none" && !reasoning_flag.empty()) {
        const auto f = tool_calls::reasoning_format_from_name(reasoning_flag);
        if (!f)
            throw error(errc::invalid_argument,
                        "--reasoning-parser " + reasoning_flag + ": not one of qwen3, deepseek_r1, auto, none");
        names.reasoning = tool_calls::reasoning_format_name(*f);
    }
    return names;
}

}  // namespace zmoe::cli
