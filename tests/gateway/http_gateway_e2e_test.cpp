// The OpenAI-compatible gateway end to end, with curl against `zmoe serve --http-port` on a demo checkpoint paired
// with the real Qwen3 tokenizer (CPU backend): completion, SSE streaming with usage, chat completion, 400 with an
// OpenAI error body, 404, client disconnect aborting the request (visible in /metrics), streamed or not; /tokenize
// and /detokenize; the sampling fields (logprobs against the engine's own answer, n choices, stop_token_ids,
// logit_bias, min_tokens). Also: a chat request's prompt tokens are the tokenized rendering of its conversation,
// through HTTP, the ZeroMQ protocol and JSONL, OpenAI's message shapes included.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "actors/child_process.hpp"
#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "base/version.hpp"
#include "frontend/chat_template.hpp"
#include "frontend/tokenizer.hpp"
#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;
using namespace std::chrono_literals;
using ojson = nlohmann::ordered_json;

namespace {

const std::string kConversation =
    R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."},)"
    R"( {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "Another one?"}],)"
    R"( "add_generation_prompt": true, "chat_template_kwargs": {"enable_thinking": false}})";

struct http_server {
    temp_dir dir;
    int port = free_port();
    int http_port = free_port();
    zmoe::child_process proc;
    std::string model() const { return dir / "demo"; }
    std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port); }
    std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(http_port) + path; }

    http_server() {
        const std::string tokenizer = std::string(ZMOE_SOURCE_DIR) + "/third_party/tokenizers/qwen3";
        if (run_zmoe({"make-demo", "--out", model(), "--tokenizer", tokenizer}) != 0) {
            ADD_FAILURE() << "make-demo failed";
            return;
        }
        proc = zmoe::child_process::spawn({kZmoe, "serve", "--model", model(), "--port", std::to_string(port),
                                           "--http-port", std::to_string(http_port), "--threads", "1"});
        const auto deadline = std::chrono::steady_clock::now() + 90s;
        while (std::chrono::steady_clock::now() < deadline && proc.running()) {
            if (curl("/health").status == 200) return;
            std::this_thread::sleep_for(200ms);
        }
        ADD_FAILURE() << "the HTTP gateway did not become healthy";
    }
    ~http_server() {
        if (proc.running()) {
            proc.kill(SIGTERM);
            if (!proc.wait_for(30s)) {
                proc.kill(SIGKILL);
                proc.wait();
            }
        }
    }

    struct reply {
        int status = 0;
        std::string body;
    };
    /// curl (bounded by --max-time), POSTing `body` when given.
    reply curl(const std::string& path, const std::string& body = "", int max_time_s = 60) const {
        const std::string body_file = dir / "body.json", out_file = dir / "out.txt";
        std::string cmd =
            "curl -s -N --max-time " + std::to_string(max_time_s) + " -o " + out_file + " -w '%{http_code}' ";
        if (!body.empty()) {
            std::ofstream(body_file) << body;
            cmd += "-H 'Content-Type: application/json' --data-binary @" + body_file + " ";
        }
        cmd += "'" + url(path) + "'";
        reply r;
        if (FILE* p = popen(cmd.c_str(), "r")) {
            char buf[16] = {};
            if (fgets(buf, sizeof buf, p)) r.status = std::atoi(buf);
            pclose(p);
        }
        std::ifstream in(out_file);
        r.body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        return r;
    }
};

http_server& server() {
    static http_server s;
    return s;
}

// The SSE data payloads of a stream.
std::vector<std::string> sse_data(const std::string& body) {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
        const size_t end = body.find("\n\n", pos);
        out.push_back(body.substr(pos + 6, end - pos - 6));
        pos = end;
    }
    return out;
}

TEST(HttpGateway, CompletionAndModels) {
    auto& s = server();
    const auto models = s.curl("/v1/models");
    ASSERT_EQ(models.status, 200) << models.body;
    EXPECT_EQ(ojson::parse(models.body)["data"][0]["id"], "demo");
    const auto r = s.curl("/v1/completions", R"({"prompt": "Hello there", "max_tokens": 5, "temperature": 0,
                                                 "ignore_eos": true})");
    ASSERT_EQ(r.status, 200) << r.body;
    const auto j = ojson::parse(r.body);
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["completion_tokens"], 5);
    EXPECT_EQ(j["usage"]["prompt_tokens"], 2);  // "Hello", " there"
    // The same greedy request through the ZeroMQ protocol gives the same text.
    zmoe::zmoe_client client(s.endpoint());
    zmoe::client_generate g;
    g.prompt = std::string("Hello there");
    g.max_tokens = 5;
    g.temperature = 0.f;
    g.ignore_eos = true;
    const auto c = client.collect(client.generate(g), 60s);
    EXPECT_EQ(j["choices"][0]["text"], c.text);
}

