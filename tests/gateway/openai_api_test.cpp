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

TEST(OpenaiApi, SamplingExtrasReachTheGenerateRequest) {
    const auto r = parse_openai_request(
        R"({"prompt": "Hi", "max_tokens": 9, "min_tokens": 2, "top_k": -1, "min_p": 0.1, "repetition_penalty": 1.2,
            "presence_penalty": 0.5, "frequency_penalty": -0.5, "stop_token_ids": [7, 8], "logit_bias": {"5": -100,
            "12": 3.5}, "logprobs": 3, "n": 3, "best_of": 3, "seed": 40})",
        endpoint_kind::completion);
    const client_generate& g = r.generate;
    EXPECT_EQ(g.min_tokens, 2u);
    EXPECT_EQ(g.top_k, std::optional<int32_t>(-1));
    EXPECT_EQ(g.min_p, std::optional<float>(0.1f));
    EXPECT_EQ(g.repetition_penalty, std::optional<float>(1.2f));
    EXPECT_EQ(g.presence_penalty, 0.5f);
    EXPECT_EQ(g.frequency_penalty, -0.5f);
    EXPECT_EQ(g.stop_token_ids, (std::vector<int32_t>{7, 8}));
    EXPECT_EQ(g.logit_bias, (std::vector<std::pair<int32_t, float>>{{5, -100.f}, {12, 3.5f}}));
    EXPECT_EQ(g.logprobs, std::optional<uint32_t>(3));
    EXPECT_TRUE(r.logprobs);
    // n reaches the protocol as it is (the frontend seeds choice i with seed + i).
    EXPECT_EQ(g.n, 3u);
    EXPECT_EQ(g.seed, std::optional<uint64_t>(40));
    // Chat: logprobs is a boolean, top_logprobs the count.
    const auto c = parse_openai_request(R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true,
                                            "top_logprobs": 4})",
                                        endpoint_kind::chat);
    EXPECT_TRUE(c.logprobs);
    EXPECT_EQ(c.generate.logprobs, std::optional<uint32_t>(4));
    const auto plain =
        parse_openai_request(R"({"messages": [{"role": "user", "content": "Hi"}]})", endpoint_kind::chat);
    EXPECT_FALSE(plain.logprobs || plain.generate.logprobs.has_value());
    EXPECT_EQ(plain.generate.n, 1u);
    EXPECT_TRUE(plain.generate.cache_salt.empty());
    // vLLM's cache_salt, on both routes: only requests with the same salt share prefix-cache blocks.
    EXPECT_EQ(parse_openai_request(R"({"prompt": "Hi", "cache_salt": "tenant-7"})", endpoint_kind::completion)
                  .generate.cache_salt,
              "tenant-7");
    EXPECT_EQ(parse_openai_request(R"({"messages": [{"role": "user", "content": "Hi"}], "cache_salt": "s"})",
                                   endpoint_kind::chat)
                  .generate.cache_salt,
              "s");
}

TEST(OpenaiApi, LogprobsObjects) {
    const std::vector<int32_t> ids = {1, 2};
    std::vector<token_logprobs> lps(2);
    lps[0] = {.logprob = -0.5f, .top_ids = {1, 3}, .top_logprobs = {-0.5f, -1.5f}};
    lps[1] = {.logprob = -2.f, .top_ids = {4, 2}, .top_logprobs = {-0.25f, -2.f}};
    const auto piece = [](int32_t id) {
        return std::string(id == 1 ? "He" : id == 2 ? "llo" : "x") + std::to_string(id);
    };
    const auto comp = logprobs_json(endpoint_kind::completion, ids, lps, piece, 3);
    EXPECT_EQ(comp["tokens"], (ojson{"He1", "llo2"}));
    EXPECT_EQ(comp["token_logprobs"], (ojson{-0.5, -2.0}));
    EXPECT_EQ(comp["top_logprobs"][0]["x3"], -1.5);
    EXPECT_EQ(comp["top_logprobs"][1]["x4"], -0.25);
    EXPECT_EQ(comp["text_offset"], (ojson{3, 6}));
    const auto chat = logprobs_json(endpoint_kind::chat, ids, lps, piece, 0);
    EXPECT_EQ(chat["content"][1]["token"], "llo2");
    EXPECT_EQ(chat["content"][1]["logprob"], -2.0);
    EXPECT_EQ(chat["content"][0]["bytes"], (ojson{'H', 'e', '1'}));
    EXPECT_EQ(chat["content"][1]["top_logprobs"][0]["token"], "x4");
    EXPECT_EQ(chat["content"][1]["top_logprobs"][1]["logprob"], -2.0);
}

