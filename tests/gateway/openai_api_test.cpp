// OpenAI request bodies to client_generate, and response/chunk/error objects, against OpenAI's documented shapes.

#include "gateway/openai_api.hpp"

#include <gtest/gtest.h>

namespace zmoe::gateway {
namespace {

api_error refusal(const std::string& body, endpoint_kind kind = endpoint_kind::completion) {
    try {
        parse_openai_request(body, kind);
    } catch (const api_error& e) {
        return e;
    }
    ADD_FAILURE() << "accepted: " << body;
    return {};
}

TEST(OpenaiApi, CompletionFieldsReachTheGenerateRequest) {
    const auto r = parse_openai_request(
        R"({"model": "m", "prompt": "Hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 5, "seed": 3,
            "stop": ["\n", "x"], "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": true})",
        endpoint_kind::completion);
    EXPECT_EQ(std::get<std::string>(r.generate.prompt), "Hi");
    EXPECT_EQ(r.generate.max_tokens, 7u);
    EXPECT_EQ(r.generate.temperature, std::optional<float>(0.5f));
    EXPECT_EQ(r.generate.top_p, std::optional<float>(0.9f));
    EXPECT_EQ(r.generate.top_k, std::optional<int32_t>(5));
    EXPECT_EQ(r.generate.seed, 3u);
    EXPECT_EQ(r.generate.stop, (std::vector<std::string>{"\n", "x"}));
    EXPECT_TRUE(r.generate.ignore_eos && r.stream && r.generate.stream && r.include_usage);
    EXPECT_EQ(r.model, "m");
    EXPECT_TRUE(r.generate.chat.empty());
    const auto ids = parse_openai_request(R"({"prompt": [1, 2, 3]})", endpoint_kind::completion);
    EXPECT_EQ(std::get<std::vector<int32_t>>(ids.generate.prompt), (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(ids.generate.max_tokens, 16u);  // OpenAI's default for completions
    // Sampling fields left out stay nil, so the model's generation_config.json defaults apply in the frontend.
    EXPECT_FALSE(ids.generate.temperature.has_value() || ids.generate.top_p.has_value() ||
                 ids.generate.top_k.has_value());
}

TEST(OpenaiApi, ChatRequestCarriesMessagesToolsAndKwargsInOrder) {
    const auto r = parse_openai_request(
        R"({"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function", "function": {"name": "f"}}],
            "chat_template_kwargs": {"enable_thinking": false}, "max_completion_tokens": 9})",
        endpoint_kind::chat);
    EXPECT_EQ(std::get<std::string>(r.generate.prompt), "");
    EXPECT_EQ(
        r.generate.chat,
        R"({"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true,)"
        R"("tools":[{"type":"function","function":{"name":"f"}}],"chat_template_kwargs":{"enable_thinking":false}})");
    EXPECT_EQ(r.generate.max_tokens, 9u);
}

TEST(OpenaiApi, BadRequestsNameTheField) {
    EXPECT_EQ(refusal("{not json").status, 400);
    EXPECT_EQ(refusal("[1]").status, 400);
    EXPECT_EQ(refusal("{}").param, "prompt");
    EXPECT_EQ(refusal(R"({"prompt": 5})").param, "prompt");
    EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 0})").param, "max_tokens");
    EXPECT_EQ(refusal(R"({"prompt": "x", "temperature": "hot"})").param, "temperature");
    EXPECT_EQ(refusal(R"({"prompt": "x", "top_p": 0})").param, "top_p");
    EXPECT_EQ(refusal(R"({"prompt": "x", "n": 2})").param, "n");
    EXPECT_EQ(refusal(R"({"prompt": "x", "stop": [1]})").param, "stop");
    EXPECT_EQ(refusal(R"({"prompt": "x", "stream_options": {"include_usage": true}})").param, "stream_options");
    EXPECT_EQ(refusal(R"({"messages": []})", endpoint_kind::chat).param, "messages");
    EXPECT_EQ(refusal(R"({"messages": [{"content": "no role"}]})", endpoint_kind::chat).param, "messages");
}

TEST(OpenaiApi, ErrorBodyIsOpenAIs) {
    const auto j =
        ojson::parse(error_body({.status = 400, .message = "bad", .type = "invalid_request_error", .param = "n"}));
    EXPECT_EQ(j["error"]["message"], "bad");
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["param"], "n");
    EXPECT_EQ(j["error"]["code"], 400);
    EXPECT_EQ(error_from_errc(errc::invalid_argument, "x").status, 400);
    EXPECT_EQ(error_from_errc(errc::peer_dead, "x").status, 503);
    EXPECT_EQ(error_from_errc(errc::internal, "x").status, 500);
    EXPECT_EQ(error_from_errc(errc::overloaded, "x").status, 429);
}

TEST(OpenaiApi, ResponseAndChunkShapes) {
    openai_request chat;
    chat.kind = endpoint_kind::chat;
    chat.model = "m";
    const auto resp = response_object(chat, "id1", 10, "Hello", finish_reason::length, 4, 2);
    EXPECT_EQ(resp["object"], "chat.completion");
    EXPECT_EQ(resp["choices"][0]["message"]["content"], "Hello");
    EXPECT_EQ(resp["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(resp["usage"]["total_tokens"], 6);
    const auto first = chunk_object(chat, "id1", 10, "He", true, false, finish_reason::none);
    EXPECT_EQ(first["object"], "chat.completion.chunk");
    EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
    EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
    const auto last = chunk_object(chat, "id1", 10, "", false, true, finish_reason::stop);
    EXPECT_FALSE(last["choices"][0]["delta"].contains("role"));
    EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
    const auto usage = usage_chunk(chat, "id1", 10, 4, 2);
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
    openai_request comp;
    comp.model = "m";
    EXPECT_EQ(response_object(comp, "c", 1, "t", finish_reason::stop, 1, 1)["choices"][0]["text"], "t");
    EXPECT_EQ(sse_event(ojson{{"a", 1}}), "data: {\"a\":1}\n\n");
}

}  // namespace
}  // namespace zmoe::gateway