TEST(HttpGateway, StreamingSendsSseChunksUsageAndDone) {
    auto& s = server();
    const auto r = s.curl("/v1/completions", R"({"prompt": "Once", "max_tokens": 6, "temperature": 0, "stream": true,
                                                 "ignore_eos": true, "stream_options": {"include_usage": true}})");
    ASSERT_EQ(r.status, 200) << r.body;
    const auto events = sse_data(r.body);
    ASSERT_GE(events.size(), 3u) << r.body;
    EXPECT_EQ(events.back(), "[DONE]");
    const auto usage = ojson::parse(events[events.size() - 2]);
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
    std::string text;
    int finished = 0;
    for (size_t i = 0; i + 2 < events.size(); ++i) {
        const auto chunk = ojson::parse(events[i]);
        EXPECT_EQ(chunk["object"], "text_completion");
        text += chunk["choices"][0]["text"].get<std::string>();
        finished += !chunk["choices"][0]["finish_reason"].is_null();
    }
    EXPECT_EQ(finished, 1);
    const auto whole = s.curl("/v1/completions", R"({"prompt": "Once", "max_tokens": 6, "temperature": 0,
                                                     "ignore_eos": true})");
    EXPECT_EQ(text, ojson::parse(whole.body)["choices"][0]["text"]);
}

TEST(HttpGateway, ChatPromptTokensAreTheTokenizedRendering) {
    auto& s = server();
    // The reference: the conversation rendered by the chat template and tokenized without special tokens.
    const auto tmpl = zmoe::chat_template::from_tokenizer(s.model());
    ASSERT_TRUE(tmpl.has_value());
    const auto conv = ojson::parse(kConversation);
    const std::string rendering = tmpl->render(zmoe::parse_chat_request(conv));
    const auto tok = zmoe::tokenizer::from_file(s.model());
    const std::vector<int32_t> ids = tok.encode(rendering, /*add_special_tokens=*/false);

    // HTTP chat completion vs. HTTP completion of those ids.
    ojson chat = conv;
    chat["max_tokens"] = 6;
    chat["temperature"] = 0;
    chat["ignore_eos"] = true;
    const auto r = s.curl("/v1/chat/completions", chat.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const auto j = ojson::parse(r.body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["usage"]["prompt_tokens"].get<size_t>(), ids.size());
    const auto plain = s.curl(
        "/v1/completions", ojson{{"prompt", ids}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}}.dump());
    ASSERT_EQ(plain.status, 200) << plain.body;
    EXPECT_EQ(j["choices"][0]["message"]["content"], ojson::parse(plain.body)["choices"][0]["text"]);

    // The ZeroMQ protocol: same prompt length and the same greedy tokens as prompt_token_ids.
    zmoe::zmoe_client client(s.endpoint());
    zmoe::client_generate g;
    g.prompt = std::string();
    g.chat = kConversation;
    g.max_tokens = 6;
    g.temperature = 0.f;
    g.ignore_eos = true;
    const auto a = client.collect(client.generate(g), 60s);
    g.chat.clear();
    g.prompt = ids;
    const auto b = client.collect(client.generate(g), 60s);
    EXPECT_EQ(a.prompt_tokens, ids.size());
    EXPECT_EQ(a.token_ids, b.token_ids);

    // JSONL through `zmoe client`: a messages line gives the same tokens.
    {
        std::ofstream in(s.dir / "chat.jsonl");
        ojson line = conv;
        line["max_tokens"] = 6;
        line["temperature"] = 0;
        line["ignore_eos"] = true;
        in << line.dump() << "\n";
    }
    ASSERT_EQ(run_zmoe({"client", "--endpoint", s.endpoint(), "--input", s.dir / "chat.jsonl", "--output",
                        s.dir / "chat_out.jsonl"}),
              0);
    const auto out = read_jsonl(s.dir / "chat_out.jsonl");
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0]["token_ids"].get<std::vector<int32_t>>(), b.token_ids);
}

