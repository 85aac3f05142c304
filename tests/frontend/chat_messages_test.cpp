// OpenAI chat messages normalised for a chat template as vLLM's OpenAI server prepares them, with zmoe's refusals
// (frontend/chat_messages.hpp). scripts/make_chat_fixtures.py holds the same rules in Python; the fixture test
// (chat_template_test.cpp) checks both agree through every template.

#include "frontend/chat_messages.hpp"

#include <gtest/gtest.h>

#include <string>

namespace zmoe {
namespace {

using jinja::json;

json one(const std::string& message, const chat_message_shape& shape = {}) {
    return normalize_chat_messages(json::array({json::parse(message)}), shape)[0];
}

// The field a refusal names (empty when nothing is refused).
std::string refused_field(const std::string& messages) {
    try {
        normalize_chat_messages(json::parse(messages));
    } catch (const chat_message_error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
        EXPECT_EQ(std::string(e.what()).rfind(e.field() + ": ", 0), 0u) << e.what();
        return e.field();
    }
    return {};
}

const chat_message_shape kOpenAI{.content = chat_content_format::openai};
const chat_message_shape kDeepSeek{
    .content = chat_content_format::string, .null_content = true, .string_arguments = true};

TEST(ChatMessages, StringFormatJoinsTextPartsWithNewlinesSkippingEmptyOnes) {
    const json m = one(R"({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": ""},
                          "plain", {"type": "input_text", "text": "b"}, {"type": "output_text", "text": "c"}]})");
    EXPECT_EQ(m, json::parse(R"({"role": "user", "content": "a\nplain\nb\nc"})"));
    EXPECT_EQ(one(R"({"role": "user", "content": []})")["content"], "");
    EXPECT_EQ(one(R"({"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]})")["content"], "no");
}

TEST(ChatMessages, OpenAIFormatKeepsEveryTextPartAsADict) {
    EXPECT_EQ(one(R"({"role": "user", "content": "hi"})", kOpenAI)["content"],
              json::parse(R"([{"type": "text", "text": "hi"}])"));
    EXPECT_EQ(one(R"({"role": "user", "content": ["a", {"type": "text", "text": ""}]})", kOpenAI)["content"],
              json::parse(R"([{"type": "text", "text": "a"}, {"type": "text", "text": ""}])"));
    EXPECT_EQ(one(R"({"role": "assistant", "content": null})", kOpenAI)["content"], json::array());
    // A tool result reaches the template as one string, its texts joined (empty ones included).
    EXPECT_EQ(one(R"({"role": "tool", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "b"}]})",
                  kOpenAI)["content"],
              "\nb");
    EXPECT_EQ(one(R"({"role": "tool", "content": null})", kOpenAI)["content"], "");
}

TEST(ChatMessages, NullOrMissingContentIsEmptyUnlessTheTemplateTestsForNone) {
    EXPECT_EQ(one(R"({"role": "assistant", "content": null})")["content"], "");
    EXPECT_EQ(one(R"({"role": "assistant"})")["content"], "");
    EXPECT_TRUE(one(R"({"role": "assistant", "content": null})", kDeepSeek)["content"].is_null());
    EXPECT_TRUE(one(R"({"role": "assistant"})", kDeepSeek)["content"].is_null());
    EXPECT_EQ(one(R"({"role": "assistant", "content": ""})", kDeepSeek)["content"], "");
}

TEST(ChatMessages, ToolCallArgumentsBecomeObjectsOrStayJsonText) {
    const std::string msg = R"({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [true, null]}"}},
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": {"x": "東京"}}},
        {"id": "c3", "type": "function", "function": {"name": "h", "arguments": " "}},
        {"id": "c4", "type": "function", "function": {"name": "k"}}]})";
    const json objects = one(msg)["tool_calls"];
    ASSERT_EQ(objects.size(), 4u);
    EXPECT_EQ(objects[0], json::parse(R"({"id": "c1", "type": "function",
                                          "function": {"name": "f", "arguments": {"b": 1, "a": [true, null]}}})"));
    EXPECT_EQ(objects[0]["function"]["arguments"].begin().key(), "b");  // the client's key order
    EXPECT_EQ(objects[1]["function"]["arguments"], json::parse(R"({"x": "東京"})"));
    EXPECT_EQ(objects[2]["function"]["arguments"], json::object());
    EXPECT_EQ(objects[3]["function"]["arguments"], json::object());
    // For templates that concatenate the arguments: JSON text, the client's own text kept as sent, objects
    // written as Python's json.dumps(ensure_ascii=False) writes them.
    const json text = one(msg, kDeepSeek)["tool_calls"];
    EXPECT_EQ(text[0]["function"]["arguments"], "{\"b\": 1, \"a\": [true, null]}");
    EXPECT_EQ(text[1]["function"]["arguments"], "{\"x\": \"東京\"}");
    EXPECT_EQ(text[2]["function"]["arguments"], "{}");
    EXPECT_EQ(text[3]["function"]["arguments"], "{}");
    // An empty list of tool calls is dropped (the template takes its plain assistant path).
    EXPECT_FALSE(one(R"({"role": "assistant", "content": "x", "tool_calls": []})").contains("tool_calls"));
    EXPECT_FALSE(one(R"({"role": "assistant", "content": "x", "tool_calls": null})").contains("tool_calls"));
}