TEST(OpenaiApi, TokenizeBodies) {
    const client_tokenize t = parse_tokenize_request(R"({"prompt": "Hi there", "add_special_tokens": false})");
    EXPECT_EQ(t.text, "Hi there");
    EXPECT_FALSE(t.add_special_tokens);
    const client_tokenize c = parse_tokenize_request(R"({"messages": [{"role": "user", "content": "Hi"}],
                                                         "add_generation_prompt": false})");
    EXPECT_EQ(c.chat, R"({"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":false})");
    EXPECT_THROW(parse_tokenize_request(R"({})"), api_error);
    EXPECT_THROW(parse_tokenize_request(R"({"prompt": "a", "messages": []})"), api_error);
    EXPECT_EQ(parse_detokenize_request(R"({"tokens": [3, 0, 9]})"), (std::vector<int32_t>{3, 0, 9}));
    EXPECT_THROW(parse_detokenize_request(R"({"tokens": [-1]})"), api_error);
    EXPECT_THROW(parse_detokenize_request(R"({"tokens": "abc"})"), api_error);
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

TEST(OpenaiApi, FieldsThisServerDoesNotImplementAreRefusedByName) {
    const auto chat = [](const std::string& extra) {
        return refusal(R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}", endpoint_kind::chat);
    };
    // Unknown to both routes, and each route's own fields on the other.
    EXPECT_EQ(refusal(R"({"prompt": "x", "guided_decoding_backend": "xgrammar"})").param, "guided_decoding_backend");
    EXPECT_EQ(refusal(R"({"prompt": "x", "messages": []})").param, "messages");
    EXPECT_EQ(chat(R"("prompt": "x")").param, "prompt");
    EXPECT_NE(chat(R"("reasoning_effort": "low")").message.find("'reasoning_effort' is not supported"),
              std::string::npos);
    // tool_choice without tools.
    EXPECT_EQ(chat(R"("tool_choice": "required")").param, "tool_choice");
    EXPECT_EQ(chat(R"("tool_choice": "auto")").param, "tool_choice");
    EXPECT_EQ(chat(R"("tool_choice": {"type": "function", "function": {"name": "f"}})").param, "tool_choice");
    // ... and in the values that ask for plain text: accepted.
    EXPECT_NO_THROW(parse_openai_request(
        R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "text"}, "tool_choice": "none", "user": "u1"})",
        endpoint_kind::chat));
    EXPECT_NO_THROW(parse_openai_request(R"({"prompt": "x", "user": "u1", "best_of": 1})", endpoint_kind::completion));
}

TEST(OpenaiApi, StructuredOutputsReachTheGenerateRequest) {
    const auto parsed = [](const std::string& extra, endpoint_kind kind) {
        const std::string head = kind == endpoint_kind::chat ? R"({"messages": [{"role": "user", "content": "hi"}], )"
                                                             : R"({"prompt": "x", )";
        try {
            return parse_openai_request(head + extra + "}", kind).generate.structured;
        } catch (const api_error& e) {
            ADD_FAILURE() << extra << ": " << e.message;
            return structured_output{};
        }
    };
    for (const endpoint_kind k : {endpoint_kind::chat, endpoint_kind::completion}) {
        EXPECT_EQ(parsed(R"("response_format": {"type": "text"})", k), structured_output{});
        EXPECT_EQ(parsed(R"("response_format": {"type": "json_object"})", k),
                  (structured_output{structured_kind::json_object, ""}));
        // The schema's text keeps its key order (the output follows it), without whitespace.
        EXPECT_EQ(
            parsed(
                R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true, )"
                R"("schema": {"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "string"}}}}})",
                k),
            (structured_output{structured_kind::json_schema,
                               R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"}}})"}));
        EXPECT_EQ(parsed(R"("structured_outputs": {"regex": "[a-z]+"})", k),
                  (structured_output{structured_kind::regex, "[a-z]+"}));
        EXPECT_EQ(parsed(R"("structured_outputs": {"choice": ["yes", "no"]})", k),
                  (structured_output{structured_kind::choice, R"(["yes","no"])"}));
        EXPECT_EQ(parsed(R"("structured_outputs": {"grammar": "root ::= \"a\""})", k),
                  (structured_output{structured_kind::grammar, R"(root ::= "a")"}));
        EXPECT_EQ(parsed(R"("structured_outputs": {"json": {"type": "boolean"}})", k),
                  (structured_output{structured_kind::json_schema, R"({"type":"boolean"})"}));
        EXPECT_EQ(parsed(R"("structured_outputs": {"json": "{\"type\": \"null\"}"})", k),
                  (structured_output{structured_kind::json_schema, R"({"type":"null"})"}));
        EXPECT_EQ(parsed(R"("structured_outputs": {"json_object": true})", k),
                  (structured_output{structured_kind::json_object, ""}));
        EXPECT_EQ(parsed(R"("guided_json": {"type": "integer"})", k),
                  (structured_output{structured_kind::json_schema, R"({"type":"integer"})"}));
        EXPECT_EQ(parsed(R"("guided_regex": "\\d+")", k), (structured_output{structured_kind::regex, R"(\d+)"}));
        EXPECT_EQ(parsed(R"("guided_choice": ["a"])", k), (structured_output{structured_kind::choice, R"(["a"])"}));
        EXPECT_EQ(parsed(R"("guided_grammar": "root ::= [0-9]+")", k),
                  (structured_output{structured_kind::grammar, "root ::= [0-9]+"}));
    }
}