// OpenAI's message shapes (content parts, a tool-call round trip with content null and JSON-text arguments) reach
// the template normalised the same way through HTTP, the ZeroMQ protocol and JSONL; a refused part is an error
// naming its field on each path (docs/chat_templates.md).
TEST(HttpGateway, OpenAIMessageShapesOnEveryPath) {
    auto& s = server();
    const std::string shapes =
        R"({"messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},)"
        R"( {"role": "user", "content": [{"type": "text", "text": "Weather"}, "in Paris?"]},)"
        R"( {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",)"
        R"( "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},)"
        R"( {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": [{"type": "text", "text": "21C"}]}],)"
        R"( "add_generation_prompt": true})";
    // The reference: Qwen3's template over the same conversation written in the shapes it reads.
    const std::string plain =
        R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather\nin Paris?"},)"
        R"( {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",)"
        R"( "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},)"
        R"( {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "21C"}],)"
        R"( "add_generation_prompt": true})";
    const auto tmpl = zmoe::chat_template::from_tokenizer(s.model());
    ASSERT_TRUE(tmpl.has_value());
    const std::string rendering = tmpl->render(zmoe::parse_chat_request(ojson::parse(plain)));
    EXPECT_NE(rendering.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"),
              std::string::npos)
        << rendering;
    const auto tok = zmoe::tokenizer::from_file(s.model());
    const std::vector<int32_t> ids = tok.encode(rendering, /*add_special_tokens=*/false);

    ojson chat = ojson::parse(shapes);
    chat["max_tokens"] = 3;
    chat["temperature"] = 0;
    chat["ignore_eos"] = true;
    const auto r = s.curl("/v1/chat/completions", chat.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(ojson::parse(r.body)["usage"]["prompt_tokens"].get<size_t>(), ids.size());
    const auto t = s.curl("/tokenize", shapes);
    ASSERT_EQ(t.status, 200) << t.body;
    EXPECT_EQ(ojson::parse(t.body)["tokens"].get<std::vector<int32_t>>(), ids);

    zmoe::zmoe_client client(s.endpoint());
    zmoe::client_generate g;
    g.prompt = std::string();
    g.chat = shapes;
    g.max_tokens = 3;
    g.temperature = 0.f;
    g.ignore_eos = true;
    EXPECT_EQ(client.collect(client.generate(g), 60s).prompt_tokens, ids.size());

    // An image part: refused naming the field, over ZeroMQ (invalid_argument), HTTP (param) and JSONL (error line).
    ojson image = ojson::parse(shapes);
    image["messages"][1]["content"][1] = {{"type", "image_url"}, {"image_url", {{"url", "https://example.com/a.png"}}}};
    g.chat = image.dump();
    try {
        client.collect(client.generate(g), 60s);
        ADD_FAILURE() << "an image part was accepted";
    } catch (const zmoe::error& e) {
        EXPECT_EQ(e.code(), zmoe::errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("messages[1].content[1].type: 'image_url'"), std::string::npos)
            << e.what();
    }
    image["max_tokens"] = 3;
    const auto refused = s.curl("/v1/chat/completions", image.dump());
    EXPECT_EQ(refused.status, 400) << refused.body;
    EXPECT_EQ(ojson::parse(refused.body)["error"]["param"], "messages[1].content[1].type") << refused.body;
    {
        std::ofstream in(s.dir / "shapes.jsonl");
        in << chat.dump() << "\n" << image.dump() << "\n";
    }
    run_zmoe({"client", "--endpoint", s.endpoint(), "--input", s.dir / "shapes.jsonl", "--output",
              s.dir / "shapes_out.jsonl"});
    const auto out = read_jsonl(s.dir / "shapes_out.jsonl");
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0]["usage"]["prompt_tokens"].get<size_t>(), ids.size()) << out[0].dump();
    EXPECT_EQ(out[1]["finish_reason"], "error") << out[1].dump();
    EXPECT_NE(out[1]["error"]["message"].get<std::string>().find("messages[1].content[1].type"), std::string::npos)
        << out[1].dump();
}

TEST(HttpGateway, BadRequestsGetOpenAIErrors) {
    auto& s = server();
    const auto bad_json = s.curl("/v1/completions", "{not json");
    EXPECT_EQ(bad_json.status, 400);
    EXPECT_EQ(ojson::parse(bad_json.body)["error"]["type"], "invalid_request_error");
    const auto bad_field = s.curl("/v1/chat/completions", R"({"messages": [], "max_tokens": 3})");
    EXPECT_EQ(bad_field.status, 400);
    EXPECT_EQ(ojson::parse(bad_field.body)["error"]["param"], "messages");
    // Refused by the frontend (too long for the context) rather than by the gateway: still a 400.
    const auto too_long = s.curl("/v1/completions", R"({"prompt": "hi", "max_tokens": 100000000})");
    EXPECT_EQ(too_long.status, 400) << too_long.body;
    EXPECT_TRUE(ojson::parse(too_long.body)["error"].contains("message"));
    const auto missing = s.curl("/v1/nothing");
    EXPECT_EQ(missing.status, 404);
    EXPECT_EQ(ojson::parse(missing.body)["error"]["code"], 404);
}

double metric(const std::string& text, const std::string& series) {
    const size_t p = text.find("\n" + series + " ");
    return p == std::string::npos ? 0.0 : std::atof(text.c_str() + p + series.size() + 2);
}

