// Examples of each format and of the rules for malformed calls (docs/tool_calling.md), and format detection from
// the fixture chat templates.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tool_calls/output_parser.hpp"

namespace zmoe::tool_calls {
namespace {

parsed_output parse(tool_call_format f, const std::string& text, std::optional<reasoning_format> r = std::nullopt) {
    return output_parser::parse(text, {.tools = f, .reasoning = r, .make_id = {}});
}

TEST(ToolCallParser, HermesCallsAndText) {
    const parsed_output p = parse(tool_call_format::hermes,
                                  "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                  "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
                                  "\"arguments\": {}}\n</tool_call>");
    EXPECT_EQ(p.content, "Let me check.");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Paris\"}");
    EXPECT_EQ(p.calls[1].name, "get_time");
    EXPECT_EQ(p.calls[1].arguments, "{}");
}

TEST(ToolCallParser, HermesMalformedIsContent) {
    const std::string text = "a <tool_call>not json</tool_call> b <tool_call>{\"name\": 1}</tool_call>";
    const parsed_output p = parse(tool_call_format::hermes, text);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty());
}

TEST(ToolCallParser, HermesTruncatedCallKeepsWhatWasWritten) {
    const parsed_output p =
        parse(tool_call_format::hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2");
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].arguments, "{\"a\": [1, 2");
    // Cut before the call is committed: content.
    EXPECT_EQ(parse(tool_call_format::hermes, "<tool_call>\n{\"name\": \"f").content, "<tool_call>\n{\"name\": \"f");
}

TEST(ToolCallParser, HermesArgumentsStreamBeforeTheCallEnds) {
    output_parser p({.tools = tool_call_format::hermes, .reasoning = std::nullopt, .make_id = [] { return "id1"; }});
    auto ev = p.feed("<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"hel");
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0], (parse_event{.kind = event_kind::call_start, .call_index = 0, .id = "id1", .text = "f"}));
    EXPECT_EQ(ev[1].kind, event_kind::call_arguments);
    EXPECT_EQ(ev[1].text, "{\"q\": \"hel");
    ev = p.feed("lo\"}}</tool_call>");
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].text, "lo\"}");
}

TEST(ToolCallParser, ThinkingHidesMarkersAndCallAfterIsFound) {
    const parsed_output p = parse(tool_call_format::hermes,
                                  "<think>maybe <tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>?</think>"
                                  "\n\n<tool_call>{\"name\": \"y\", \"arguments\": {\"k\": 1}}</tool_call>",
                                  reasoning_format::qwen3);
    EXPECT_EQ(p.reasoning, "maybe <tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>?");
    EXPECT_EQ(p.content, "");
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].name, "y");
}

TEST(ToolCallParser, DeepSeekV3) {
    const std::string calls =
        "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
        "```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    const parsed_output v3 = parse(tool_call_format::deepseek_v3, calls);
    EXPECT_EQ(v3.content, "Checking.");
    ASSERT_EQ(v3.calls.size(), 2u);
    EXPECT_EQ(v3.calls[0].name, "get_weather");
    EXPECT_EQ(v3.calls[0].arguments, "{\"city\": \"Paris\"}");
    EXPECT_EQ(v3.calls[1].arguments, "{}");
    // R1 starts inside the thinking: without </think> everything is thinking, calls included.
    const parsed_output p = parse(tool_call_format::deepseek_v3, calls, reasoning_format::deepseek_r1);
    EXPECT_EQ(p.reasoning, calls);
    EXPECT_TRUE(p.calls.empty());
    const parsed_output q = parse(tool_call_format::deepseek_v3,
                                  "ok</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n"
                                  "```json\n{\"a\": \"b\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                                  reasoning_format::deepseek_r1);
    EXPECT_EQ(q.reasoning, "ok");
    EXPECT_EQ(q.content, "");
    ASSERT_EQ(q.calls.size(), 1u);
    EXPECT_EQ(q.calls[0].name, "f");
    EXPECT_EQ(q.calls[0].arguments, "{\"a\": \"b\"}");
}

TEST(ToolCallParser, Llama3Json) {
    const parsed_output p = parse(tool_call_format::llama3_json,
                                  "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}; {\"name\": \"g\", "
                                  "\"parameters\": {}}");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].arguments, "{\"x\": 1}");
    EXPECT_EQ(p.calls[1].name, "g");
    EXPECT_EQ(p.content, "");
    // A JSON answer that is not a call is content.
    EXPECT_EQ(parse(tool_call_format::llama3_json, "{\"answer\": 42}").content, "{\"answer\": 42}");
    EXPECT_EQ(parse(tool_call_format::llama3_json, "The answer is {x}.").content, "The answer is {x}.");
}

TEST(ToolCallParser, Mistral) {
    const parsed_output p =
        parse(tool_call_format::mistral,
              "Sure. [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": \"y\"}}, {\"arguments\": "
              "{\"z\": [1]}, \"name\": \"g\"}]");
    EXPECT_EQ(p.content, "Sure.");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].arguments, "{\"x\": \"y\"}");
    EXPECT_EQ(p.calls[1].arguments, "{\"z\":[1]}");  // read whole (name not first): compact JSON
    EXPECT_EQ(parse(tool_call_format::mistral, "[TOOL_CALLS] oops").content, "[TOOL_CALLS] oops");
}

TEST(ToolCallParser, NamesAndUnknownNames) {
    for (const char* n : {"hermes", "deepseek_v3", "llama3_json", "mistral"})
        EXPECT_EQ(tool_call_format_name(*tool_call_format_from_name(n)), std::string(n));
    EXPECT_FALSE(tool_call_format_from_name("pythonic"));
    EXPECT_EQ(reasoning_format_name(*reasoning_format_from_name("deepseek_r1")), std::string("deepseek_r1"));
    EXPECT_FALSE(reasoning_format_from_name("granite"));
}

std::string read(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

TEST(ToolCallParser, DetectsFormatsFromFixtureTemplates) {
    const std::string dir = std::string(ZMOE_SOURCE_DIR) + "/tests/fixtures/chat/templates/";
    const std::string r1 = read(dir + "deepseek_r1/chat_template.jinja");
    ASSERT_FALSE(r1.empty());
    EXPECT_EQ(detect_tool_call_format(r1), tool_call_format::deepseek_v3);
    EXPECT_EQ(detect_reasoning_format(r1), reasoning_format::deepseek_r1);
    const std::string llama = read(dir + "llama31_tools/chat_template.jinja");
    EXPECT_EQ(detect_tool_call_format(llama), tool_call_format::llama3_json);
    EXPECT_FALSE(detect_reasoning_format(llama));
    EXPECT_FALSE(detect_tool_call_format(read(dir + "gemma/chat_template.jinja")));
}

}  // namespace
}  // namespace zmoe::tool_calls
