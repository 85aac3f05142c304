// Chat templates rendered exactly as Hugging Face renders them: every conversation of
// tests/fixtures/chat/conversations.jsonl through every template (the three fetched tokenizers' and the ones
// under tests/fixtures/chat/templates), its messages normalised as vLLM's OpenAI server does, equals jinja2's
// rendering written by scripts/make_chat_fixtures.py, raises where jinja2 raised, or refuses the message field
// the script refused.

#include "frontend/chat_template.hpp"

#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace zmoe {
namespace {

namespace fs = std::filesystem;
using jinja::json;

const fs::path kChatFixtures = fs::path(ZMOE_FIXTURES_DIR) / "chat";

std::vector<json> read_jsonl(const fs::path& p) {
    std::ifstream in(p);
    std::vector<json> out;
    std::string line;
    while (std::getline(in, line))
        if (!line.empty()) out.push_back(json::parse(line));
    return out;
}

fs::path template_dir(const std::string& name) {
    const fs::path fetched = fs::path(ZMOE_SOURCE_DIR) / "third_party" / "tokenizers" / name;
    return fs::exists(fetched) ? fetched : kChatFixtures / "templates" / name;
}

// The clock the fixture script gives strftime_now: 2026-01-15 10:30 local time.
std::chrono::system_clock::time_point fixed_now() {
    std::tm tm{};
    tm.tm_year = 2026 - 1900;
    tm.tm_mon = 0;
    tm.tm_mday = 15;
    tm.tm_hour = 10;
    tm.tm_min = 30;
    tm.tm_isdst = -1;
    return std::chrono::system_clock::from_time_t(std::mktime(&tm));
}

class ChatTemplateFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateFixture, RendersAsJinja2) {
    const auto convs = read_jsonl(kChatFixtures / "conversations.jsonl");
    const auto expected = read_jsonl(kChatFixtures / "expected" / (GetParam() + ".jsonl"));
    ASSERT_FALSE(convs.empty());
    ASSERT_EQ(convs.size(), expected.size());
    auto tmpl = chat_template::from_tokenizer(template_dir(GetParam()).string());
    ASSERT_TRUE(tmpl.has_value());
    tmpl->set_clock(fixed_now);
    for (size_t i = 0; i < convs.size(); ++i) {
        const chat_request req = parse_chat_request(convs[i]);
        if (expected[i].contains("field")) {  // a message refused before the template, naming its field
            try {
                tmpl->render(req);
                ADD_FAILURE() << "conversation " << i << ": expected a chat_message_error";
            } catch (const chat_message_error& e) {
                EXPECT_EQ(e.field(), expected[i]["field"].get<std::string>()) << "conversation " << i;
                EXPECT_EQ(e.code(), errc::invalid_argument);
            }
            continue;
        }
        if (expected[i].contains("error")) {
            EXPECT_THROW(tmpl->render(req), jinja::render_error) << "conversation " << i;
            continue;
        }
        std::string got;
        ASSERT_NO_THROW(got = tmpl->render(req)) << "conversation " << i;
        EXPECT_EQ(got, expected[i]["prompt"].get<std::string>()) << "conversation " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateFixture,
                         ::testing::Values("qwen3", "deepseek_v3", "llama3", "deepseek_r1", "features", "gemma",
                                           "llama31_tools", "mistral", "content_parts"));

TEST(ChatTemplate, RaiseExceptionCarriesTheTemplatesMessage) {
    const chat_template tmpl(R"({{ raise_exception('roles must alternate') }})", json::object());
    try {
        tmpl.render(chat_request{});
        FAIL() << "expected a render_error";
    } catch (const jinja::render_error& e) {
        EXPECT_STREQ(e.what(), "roles must alternate");
    }
}

TEST(ChatTemplate, PassesSpecialTokensKwargsAndNoneTools) {
    const chat_template tmpl(
        "{{ bos_token }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|{{ flavour }}",
        json{{"bos_token", "<s>"}});
    chat_request req;
    req.add_generation_prompt = true;
    req.chat_template_kwargs = json{{"flavour", "mint"}};
    EXPECT_EQ(tmpl.render(req), "<s>|True|True|True|mint");
}

TEST(ChatTemplate, OverrideFileReplacesTheTokenizersTemplate) {
    const fs::path file = fs::temp_directory_path() / "zmoe_chat_template_override.jinja";
    std::ofstream(file) << "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ eos_token }}\n";
    auto tmpl = chat_template::from_tokenizer(template_dir("qwen3").string(), file.string());
    fs::remove(file);
    ASSERT_TRUE(tmpl.has_value());
    chat_request req;
    req.messages = json::parse(R"([{"role": "user", "content": "hi"}])");
    EXPECT_EQ(tmpl->render(req), "[user:hi]<|im_end|>");
}

TEST(ChatTemplate, ParseRequestRejectsBadFields) {
    EXPECT_THROW(parse_chat_request(json::parse(R"({"messages": "hi"})")), error);
    EXPECT_THROW(parse_chat_request(json::parse(R"({"messages": [], "tools": {}})")), error);
    EXPECT_THROW(parse_chat_request(json::parse(R"({"messages": [], "add_generation_prompt": 1})")), error);
    EXPECT_THROW(parse_chat_request(json::parse(R"({"messages": [], "chat_template_kwargs": []})")), error);
    const auto ok = parse_chat_request(json::parse(R"({"messages": [], "add_generation_prompt": true})"));
    EXPECT_TRUE(ok.add_generation_prompt);
    EXPECT_TRUE(ok.tools.is_null());
    // Messages are checked when rendered (normalize_chat_messages), naming the field.
    const chat_template tmpl("{{ messages | length }}", json::object());
    try {
        tmpl.render(parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "hi"}, 1]})")));
        FAIL() << "expected a chat_message_error";
    } catch (const chat_message_error& e) {
        EXPECT_EQ(e.field(), "messages[1]");
    }
}

// The two requests of issue 26 that Qwen3's template refused before the messages were normalised: content as a
// list of parts, and an assistant turn with content null and tool_calls followed by a tool result.
TEST(ChatTemplate, Qwen3RendersContentPartsAndToolCallRoundTrips) {
    auto tmpl = chat_template::from_tokenizer(template_dir("qwen3").string());
    ASSERT_TRUE(tmpl.has_value());
    chat_request parts;
    parts.messages = json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])");
    parts.add_generation_prompt = true;
    EXPECT_EQ(tmpl->render(parts), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");

    chat_request tools;
    tools.messages = json::parse(R"([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "21C"}])");
    tools.add_generation_prompt = true;
    EXPECT_EQ(tmpl->render(tools),
              "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
              "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
              "<|im_start|>user\n<tool_response>\n21C\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace zmoe