TEST(HttpGateway, ClientDisconnectAbortsTheRequest) {
    auto& s = server();
    const std::string aborted = R"(zmoe_requests_finished_total{actor="frontend",reason="abort"})";
    const std::string disconnects = R"(zmoe_http_client_disconnects_total{actor="gateway"})";
    const auto before = s.curl("/metrics").body;
    // A long stream that curl gives up on after 2 s.
    const auto r = s.curl("/v1/completions", R"({"prompt": "Go", "max_tokens": 4000, "stream": true,
                                                 "ignore_eos": true})",
                          2);
    EXPECT_NE(r.body.find("data: "), std::string::npos);
    EXPECT_EQ(r.body.find("[DONE]"), std::string::npos);
    std::string after;
    for (int i = 0; i < 100; ++i) {
        after = s.curl("/metrics").body;
        if (metric(after, aborted) > metric(before, aborted)) break;
        std::this_thread::sleep_for(100ms);
    }
    EXPECT_EQ(metric(after, disconnects), metric(before, disconnects) + 1) << after;
    EXPECT_EQ(metric(after, aborted), metric(before, aborted) + 1) << after;
}

TEST(HttpGateway, NonStreamedClientDisconnectAbortsTheRequest) {
    auto& s = server();
    const std::string aborted = R"(zmoe_requests_finished_total{actor="frontend",reason="abort"})";
    const std::string disconnects = R"(zmoe_http_client_disconnects_total{actor="gateway"})";
    const auto before = s.curl("/metrics").body;
    { std::ofstream(s.dir / "long.json") << R"({"prompt": "Go", "max_tokens": 4000, "ignore_eos": true})"; }
    // A long non-streamed completion; curl is killed (by its PID) while the engine is still generating it.
    zmoe::child_process curl = zmoe::child_process::spawn(
        {"curl", "-s", "-o", s.dir / "long_out.txt", "--max-time", "120", "-H", "Content-Type: application/json",
         "--data-binary", "@" + (s.dir / "long.json"), s.url("/v1/completions")});
    // Wait until the engine runs it (a request is running), then kill curl.
    bool running = false;
    for (int i = 0; i < 100 && !running; ++i) {
        zmoe::zmoe_client probe(s.endpoint());
        running = probe.health(5s).num_running + probe.health(5s).num_waiting > 0;
        if (!running) std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(running) << "the long completion never started";
    curl.kill(SIGKILL);
    curl.wait();
    std::string after;
    for (int i = 0; i < 150; ++i) {
        after = s.curl("/metrics").body;
        if (metric(after, aborted) > metric(before, aborted)) break;
        std::this_thread::sleep_for(100ms);
    }
    EXPECT_EQ(metric(after, disconnects), metric(before, disconnects) + 1) << after;
    EXPECT_EQ(metric(after, aborted), metric(before, aborted) + 1) << after;
    zmoe::zmoe_client probe(s.endpoint());
    EXPECT_EQ(probe.health(5s).num_running, 0u);
}

TEST(HttpGateway, TokenizeAndDetokenize) {
    auto& s = server();
    const auto tok = zmoe::tokenizer::from_file(s.model());
    const auto r = s.curl("/tokenize", R"({"prompt": "Hello there, world"})");
    ASSERT_EQ(r.status, 200) << r.body;
    const auto j = ojson::parse(r.body);
    const std::vector<int32_t> want = tok.encode("Hello there, world", /*add_special_tokens=*/true);
    EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), want);
    EXPECT_EQ(j["count"].get<size_t>(), want.size());
    EXPECT_GT(j["max_model_len"].get<int64_t>(), 0);
    // A conversation: the tokenized rendering, as a chat request's prompt.
    const auto tmpl = zmoe::chat_template::from_tokenizer(s.model());
    ASSERT_TRUE(tmpl.has_value());
    const auto conv = ojson::parse(kConversation);
    const auto chat_ids = tok.encode(tmpl->render(zmoe::parse_chat_request(conv)), /*add_special_tokens=*/false);
    const auto c = s.curl("/tokenize", conv.dump());
    ASSERT_EQ(c.status, 200) << c.body;
    EXPECT_EQ(ojson::parse(c.body)["tokens"].get<std::vector<int32_t>>(), chat_ids);
    // Back again.
    const auto d = s.curl("/detokenize", ojson{{"tokens", want}}.dump());
    ASSERT_EQ(d.status, 200) << d.body;
    EXPECT_EQ(ojson::parse(d.body)["prompt"], tok.decode(want));
    EXPECT_EQ(ojson::parse(d.body)["prompt"], "Hello there, world");
    // Errors: an id outside the vocabulary, a malformed body.
    const auto bad_id = s.curl("/detokenize", R"({"tokens": [999999999]})");
    EXPECT_EQ(bad_id.status, 400) << bad_id.body;
    EXPECT_EQ(ojson::parse(bad_id.body)["error"]["type"], "invalid_request_error");
    EXPECT_EQ(s.curl("/tokenize", R"({"text": "x"})").status, 400);
}

// The text of one token as the gateway writes it in logprobs: the bytes it adds to a decode, as JSON text.
std::string token_text(const zmoe::tokenizer& tok, int32_t id) {
    return ojson::parse(ojson(std::string(tok.token_bytes(id))).dump(-1, ' ', false, ojson::error_handler_t::replace))
        .get<std::string>();
}

