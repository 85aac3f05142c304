// The OpenAI-compatible gateway end to end, with curl against `zmoe serve --http-port` on a demo checkpoint paired
// with the real Qwen3 tokenizer (CPU backend): completion, SSE streaming with usage, chat completion, 400 with an
// OpenAI error body, 404, client disconnect aborting the request (visible in /metrics). Also: a chat request's
// prompt tokens are the tokenized rendering of its conversation, through HTTP, the ZeroMQ protocol and JSONL.

#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <thread>

#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
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

}  // namespace