TEST(OpenaiApi, StructuredOutputRefusalsNameTheField) {
    const auto chat = [](const std::string& extra) {
        return refusal(R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}", endpoint_kind::chat);
    };
    EXPECT_EQ(chat(R"("response_format": {"type": "yaml"})").param, "response_format");
    EXPECT_EQ(chat(R"("response_format": "json")").param, "response_format");
    EXPECT_EQ(chat(R"("response_format": {"type": "json_object", "schema": {}})").param, "response_format");
    EXPECT_NE(chat(R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}, "extra": 1}})")
                  .message.find("'response_format.json_schema.extra' is not supported"),
              std::string::npos);
    EXPECT_EQ(chat(R"("response_format": {"type": "json_schema", "json_schema": {"schema": [1]}})").param,
              "response_format.json_schema.schema");
    EXPECT_EQ(
        chat(R"("response_format": {"type": "json_schema", "json_schema": {"strict": "yes", "schema": {}}})").param,
        "response_format");
    EXPECT_NE(chat(R"("structured_outputs": {"regex": "a", "whitespace_pattern": " "})")
                  .message.find("'structured_outputs.whitespace_pattern' is not supported"),
              std::string::npos);
    EXPECT_EQ(chat(R"("structured_outputs": {"regex": "a", "choice": ["a"]})").param, "structured_outputs");
    EXPECT_EQ(chat(R"("structured_outputs": {})").param, "structured_outputs");
    EXPECT_EQ(chat(R"("structured_outputs": {"choice": []})").param, "structured_outputs.choice");
    EXPECT_EQ(chat(R"("structured_outputs": {"choice": ["a", 1]})").param, "structured_outputs.choice");
    EXPECT_EQ(chat(R"("structured_outputs": {"json": "{not json"})").param, "structured_outputs.json");
    EXPECT_EQ(chat(R"("guided_regex": "")").param, "guided_regex");
    // Two fields constraining one output: refused, naming the second.
    EXPECT_EQ(chat(R"("response_format": {"type": "json_object"}, "guided_regex": "a")").param, "guided_regex");
}