TEST(HttpGateway, SamplingFieldsReachTheEngine) {
    auto& s = server();
    const auto tok = zmoe::tokenizer::from_file(s.model());
    // logprobs: what the engine reports through the ZeroMQ protocol, as OpenAI's completion logprobs.
    const auto r = s.curl("/v1/completions", R"({"prompt": "Hello there", "max_tokens": 4, "temperature": 0,
                                                 "ignore_eos": true, "logprobs": 3})");
    ASSERT_EQ(r.status, 200) << r.body;
    const auto lp = ojson::parse(r.body)["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 4u) << r.body;
    zmoe::zmoe_client client(s.endpoint());
    zmoe::client_generate g;
    g.prompt = std::string("Hello there");
    g.max_tokens = 4;
    g.temperature = 0.f;
    g.ignore_eos = true;
    g.logprobs = 3;
    struct {
        std::vector<int32_t> token_ids;
        std::vector<zmoe::token_logprobs> logprobs;
    } c;
    const std::string cid = client.generate(g);
    for (bool done = false; !done;) {
        const auto ev = client.next(cid, 60s);
        ASSERT_TRUE(ev.has_value());
        ASSERT_TRUE(std::holds_alternative<zmoe::client_delta>(*ev));
        const auto& d = std::get<zmoe::client_delta>(*ev);
        c.token_ids.insert(c.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
        c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
        done = d.finished;
    }
    ASSERT_EQ(c.logprobs.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_FLOAT_EQ(lp["token_logprobs"][i].get<float>(), c.logprobs[i].logprob);
        EXPECT_EQ(lp["tokens"][i], token_text(tok, c.token_ids[i]));
        ASSERT_EQ(lp["top_logprobs"][i].size(), 3u);
        // Greedy: the sampled token is the most likely one.
        const std::string top_text = token_text(tok, c.logprobs[i].top_ids[0]);
        EXPECT_FLOAT_EQ(lp["top_logprobs"][i][top_text].get<float>(), c.logprobs[i].top_logprobs[0]);
        EXPECT_EQ(c.logprobs[i].top_ids[0], c.token_ids[i]);
    }
    // Chat logprobs, streamed: one content entry per token, their bytes adding up to the content.
    const auto cs = s.curl("/v1/chat/completions",
                           R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0,
                               "ignore_eos": true, "logprobs": true, "top_logprobs": 2, "stream": true})");
    ASSERT_EQ(cs.status, 200) << cs.body;
    std::string content, from_logprobs;
    size_t entries = 0;
    for (const auto& e : sse_data(cs.body)) {
        if (e == "[DONE]") continue;
        const auto chunk = ojson::parse(e);
        const auto& ch = chunk["choices"][0];
        if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
        if (ch["logprobs"].is_null()) continue;
        for (const auto& entry : ch["logprobs"]["content"]) {
            for (const auto& b : entry["bytes"]) from_logprobs += static_cast<char>(b.get<int>());
            EXPECT_EQ(entry["top_logprobs"].size(), 2u);
            EXPECT_LE(entry["logprob"].get<double>(), 0.0);
            ++entries;
        }
    }
    EXPECT_EQ(entries, 5u) << cs.body;
    EXPECT_EQ(from_logprobs, content);

    // n: three choices, seeded: each is what a single request with seed + i draws.
    const auto n3 = s.curl("/v1/completions", R"({"prompt": "Once", "max_tokens": 6, "temperature": 1.0, "seed": 5,
                                                  "ignore_eos": true, "n": 3})");
    ASSERT_EQ(n3.status, 200) << n3.body;
    const auto nj = ojson::parse(n3.body);
    ASSERT_EQ(nj["choices"].size(), 3u);
    EXPECT_EQ(nj["usage"]["completion_tokens"], 18);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(nj["choices"][i]["index"], i);
        const auto one = s.curl(
            "/v1/completions",
            ojson{{"prompt", "Once"}, {"max_tokens", 6}, {"temperature", 1.0}, {"seed", 5 + i}, {"ignore_eos", true}}
                .dump());
        EXPECT_EQ(nj["choices"][i]["text"], ojson::parse(one.body)["choices"][0]["text"]) << i;
    }
    // n streamed: every choice ends once, then usage and [DONE].
    const auto ns = s.curl("/v1/chat/completions",
                           R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "n": 2, "seed": 1,
                               "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}})");
    ASSERT_EQ(ns.status, 200) << ns.body;
    int finished[2] = {0, 0};
    const auto events = sse_data(ns.body);
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events.back(), "[DONE]");
    EXPECT_EQ(ojson::parse(events[events.size() - 2])["usage"]["completion_tokens"], 6);
    for (size_t i = 0; i + 2 < events.size(); ++i) {
        const ojson ch = ojson::parse(events[i])["choices"][0];
        if (!ch["finish_reason"].is_null()) ++finished[ch["index"].get<int>()];
    }
    EXPECT_EQ(finished[0], 1);
    EXPECT_EQ(finished[1], 1);

    // stop_token_ids: the last greedy token not seen before it ends the request there.
    size_t k = 0;
    for (size_t i = 0; i < c.token_ids.size(); ++i)
        if (std::find(c.token_ids.begin(), c.token_ids.begin() + static_cast<int64_t>(i), c.token_ids[i]) ==
            c.token_ids.begin() + static_cast<int64_t>(i))
            k = i;
    const auto stop = s.curl("/v1/completions", ojson{{"prompt", "Hello there"},
                                                      {"max_tokens", 4},
                                                      {"temperature", 0},
                                                      {"ignore_eos", true},
                                                      {"stop_token_ids", {c.token_ids[k]}}}
                                                    .dump());
    ASSERT_EQ(stop.status, 200) << stop.body;
    const auto sj = ojson::parse(stop.body);
    EXPECT_EQ(sj["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(sj["usage"]["completion_tokens"].get<size_t>(), k + 1);
    // logit_bias: -100 on the greedy first token moves the first token elsewhere; min_tokens with the first token
    // as a stop id keeps it from being sampled first.
    const auto biased = s.curl("/v1/completions", ojson{{"prompt", "Hello there"},
                                                        {"max_tokens", 1},
                                                        {"temperature", 0},
                                                        {"logprobs", 0},
                                                        {"logit_bias", {{std::to_string(c.token_ids[0]), -100}}}}
                                                      .dump());
    ASSERT_EQ(biased.status, 200) << biased.body;
    EXPECT_NE(ojson::parse(biased.body)["choices"][0]["logprobs"]["tokens"][0], token_text(tok, c.token_ids[0]));
    const auto min_tok = s.curl("/v1/completions", ojson{{"prompt", "Hello there"},
                                                         {"max_tokens", 2},
                                                         {"temperature", 0},
                                                         {"min_tokens", 1},
                                                         {"stop_token_ids", {c.token_ids[0]}}}
                                                       .dump());
    ASSERT_EQ(min_tok.status, 200) << min_tok.body;
    EXPECT_EQ(ojson::parse(min_tok.body)["usage"]["completion_tokens"], 2) << min_tok.body;

    // Bad values: 400 with an OpenAI error naming the field, from the gateway or from the frontend.
    for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
             {R"({"prompt": "x", "n": 0})", "n"},
             {R"({"prompt": "x", "min_p": 2})", "min_p"},
             {R"({"prompt": "x", "repetition_penalty": -1})", "repetition_penalty"},
             {R"({"prompt": "x", "logprobs": 50})", "logprobs"},
             {R"({"prompt": "x", "logit_bias": {"1": 500}})", "logit_bias"},
             {R"({"prompt": "x", "stop_token_ids": ["a"]})", "stop_token_ids"}}) {
        const auto b = s.curl("/v1/completions", body);
        EXPECT_EQ(b.status, 400) << body;
        EXPECT_EQ(ojson::parse(b.body)["error"]["param"], param) << b.body;
    }
    const auto outside = s.curl("/v1/completions", R"({"prompt": "x", "stop_token_ids": [999999999]})");
    EXPECT_EQ(outside.status, 400) << outside.body;
    EXPECT_EQ(ojson::parse(outside.body)["error"]["type"], "invalid_request_error");
}

