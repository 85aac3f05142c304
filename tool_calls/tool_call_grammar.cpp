#include "tool_calls/tool_call_grammar.hpp"

#include "base/error.hpp"
#include "tool_calls/json_schema_ebnf.hpp"

namespace zmoe::tool_calls {

using ojson = nlohmann::ordered_json;

namespace {

/// How each format writes one call and joins several (what its parser in tool_calls/ reads).
struct layout {
    std::string before_all, between, after_all;
    std::string call_open;  // then the name part
    bool json_name = true;  // the name as a JSON string ("\"f\"") or raw
    std::string name_to_args;
    std::string call_close;
};

layout layout_of(tool_call_format f) {
    switch (f) {
        case tool_call_format::hermes:
            return {.before_all = "",
                    .between = "\n",
                    .after_all = "",
                    .call_open = "<tool_call>\n{\"name\": ",
                    .json_name = true,
                    .name_to_args = ", \"arguments\": ",
                    .call_close = "}\n</tool_call>"};
        case tool_call_format::deepseek_v3:
            return {.before_all = "<｜tool▁calls▁begin｜>",
                    .between = "",
                    .after_all = "<｜tool▁calls▁end｜>",
                    .call_open = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>",
                    .json_name = false,
                    .name_to_args = "\n```json\n",
                    .call_close = "\n```<｜tool▁call▁end｜>"};
        case tool_call_format::llama3_json:
            return {.before_all = "",
                    .between = "; ",
                    .after_all = "",
                    .call_open = "{\"name\": ",
                    .json_name = true,
                    .name_to_args = ", \"parameters\": ",
                    .call_close = "}"};
        case tool_call_format::mistral:
            return {.before_all = "[TOOL_CALLS][",
                    .between = ", ",
                    .after_all = "]",
                    .call_open = "{\"name\": ",
                    .json_name = true,
                    .name_to_args = ", \"arguments\": ",
                    .call_close = "}"};
    }
    return {};
}

}  // namespace

std::string tool_call_ebnf(const tool_call_grammar_request& request) {
    if (!request.tools.is_array() || request.tools.empty())
        throw error(errc::invalid_argument, "tool-call grammar: no tools");
    const layout l = layout_of(request.format);
    using lit = json_schema_ebnf;
    json_schema_ebnf schemas;
    std::string calls;
    for (size_t i = 0; i < request.tools.size(); ++i) {
        const ojson& fn = request.tools[i]["function"];
        const std::string name = fn["name"].get<std::string>();
        if (!request.only_function.empty() && name != request.only_function) continue;
        const std::string where = "tools[" + std::to_string(i) + "].function.parameters";
        const std::string args = fn.contains("parameters") && !fn["parameters"].is_null()
                                     ? schemas.add(fn["parameters"], "args" + std::to_string(i), where)
                                     : lit::literal("{}");
        const std::string shown =
            l.json_name ? ojson(name).dump(-1, ' ', false, ojson::error_handler_t::replace) : name;
        calls += (calls.empty() ? "" : " | ") + std::string("(") + lit::literal(l.call_open + shown + l.name_to_args) +
                 " " + args + " " + lit::literal(l.call_close) + ")";
    }
    if (calls.empty())
        throw error(errc::invalid_argument, "tool-call grammar: no tool is named '" + request.only_function + "'");
    std::string root = "root ::= ";
    if (request.reasoning == reasoning_format::qwen3)
        root += "(\"<think>\" thinking \"</think>\" [ \\n]{0,4})? ";
    else if (request.reasoning == reasoning_format::deepseek_r1)
        root += "thinking \"</think>\" [ \\n]{0,4} ";
    if (!l.before_all.empty()) root += lit::literal(l.before_all) + " ";
    root += "call";
    if (request.parallel) root += " (" + (l.between.empty() ? "" : lit::literal(l.between) + " ") + "call)*";
    if (!l.after_all.empty()) root += " " + lit::literal(l.after_all);
    std::string text = root + "\ncall ::= " + calls + "\n";
    // Thinking is free text (a "</think>" inside it only makes the grammar ambiguous, which the matcher allows).
    if (request.reasoning) text += "thinking ::= .*\n";
    return text + schemas.text();
}

}  // namespace zmoe::tool_calls