TEST(OpenaiApi, BadRequestsNameTheField) {
    EXPECT_EQ(refusal("{not json").status, 400);
    EXPECT_EQ(refusal("[1]").status, 400);
    EXPECT_EQ(refusal("{}").param, "prompt");
    EXPECT_EQ(refusal(R"({"prompt": 5})").param, "prompt");
    EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 0})").param, "max_tokens");
    EXPECT_EQ(refusal(R"({"prompt": "x", "temperature": "hot"})").param, "temperature");
    EXPECT_EQ(refusal(R"({"prompt": "x", "top_p": 0})").param, "top_p");
    EXPECT_EQ(refusal(R"({"prompt": "x", "n": 0})").param, "n");
    EXPECT_EQ(refusal(R"({"prompt": "x", "cache_salt": ""})").param, "cache_salt");
    EXPECT_EQ(refusal(R"({"prompt": "x", "cache_salt": 5})").param, "cache_salt");
    EXPECT_EQ(refusal(R"({"prompt": "x", "n": 17})").param, "n");
    EXPECT_EQ(refusal(R"({"prompt": "x", "n": 2, "best_of": 3})").param, "best_of");
    EXPECT_EQ(refusal(R"({"prompt": "x", "top_k": -2})").param, "top_k");
    EXPECT_EQ(refusal(R"({"prompt": "x", "min_p": 1.5})").param, "min_p");
    EXPECT_EQ(refusal(R"({"prompt": "x", "repetition_penalty": 0})").param, "repetition_penalty");
    EXPECT_EQ(refusal(R"({"prompt": "x", "presence_penalty": 2.5})").param, "presence_penalty");
    EXPECT_EQ(refusal(R"({"prompt": "x", "frequency_penalty": -3})").param, "frequency_penalty");
    EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 4, "min_tokens": 5})").param, "min_tokens");
    EXPECT_EQ(refusal(R"({"prompt": "x", "stop_token_ids": [-1]})").param, "stop_token_ids");
    EXPECT_EQ(refusal(R"({"prompt": "x", "stop_token_ids": 7})").param, "stop_token_ids");
    EXPECT_EQ(refusal(R"({"prompt": "x", "logit_bias": {"abc": 1}})").param, "logit_bias");
    EXPECT_EQ(refusal(R"({"prompt": "x", "logit_bias": {"5": 101}})").param, "logit_bias");
    EXPECT_EQ(refusal(R"({"prompt": "x", "logprobs": 21})").param, "logprobs");
    EXPECT_EQ(refusal(R"({"prompt": "x", "seed": "s"})").param, "seed");
    EXPECT_EQ(refusal(R"({"messages": [{"role": "user"}], "top_logprobs": 2})", endpoint_kind::chat).param,
              "top_logprobs");
    EXPECT_EQ(refusal(R"({"messages": [{"role": "user"}], "logprobs": 3})", endpoint_kind::chat).param, "logprobs");
    EXPECT_EQ(refusal(R"({"prompt": "x", "stop": [1]})").param, "stop");
    EXPECT_EQ(refusal(R"({"prompt": "x", "echo": true})").param, "echo");
    EXPECT_EQ(refusal(R"({"prompt": "x", "prompt_logprobs": 1})").param, "prompt_logprobs");
    EXPECT_EQ(refusal(R"({"messages": [{"role": "user"}], "prompt_logprobs": 0})", endpoint_kind::chat).param,
              "prompt_logprobs");
    EXPECT_EQ(refusal(R"({"prompt": "x", "stream_options": {"include_usage": true}})").param, "stream_options");
    EXPECT_EQ(refusal(R"({"messages": []})", endpoint_kind::chat).param, "messages");
    EXPECT_EQ(refusal(R"({"messages": [{"content": "no role"}]})", endpoint_kind::chat).param, "messages[0].role");
}