// vLLM's metric names from the real engine through the gateway, and the operations routes.
TEST(HttpGateway, VllmMetricsAndOperationsRoutes) {
    auto& s = server();
    const auto r = s.curl("/v1/completions", R"({"prompt": "Hello", "max_tokens": 3, "ignore_eos": true})");
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string m = s.curl("/metrics").body;
    const std::string l = R"({model_name="demo"})";
    EXPECT_GE(metric(m, "vllm:e2e_request_latency_seconds_count" + l), 1) << m.substr(0, 3000);
    EXPECT_GE(metric(m, "vllm:time_to_first_token_seconds_count" + l), 1);
    EXPECT_GE(metric(m, "vllm:request_queue_time_seconds_count" + l), 1);  // from the engine core's histogram
    EXPECT_GE(metric(m, "vllm:request_generation_tokens_sum" + l), 3);
    EXPECT_GE(metric(m, R"(vllm:request_success_total{model_name="demo",finished_reason="length"})"), 1);
    // The engine core's gauges: nothing runs now, and the KV cache is a fraction.
    EXPECT_NE(m.find("\nvllm:num_requests_running" + l + " 0\n"), std::string::npos) << m.substr(0, 3000);
    EXPECT_NE(m.find("\nvllm:num_requests_waiting" + l + " 0\n"), std::string::npos);
    const size_t kv = m.find("\nvllm:kv_cache_usage_perc" + l + " ");
    ASSERT_NE(kv, std::string::npos);
    const double usage = std::atof(m.c_str() + kv + std::string("\nvllm:kv_cache_usage_perc").size() + l.size() + 1);
    EXPECT_GE(usage, 0.0);
    EXPECT_LE(usage, 1.0);
    EXPECT_EQ(ojson::parse(s.curl("/version").body)["version"], zmoe::kVersion);
    EXPECT_EQ(s.curl("/ping").status, 200);
    EXPECT_EQ(ojson::parse(s.curl("/load").body)["server_load"], 0);
}