TEST(ChatMessages, KeepsToolCallIdNameAndReasoningInVllmsKeyOrder) {
    const json tool = one(R"({"name": "get_weather", "content": "21C", "tool_call_id": "c1", "role": "tool"})");
    EXPECT_EQ(tool.dump(), R"({"role":"tool","content":"21C","tool_call_id":"c1","name":"get_weather"})");
    const json a = one(R"({"role": "assistant", "content": "x", "reasoning_content": "because"})");
    EXPECT_EQ(a.dump(), R"({"role":"assistant","content":"x","reasoning":"because","reasoning_content":"because"})");
    EXPECT_EQ(one(R"({"role": "assistant", "content": "x", "reasoning": "r", "reasoning_content": "r"})")["reasoning"],
              "r");
    // What OpenAI's SDKs echo back in an assistant message, carrying nothing, is dropped.
    const json echoed = one(R"({"role": "assistant", "content": "x", "refusal": null, "annotations": [],
                                "audio": null, "function_call": null})");
    EXPECT_EQ(echoed.dump(), R"({"role":"assistant","content":"x"})");
    for (const char* role : {"system", "developer", "user", "assistant", "tool", "function"})
        EXPECT_EQ(one(json{{"role", role}, {"content", "c"}}.dump())["role"], role);
}

TEST(ChatMessages, RefusalsNameTheirField) {
    EXPECT_EQ(refused_field(R"([{"role": "user", "content": "a"}, {"role": "user", "content": [
                  {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}])"),
              "messages[1].content[1].type");
    for (const char* media : {"image_url", "input_audio", "video_url", "file", "audio_url", "input_image"})
        EXPECT_EQ(refused_field(std::string(R"([{"role": "user", "content": [{"type": ")") + media + R"("}]}])"),
                  "messages[0].content[0].type")
            << media;
    EXPECT_EQ(refused_field(R"([{"role": "user", "content": [{"type": "mystery"}]}])"), "messages[0].content[0].type");
    EXPECT_EQ(refused_field(R"([{"role": "user", "content": [{"text": "no type"}]}])"), "messages[0].content[0].type");
    EXPECT_EQ(refused_field(R"([{"role": "user", "content": [{"type": "text"}]}])"), "messages[0].content[0].text");
    EXPECT_EQ(refused_field(R"([{"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {}}]}])"),
              "messages[0].content[0].cache_control");
    EXPECT_EQ(refused_field(R"([{"role": "user", "content": [7]}])"), "messages[0].content[0]");
    EXPECT_EQ(refused_field(R"([{"role": "user", "content": 7}])"), "messages[0].content");
    EXPECT_EQ(refused_field(R"([{"role": "ipython", "content": "x"}])"), "messages[0].role");
    EXPECT_EQ(refused_field(R"([{"content": "x"}])"), "messages[0].role");
    EXPECT_EQ(refused_field(R"([3])"), "messages[0]");
    EXPECT_EQ(refused_field(R"([{"role": "user", "content": "x", "tool_calls": []}])"), "messages[0].tool_calls");
    EXPECT_EQ(refused_field(R"([{"role": "user", "content": "x", "tool_call_id": "c"}])"), "messages[0].tool_call_id");
    EXPECT_EQ(refused_field(R"([{"role": "user", "content": "x", "extra": 1}])"), "messages[0].extra");
    EXPECT_EQ(refused_field(R"([{"role": "user", "content": "x", "name": 5}])"), "messages[0].name");
    EXPECT_EQ(refused_field(R"([{"role": "assistant", "content": "x", "refusal": "I refuse"}])"),
              "messages[0].refusal");
    EXPECT_EQ(refused_field(R"([{"role": "assistant", "content": "x", "reasoning": "a", "reasoning_content": "b"}])"),
              "messages[0].reasoning_content");
    EXPECT_EQ(refused_field(R"([{"role": "tool", "content": "x", "tool_call_id": 3}])"), "messages[0].tool_call_id");
    const std::string call = R"([{"role": "assistant", "content": null, "tool_calls": )";
    EXPECT_EQ(refused_field(call + R"({}}])"), "messages[0].tool_calls");
    EXPECT_EQ(refused_field(call + R"([{"type": "function"}]}])"), "messages[0].tool_calls[0].function");
    EXPECT_EQ(refused_field(call + R"([{"function": {"arguments": "{}"}}]}])"),
              "messages[0].tool_calls[0].function.name");
    EXPECT_EQ(refused_field(call + R"([{"type": "custom", "function": {"name": "f"}}]}])"),
              "messages[0].tool_calls[0].type");
    EXPECT_EQ(refused_field(call + R"([{"function": {"name": "f", "arguments": "{oops"}}]}])"),
              "messages[0].tool_calls[0].function.arguments");
    EXPECT_EQ(refused_field(call + R"([{"function": {"name": "f", "arguments": 3}}]}])"),
              "messages[0].tool_calls[0].function.arguments");
    EXPECT_EQ(refused_field(call + R"([{"function": {"name": "f", "strict": true}}]}])"),
              "messages[0].tool_calls[0].function.strict");
    EXPECT_EQ(refused_field(R"({"role": "user"})"), "messages");
    EXPECT_EQ(refused_field(R"([{"role": "user", "content": "fine"}])"), "");
}

}  // namespace
}  // namespace zmoe