// OpenAI's message shapes (frontend/chat_messages.hpp): accepted and forwarded as sent (the frontend normalises them
// for its template), or refused with the offending field as the 400's param.
TEST(OpenaiApi, ChatMessagesAreCheckedAndRefusalsNameTheField) {
    const std::string round_trip = R"([{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {"role": "assistant", "content": null, "refusal": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "21C"},
        {"role": "assistant", "content": "It is 21C."}])";
    const auto r = parse_openai_request(R"({"messages": )" + round_trip + "}", endpoint_kind::chat);
    EXPECT_EQ(ojson::parse(r.generate.chat)["messages"], ojson::parse(round_trip));
    EXPECT_EQ(ojson::parse(parse_tokenize_request(R"({"messages": )" + round_trip + "}").chat)["messages"],
              ojson::parse(round_trip));

    const auto image = refusal(R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": [
        {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}]})",
                               endpoint_kind::chat);
    EXPECT_EQ(image.status, 400);
    EXPECT_EQ(image.type, "invalid_request_error");
    EXPECT_EQ(image.param, "messages[1].content[1].type");
    EXPECT_NE(image.message.find("'image_url' content parts are not supported"), std::string::npos) << image.message;
    EXPECT_EQ(refusal(R"({"messages": [{"role": "robot", "content": "x"}]})", endpoint_kind::chat).param,
              "messages[0].role");
    EXPECT_EQ(refusal(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
                          "arguments": "{bad"}}]}]})",
                      endpoint_kind::chat)
                  .param,
              "messages[0].tool_calls[0].function.arguments");
    try {
        parse_tokenize_request(R"({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})");
        FAIL() << "expected an api_error";
    } catch (const api_error& e) {
        EXPECT_EQ(e.param, "messages[0].content[0].type");
    }
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
    const auto resp =
        response_object(chat, "id1", 10, {{.index = 0, .text = "Hello", .reason = finish_reason::length}}, 4, 2, 0);
    EXPECT_EQ(resp["object"], "chat.completion");
    EXPECT_EQ(resp["choices"][0]["message"]["content"], "Hello");
    EXPECT_EQ(resp["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(resp["usage"]["total_tokens"], 6);
    EXPECT_EQ(resp["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    const auto first = chunk_object(chat, "id1", 10, {.index = 0, .text = "He"}, true, false);
    EXPECT_EQ(first["object"], "chat.completion.chunk");
    EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
    EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
    const auto last = chunk_object(chat, "id1", 10, {.index = 1, .reason = finish_reason::stop}, false, true);
    EXPECT_EQ(last["choices"][0]["index"], 1);
    EXPECT_FALSE(last["choices"][0]["delta"].contains("role"));
    EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
    const auto usage = usage_chunk(chat, "id1", 10, 4, 2, 3);
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
    EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
    openai_request comp;
    comp.model = "m";
    const auto two = response_object(comp, "c", 1,
                                     {{.index = 0, .text = "t", .reason = finish_reason::stop},
                                      {.index = 1, .text = "u", .reason = finish_reason::length}},
                                     1, 2, 0);
    EXPECT_EQ(two["choices"][0]["text"], "t");
    EXPECT_EQ(two["choices"][1]["text"], "u");
    EXPECT_EQ(two["choices"][1]["index"], 1);
    EXPECT_EQ(two["choices"][1]["finish_reason"], "length");
    EXPECT_EQ(sse_event(ojson{{"a", 1}}), "data: {\"a\":1}\n\n");
}

openai_request chat_request(const std::string& extra) {
    return parse_openai_request(R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}",
                                endpoint_kind::chat);
}

TEST(OpenaiApi, ToolsAndToolChoice) {
    const std::string tools =
        R"("tools": [{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": )"
        R"({"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true}}, )"
        R"({"type": "function", "function": {"name": "get_time"}}])";
    // With tools and no tool_choice: auto (OpenAI's default); without tools: none.
    openai_request r = chat_request(tools);
    EXPECT_EQ(r.tool_choice, tool_choice_mode::automatic);
    EXPECT_EQ(r.tools.size(), 2u);
    EXPECT_TRUE(r.parallel_tool_calls);
    EXPECT_EQ(chat_request(R"("tool_choice": "none")").tool_choice, tool_choice_mode::none);
    EXPECT_EQ(chat_request(tools + R"(, "tool_choice": "none")").tool_choice, tool_choice_mode::none);
    r = chat_request(tools + R"(, "tool_choice": "auto", "parallel_tool_calls": false)");
    EXPECT_EQ(r.tool_choice, tool_choice_mode::automatic);
    EXPECT_FALSE(r.parallel_tool_calls);
    // The template still gets the tools.
    EXPECT_NE(r.generate.chat.find("get_weather"), std::string::npos);
    EXPECT_TRUE(chat_request(R"("chat_template_kwargs": {"enable_thinking": true})").enable_thinking);
    EXPECT_FALSE(chat_request(R"("chat_template_kwargs": {"enable_thinking": false})").enable_thinking);

    const auto bad = [&](const std::string& extra) {
        return refusal(R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}", endpoint_kind::chat);
    };
    EXPECT_EQ(bad(R"("tool_choice": "auto")").param, "tool_choice");  // no tools
    EXPECT_EQ(bad(tools + R"(, "tool_choice": "sometimes")").param, "tool_choice");
    EXPECT_EQ(bad(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})").param,
              "tool_choice");
    // required / named: constrained by the grammar of the server's format (constrain_tool_choice), so not beside
    // another constraint.
    EXPECT_EQ(bad(tools + R"(, "tool_choice": "required", "response_format": {"type": "json_object"})").param,
              "tool_choice");
    r = chat_request(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}})");
    EXPECT_EQ(r.tool_choice, tool_choice_mode::named);
    EXPECT_EQ(r.tool_choice_name, "get_time");
    EXPECT_FALSE(r.generate.structured.active());
    constrain_tool_choice(r, tool_calls::tool_call_format::hermes, std::nullopt);
    EXPECT_EQ(r.generate.structured.kind, structured_kind::grammar);
    EXPECT_NE(r.generate.structured.text.find("get_time"), std::string::npos);
    EXPECT_EQ(r.generate.structured.text.find("get_weather"), std::string::npos);
    r = chat_request(tools + R"(, "tool_choice": "required")");
    EXPECT_EQ(r.tool_choice, tool_choice_mode::required);
    constrain_tool_choice(r, tool_calls::tool_call_format::hermes, tool_calls::reasoning_format::qwen3);
    EXPECT_NE(r.generate.structured.text.find("get_weather"), std::string::npos);
    EXPECT_NE(r.generate.structured.text.find("<think>"), std::string::npos);
    r = chat_request(tools);  // auto: no constraint
    constrain_tool_choice(r, tool_calls::tool_call_format::hermes, std::nullopt);
    EXPECT_FALSE(r.generate.structured.active());
    r = chat_request(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string", )"
                     R"("pattern": "a+"}}}], "tool_choice": "required")");
    try {
        constrain_tool_choice(r, tool_calls::tool_call_format::hermes, std::nullopt);
        ADD_FAILURE() << "a pattern was accepted";
    } catch (const api_error& e) {
        EXPECT_EQ(e.param, "tools");
        EXPECT_NE(e.message.find("'pattern'"), std::string::npos);
    }
    EXPECT_EQ(bad(R"("tools": [{"type": "retrieval"}])").param, "tools[0].type");
    EXPECT_EQ(bad(R"("tools": [{"type": "function", "function": {"description": "x"}}])").param,
              "tools[0].function.name");
    EXPECT_EQ(bad(R"("tools": [{"type": "function", "function": {"name": "f", "examples": []}}])").param,
              "tools[0].function.examples");
    EXPECT_EQ(bad(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}])").param,
              "tools[0].function.parameters");
    EXPECT_EQ(bad(R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", )"
                  R"("function": {"name": "f"}}])")
                  .param,
              "tools[1].function.name");
    EXPECT_EQ(bad(R"("parallel_tool_calls": "yes")").param, "parallel_tool_calls");
}