// Prefix caching through the gateway: the same 40-token prompt twice under a salt of its own: the second finds two
// blocks of 16 cached (usage.prompt_tokens_details.cached_tokens), same text; vLLM's prefix-cache counters follow.
TEST(HttpGateway, CachedTokensInUsageAndPrefixCacheMetrics) {
    auto& s = server();
    std::string ids;
    for (int i = 0; i < 40; ++i) ids += (i ? ", " : "") + std::to_string(1000 + 7 * i);
    const std::string body = R"({"prompt": [)" + ids +
                             R"(], "max_tokens": 4, "temperature": 0, "ignore_eos": true, "cache_salt": "gw-test"})";
    const auto first = s.curl("/v1/completions", body);
    ASSERT_EQ(first.status, 200) << first.body;
    const auto second = s.curl("/v1/completions", body);
    ASSERT_EQ(second.status, 200) << second.body;
    const auto a = ojson::parse(first.body), b = ojson::parse(second.body);
    EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << first.body;
    EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], 32) << second.body;
    EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
    const std::string m = s.curl("/metrics").body;
    const std::string l = R"({model_name="demo"})";
    EXPECT_GE(metric(m, "vllm:prefix_cache_hits_total" + l), 32) << m.substr(0, 3000);
    EXPECT_GE(metric(m, "vllm:prefix_cache_queries_total" + l), 80);
    EXPECT_GE(metric(m, R"(zmoe_prefix_cache_hits_total{actor="engine_core"})"), 32);
    // The chat route takes the salt too; a salt that is not a string is refused naming it.
    const auto chat = s.curl("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}],
                                                         "max_tokens": 2, "cache_salt": "gw-test"})");
    EXPECT_EQ(chat.status, 200) << chat.body;
    const auto bad = s.curl("/v1/completions", R"({"prompt": "Hi", "cache_salt": 3})");
    EXPECT_EQ(bad.status, 400);
    EXPECT_EQ(ojson::parse(bad.body)["error"]["param"], "cache_salt");
}

// A worker that dies turns the gateway's /health to 503 within the actors' heartbeat bound (the engine core
// misses 3 of its 200 ms heartbeats, the frontend reports degraded, the gateway polls it every interval).
TEST(HttpGateway, HealthIs503SoonAfterAWorkerDies) {
    auto& shared = server();  // for its demo checkpoint
    const int port = free_port(), http_port = free_port();
    zmoe::child_process serve = zmoe::child_process::spawn(
        {kZmoe, "serve", "--model", shared.model(), "--port", std::to_string(port), "--http-port",
         std::to_string(http_port), "--threads", "1", "--heartbeat-ms", "200", "--failure-grace-ms", "10000"});
    const std::string health_url = "http://127.0.0.1:" + std::to_string(http_port) + "/health";
    const auto status = [&] {
        std::string cmd = "curl -s -o /dev/null --max-time 5 -w '%{http_code}' '" + health_url + "'";
        int code = 0;
        if (FILE* p = popen(cmd.c_str(), "r")) {
            char buf[16] = {};
            if (fgets(buf, sizeof buf, p)) code = std::atoi(buf);
            pclose(p);
        }
        return code;
    };
    const auto ready_deadline = std::chrono::steady_clock::now() + 90s;
    while (status() != 200 && std::chrono::steady_clock::now() < ready_deadline && serve.running())
        std::this_thread::sleep_for(100ms);
    ASSERT_EQ(status(), 200);
    const auto workers = find_processes(serve.pid(), {" worker "});
    ASSERT_EQ(workers.size(), 1u);
    kill(workers[0], SIGKILL);
    const auto killed_at = std::chrono::steady_clock::now();
    int code = 200;
    while (code == 200 && std::chrono::steady_clock::now() - killed_at < 10s) {
        code = status();
        if (code == 200) std::this_thread::sleep_for(20ms);
    }
    const double after_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
    EXPECT_EQ(code, 503);
    // 3 × 200 ms for the engine core to take the worker for dead, one 200 ms poll, curl and scheduling.
    EXPECT_LT(after_s, 3.0);
    std::printf("gateway /health 503 %.2f s after a worker's SIGKILL\n", after_s);
    serve.kill(SIGTERM);
    if (!serve.wait_for(30s)) {
        serve.kill(SIGKILL);
        serve.wait();
    }
}