TEST(OpenaiApi, ParsedMessageAndDeltas) {
    tool_calls::parsed_output p;
    p.reasoning = "think";
    p.calls.push_back({.id = "call_1", .name = "f", .arguments = "{\"a\": 1}"});
    const ojson m = parsed_message(p, true);
    EXPECT_EQ(m, ojson::parse(R"({"role": "assistant", "content": null, "reasoning_content": "think", )"
                              R"("reasoning": "think", "tool_calls": [{"id": "call_1", "type": "function", )"
                              R"("function": {"name": "f", "arguments": "{\"a\": 1}"}}]})"));
    // Without a reasoning parser, no reasoning fields; without calls, no tool_calls and the content as a string.
    EXPECT_EQ(parsed_message({.content = "", .reasoning = "", .calls = {}}, false),
              ojson::parse(R"({"role": "assistant", "content": ""})"));
    const std::vector<ojson> d = parsed_deltas({
        {.kind = tool_calls::event_kind::reasoning, .call_index = 0, .id = {}, .text = "hm"},
        {.kind = tool_calls::event_kind::content, .call_index = 0, .id = {}, .text = "ok"},
        {.kind = tool_calls::event_kind::call_start, .call_index = 0, .id = "call_9", .text = "f"},
        {.kind = tool_calls::event_kind::call_arguments, .call_index = 0, .id = {}, .text = "{\"a\""},
    });
    ASSERT_EQ(d.size(), 4u);
    EXPECT_EQ(d[0], ojson::parse(R"({"reasoning_content": "hm", "reasoning": "hm"})"));
    EXPECT_EQ(d[1], ojson::parse(R"({"content": "ok"})"));
    EXPECT_EQ(d[2], ojson::parse(R"({"tool_calls": [{"index": 0, "id": "call_9", "type": "function", )"
                                 R"("function": {"name": "f", "arguments": ""}}]})"));
    EXPECT_EQ(d[3], ojson::parse(R"({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\""}}]})"));
    // finish_reason: "tool_calls" for a stop after calls; a length cut stays "length".
    openai_request chat;
    chat.kind = endpoint_kind::chat;
    const auto last = chunk_object(
        chat, "id", 1, {.index = 0, .text = {}, .reason = finish_reason::stop, .parsed = d[3], .tool_called = true},
        false, true);
    EXPECT_EQ(last["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_EQ(last["choices"][0]["delta"], d[3]);
    const auto resp = response_object(
        chat, "id", 1, {{.index = 0, .text = "raw", .reason = finish_reason::length, .parsed = m, .tool_called = true}},
        1, 1, 0);
    EXPECT_EQ(resp["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(resp["choices"][0]["message"], m);
}

}  // namespace
}  // namespace zmoe::gateway