// Exit status of a shell command (its output to `log`).
int shell(const std::string& cmd, const std::string& log) {
    const int rc = std::system((cmd + " > '" + log + "' 2>&1").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

// tool_choice "required" and a named function on the demo model (random weights, the real Qwen3 tokenizer and
// template, so `serve` picked the hermes and qwen3 parsers): the grammar makes every answer a valid call, whatever
// the seed; the stream folds into the same call.
TEST(HttpGateway, ToolChoiceRequiredGivesValidCallsFromRandomWeights) {
    auto& s = server();
    const std::string tools =
        R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", )"
        R"("properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]}, "days": {"type": "integer"}}, )"
        R"("required": ["city"]}}}, {"type": "function", "function": {"name": "get_time"}}])";
    const auto body = [&](const std::string& choice, int seed, bool stream) {
        return R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], )" + tools + R"(, "tool_choice": )" +
               choice + R"(, "parallel_tool_calls": false, "max_tokens": 200, "seed": )" + std::to_string(seed) +
               R"(, "temperature": 1, "chat_template_kwargs": {"enable_thinking": false})" +
               (stream ? R"(, "stream": true})" : "}");
    };
    for (const std::string& choice :
         {std::string(R"("required")"), std::string(R"({"type": "function", "function": {"name": "get_time"}})")}) {
        for (int seed = 1; seed <= 4; ++seed) {
            const auto r = s.curl("/v1/chat/completions", body(choice, seed, false), 120);
            ASSERT_EQ(r.status, 200) << r.body;
            const ojson c = ojson::parse(r.body)["choices"][0];
            ASSERT_EQ(c["finish_reason"], "tool_calls") << r.body;
            ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.body;
            const ojson& call = c["message"]["tool_calls"][0];
            const std::string name = call["function"]["name"];
            const ojson args = ojson::parse(call["function"]["arguments"].get<std::string>());
            if (choice != R"("required")") {
                EXPECT_EQ(name, "get_time");
            }
            if (name == "get_weather") {
                EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Tokyo") << args.dump();
                for (const auto& [k, v] : args.items())
                    EXPECT_TRUE(k == "city" || (k == "days" && v.is_number_integer()));
            } else {
                EXPECT_EQ(name, "get_time");
                EXPECT_EQ(args, ojson::object());
            }
            if (seed != 1) continue;
            // Streamed with the same seed: id and name first, then the arguments, folding into the same call.
            const auto st = s.curl("/v1/chat/completions", body(choice, seed, true), 120);
            std::string streamed_name, streamed_args, finish;
            for (const std::string& d : sse_data(st.body)) {
                if (d == "[DONE]") continue;
                const ojson chunk = ojson::parse(d);
                if (chunk["choices"].empty()) continue;
                const ojson& ch = chunk["choices"][0];
                if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
                if (!ch["delta"].contains("tool_calls")) continue;
                const ojson& t = ch["delta"]["tool_calls"][0];
                if (t.contains("id")) {
                    EXPECT_TRUE(streamed_name.empty());
                    streamed_name = t["function"]["name"];
                } else {
                    EXPECT_FALSE(streamed_name.empty()) << "arguments before the call's name";
                }
                streamed_args += t["function"]["arguments"].get<std::string>();
            }
            EXPECT_EQ(finish, "tool_calls");
            EXPECT_EQ(streamed_name, name);
            EXPECT_EQ(streamed_args, call["function"]["arguments"]);
        }
    }
}

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The official OpenAI Node SDK (pinned in tests/gateway/node/package.json, installed there by scripts/setup.sh)
// completes and streams, chat and completions, through the gateway. Skipped without node; without the installed
// package it is skipped too, except in CI (CI set), where setup.sh must have installed it.
TEST(HttpGateway, OfficialOpenAINodeSdk) {
    if (shell("command -v node", "/dev/null") != 0) GTEST_SKIP() << "node is not installed";
    auto& s = server();
    const std::string dir = std::string(ZMOE_SOURCE_DIR) + "/tests/gateway/node";
    const std::string log = s.dir / "node_sdk.log";
    const int rc = shell("node '" + dir + "/openai_sdk_test.mjs' --base-url '" + s.url("/v1") + "'", log);
    if (rc == 77 && std::getenv("CI") == nullptr)
        GTEST_SKIP() << "the openai npm package is not installed: run scripts/setup.sh";
    EXPECT_EQ(rc, 0) << read_file(log);
}

// The official OpenAI Python SDK, where python3 has it (Debian 12 does not package it): skipped otherwise.
TEST(HttpGateway, OfficialOpenAIPythonSdk) {
    auto& s = server();
    const std::string log = s.dir / "python_sdk.log";
    const int rc = shell("python3 '" + std::string(ZMOE_SOURCE_DIR) +
                             "/tests/gateway/openai_sdk_test.py' --base-url '" + s.url("/v1") + "'",
                         log);
    if (rc == 77) GTEST_SKIP() << "python3 has no openai package";
    EXPECT_EQ(rc, 0) << read_file(log);
}

}  // namespace
