// Tool calls and reasoning on the wire: `zmoe api-server --tool-call-parser hermes --reasoning-parser qwen3` in
// front of a fake frontend (a ZeroMQ ROUTER in this test speaking messages/client_protocol.hpp) that answers every
// generate request with a scripted output, cut into deltas of a scripted size, so that what a model writes is
// chosen by the test (a demo model's random weights rarely write a call). Checked with curl: the non-streamed
// message (content null beside tool_calls, reasoning_content and reasoning, OpenAI's tool_calls shape,
// finish_reason "tool_calls"), the SSE chunks (the call's id and name first with empty arguments, then argument
// fragments; reasoning deltas; one finish_reason), and that the stream concatenates to the non-streamed answer.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <zmq.hpp>

#include "actors/child_process.hpp"
#include "messages/client_protocol.hpp"
#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;
using namespace std::chrono_literals;
using ojson = nlohmann::ordered_json;

namespace {

/// Answers generate with `output` in deltas of `delta_bytes` (the last finished with reason stop), health with ok.
class scripted_frontend {
  public:
    explicit scripted_frontend(int port) : port_(port) {
        thread_ = std::thread([this] { run(); });
    }
    ~scripted_frontend() {
        stop_ = true;
        thread_.join();
    }
    std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
    void script(std::string output, size_t delta_bytes) {
        std::lock_guard<std::mutex> lock(mutex_);
        output_ = std::move(output);
        delta_bytes_ = delta_bytes;
    }

  private:
    void send(zmq::socket_t& sock, const std::string& peer, const std::string& bytes) {
        sock.send(zmq::buffer(peer), zmq::send_flags::sndmore);
        sock.send(zmq::buffer(bytes), zmq::send_flags::none);
    }
    void run() {
        zmq::context_t ctx;
        zmq::socket_t sock(ctx, zmq::socket_type::router);
        sock.set(zmq::sockopt::linger, 0);
        sock.bind(endpoint());
        while (!stop_) {
            zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
            zmq::poll(&item, 1, std::chrono::milliseconds(5));
            if (!(item.revents & ZMQ_POLLIN)) continue;
            zmq::message_t peer_msg, body;
            if (!sock.recv(peer_msg, zmq::recv_flags::dontwait)) continue;
            (void)sock.recv(body, zmq::recv_flags::none);
            const std::string peer = peer_msg.to_string();
            zmoe::client_request req;
            try {
                req = zmoe::decode_client_request({body.data<char>(), body.size()});
            } catch (const zmoe::error&) {
                continue;
            }
            if (auto* g = std::get_if<zmoe::client_generate>(&req)) {
                std::string output;
                size_t step = 1;
                {
                    std::lock_guard<std::mutex> lock(mutex_);
                    output = output_;
                    step = delta_bytes_;
                }
                // Each of the n sequences writes the output, their deltas interleaved.
                std::vector<uint32_t> tokens(g->n, 0);
                for (size_t at = 0; at < output.size(); at += step) {
                    for (uint32_t i = 0; i < g->n; ++i) {
                        zmoe::client_delta d;
                        d.client_request_id = g->client_request_id;
                        d.index = i;
                        d.token_ids = {static_cast<int32_t>(++tokens[i])};
                        d.text = output.substr(at, step);
                        d.prompt_tokens = 5;
                        d.completion_tokens = tokens[i];
                        d.finished = at + step >= output.size();
                        d.reason = d.finished ? zmoe::finish_reason::stop : zmoe::finish_reason::none;
                        send(sock, peer, encode(d));
                    }
                }
            } else if (std::holds_alternative<zmoe::client_heartbeat>(req)) {
                send(sock, peer, encode(zmoe::client_heartbeat{}));
            } else if (auto* h = std::get_if<zmoe::client_health>(&req)) {
                zmoe::client_health_reply r;
                r.tag = h->tag;
                r.status = "ok";
                r.model = "scripted";
                r.version = "fake";
                send(sock, peer, encode(r));
            }
        }
    }

    int port_;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::string output_;
    size_t delta_bytes_ = 1;
};

struct gateway {
    temp_dir dir;
    int port = free_port();
    scripted_frontend fe{free_port()};
    zmoe::child_process proc;

    explicit gateway(const std::vector<std::string>& flags) {
        std::vector<std::string> argv = {kZmoe,         "api-server", "--endpoint",
                                         fe.endpoint(), "--port",     std::to_string(port)};
        argv.insert(argv.end(), flags.begin(), flags.end());
        proc = zmoe::child_process::spawn(argv);
        const auto deadline = std::chrono::steady_clock::now() + 30s;
        while (std::chrono::steady_clock::now() < deadline && proc.running()) {
            if (post("/health", "").status == 200) return;
            std::this_thread::sleep_for(100ms);
        }
        ADD_FAILURE() << "the gateway did not become healthy";
    }
    ~gateway() {
        if (proc.running()) {
            proc.kill(SIGTERM);
            if (!proc.wait_for(10s)) {
                proc.kill(SIGKILL);
                proc.wait();
            }
        }
    }
    struct reply {
        int status = 0;
        std::string body;
    };
    reply post(const std::string& path, const std::string& body) const {
        const std::string body_file = dir / "body.json", out_file = dir / "out.txt";
        std::string cmd = "curl -s -N --max-time 20 -o " + out_file + " -w '%{http_code}' ";
        if (!body.empty()) {
            std::ofstream(body_file) << body;
            cmd += "-H 'Content-Type: application/json' --data-binary @" + body_file + " ";
        }
        cmd += "'http://127.0.0.1:" + std::to_string(port) + path + "'";
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

std::vector<ojson> sse_chunks(const std::string& body) {
    std::vector<ojson> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
        const size_t end = body.find("\n\n", pos);
        const std::string data = body.substr(pos + 6, end - pos - 6);
        if (data != "[DONE]") out.push_back(ojson::parse(data));
        pos = end;
    }
    return out;
}

const std::string kTools =
    R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", )"
    R"("properties": {"city": {"type": "string"}}}}}])";

std::string request(const std::string& extra, bool stream) {
    return R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], )" + kTools + extra +
           (stream ? R"(, "stream": true})" : "}");
}

const std::string kOutput =
    "<think>\nThe user wants <tool_call> weather.\n</think>\n\nLet me look.\n<tool_call>\n{\"name\": \"get_weather\", "
    "\"arguments\": {\"city\": \"Paris \\u00e9 🙂\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
    "\"arguments\": {\"city\": \"Tokyo\"}}\n</tool_call>";

/// The stream's chunks folded into one message the way a client does it.
ojson fold(const std::vector<ojson>& chunks, std::string& finish_reason, int& finish_chunks) {
    std::string content, reasoning;
    bool any_content = false, any_reasoning = false;
    ojson calls = ojson::array();
    for (const ojson& c : chunks) {
        if (c["choices"].empty()) continue;
        const ojson& choice = c["choices"][0];
        if (!choice["finish_reason"].is_null()) {
            finish_reason = choice["finish_reason"];
            ++finish_chunks;
        }
        const ojson& d = choice["delta"];
        if (d.contains("content")) {
            content += d["content"].get<std::string>();
            any_content = true;
        }
        if (d.contains("reasoning_content")) {
            EXPECT_EQ(d["reasoning_content"], d["reasoning"]);
            reasoning += d["reasoning_content"].get<std::string>();
            any_reasoning = true;
        }
        if (d.contains("tool_calls")) {
            EXPECT_EQ(d["tool_calls"].size(), 1u);
            const ojson& t = d["tool_calls"][0];
            const size_t i = t["index"];
            if (t.contains("id")) {  // a call's first delta: id, type and name, no arguments yet
                EXPECT_EQ(i, calls.size());
                EXPECT_EQ(t["type"], "function");
                EXPECT_EQ(t["function"]["arguments"], "");
                calls.push_back({{"id", t["id"]},
                                 {"type", "function"},
                                 {"function", {{"name", t["function"]["name"]}, {"arguments", ""}}}});
            } else {
                EXPECT_FALSE(t["function"].contains("name"));
                EXPECT_LT(i, calls.size());
                calls[i]["function"]["arguments"] = calls[i]["function"]["arguments"].get<std::string>() +
                                                    t["function"]["arguments"].get<std::string>();
            }
        }
    }
    ojson m = {{"role", "assistant"}, {"content", any_content && !content.empty() ? ojson(content) : ojson()}};
    m["reasoning_content"] = any_reasoning ? ojson(reasoning) : ojson();
    if (!calls.empty()) m["tool_calls"] = calls;
    return m;
}

TEST(HttpGatewayTools, AutoToolCallsAndReasoningStreamedAndNot) {
    gateway gw({"--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"});
    for (size_t delta_bytes : {1, 3, 7, 64, 4096}) {
        gw.fe.script(kOutput, delta_bytes);
        const auto whole = gw.post("/v1/chat/completions", request("", false));
        ASSERT_EQ(whole.status, 200) << whole.body;
        const ojson resp = ojson::parse(whole.body);
        const ojson& choice = resp["choices"][0];
        EXPECT_EQ(choice["finish_reason"], "tool_calls");
        const ojson& m = choice["message"];
        EXPECT_EQ(m["content"], "\n\nLet me look.");  // the layout before the call is dropped, not the text's
        EXPECT_EQ(m["reasoning_content"], "\nThe user wants <tool_call> weather.\n");
        EXPECT_EQ(m["reasoning"], m["reasoning_content"]);
        ASSERT_EQ(m["tool_calls"].size(), 2u);
        for (const ojson& c : m["tool_calls"]) {
            EXPECT_EQ(c["type"], "function");
            EXPECT_EQ(c["function"]["name"], "get_weather");
            EXPECT_EQ(c["id"].get<std::string>().rfind("call_", 0), 0u);
            EXPECT_EQ(c["id"].get<std::string>().size(), 29u);
        }
        EXPECT_EQ(ojson::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>())["city"],
                  "Paris é 🙂");
        EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], "{\"city\": \"Tokyo\"}");
        EXPECT_NE(m["tool_calls"][0]["id"], m["tool_calls"][1]["id"]);

        const auto streamed = gw.post("/v1/chat/completions", request("", true));
        ASSERT_EQ(streamed.status, 200);
        const std::vector<ojson> chunks = sse_chunks(streamed.body);
        ASSERT_FALSE(chunks.empty());
        EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        std::string finish;
        int finish_chunks = 0;
        ojson folded = fold(chunks, finish, finish_chunks);
        EXPECT_EQ(finish, "tool_calls");
        EXPECT_EQ(finish_chunks, 1);
        // Equal to the non-streamed message but for the ids (each request draws new ones).
        ojson expected = m;
        expected.erase("reasoning");
        for (size_t i = 0; i < folded["tool_calls"].size(); ++i) {
            EXPECT_EQ(folded["tool_calls"][i]["id"].get<std::string>().size(), 29u);
            folded["tool_calls"][i]["id"] = expected["tool_calls"][i]["id"];
        }
        EXPECT_EQ(folded, expected) << "deltas of " << delta_bytes << " bytes";
        // The arguments arrive in their own deltas, after each call's start.
        if (delta_bytes == 1) {
            int fragments = 0;
            for (const ojson& c : chunks)
                if (!c["choices"].empty() && c["choices"][0]["delta"].contains("tool_calls") &&
                    !c["choices"][0]["delta"]["tool_calls"][0].contains("id"))
                    ++fragments;
            EXPECT_GE(fragments, 2);  // deltas that arrive while a write is in flight coalesce
        }
    }
}

TEST(HttpGatewayTools, NoneAndThinkingOffAndMalformed) {
    gateway gw({"--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"});
    gw.fe.script(kOutput, 5);
    // tool_choice none: the calls stay text; the reasoning split still happens.
    ojson m = ojson::parse(gw.post("/v1/chat/completions", request(R"(, "tool_choice": "none")", false)).body);
    EXPECT_EQ(m["choices"][0]["finish_reason"], "stop");
    EXPECT_FALSE(m["choices"][0]["message"].contains("tool_calls"));
    EXPECT_NE(m["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"), std::string::npos);
    EXPECT_FALSE(m["choices"][0]["message"]["reasoning_content"].is_null());
    // enable_thinking false: no reasoning split (the output is content as written).
    m = ojson::parse(
        gw.post("/v1/chat/completions",
                request(R"(, "tool_choice": "none", "chat_template_kwargs": {"enable_thinking": false})", false))
            .body);
    EXPECT_EQ(m["choices"][0]["message"]["content"], kOutput);
    EXPECT_FALSE(m["choices"][0]["message"].contains("reasoning_content"));
    // A malformed call is content, streamed or not.
    const std::string bad = "Sure <tool_call>{\"name\": get_weather}</tool_call> done";
    gw.fe.script(bad, 2);
    m = ojson::parse(gw.post("/v1/chat/completions", request("", false)).body);
    EXPECT_EQ(m["choices"][0]["message"]["content"], bad);
    EXPECT_EQ(m["choices"][0]["finish_reason"], "stop");
    std::string finish;
    int n = 0;
    EXPECT_EQ(fold(sse_chunks(gw.post("/v1/chat/completions", request("", true)).body), finish, n)["content"], bad);
    EXPECT_EQ(finish, "stop");
}

// n choices: each parses its own output; the streamed calls of each choice fold into that choice's message.
TEST(HttpGatewayTools, EachOfNChoicesHasItsOwnCalls) {
    gateway gw({"--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"});
    gw.fe.script(kOutput, 4);
    const ojson whole = ojson::parse(gw.post("/v1/chat/completions", request(R"(, "n": 2)", false)).body);
    ASSERT_EQ(whole["choices"].size(), 2u);
    for (const ojson& c : whole["choices"]) {
        EXPECT_EQ(c["finish_reason"], "tool_calls");
        EXPECT_EQ(c["message"]["tool_calls"].size(), 2u);
    }
    EXPECT_NE(whole["choices"][0]["message"]["tool_calls"][0]["id"],
              whole["choices"][1]["message"]["tool_calls"][0]["id"]);
    const std::vector<ojson> chunks = sse_chunks(
        gw.post("/v1/chat/completions", request(R"(, "n": 2, "stream_options": {"include_usage": true})", true)).body);
    for (uint32_t i = 0; i < 2; ++i) {
        std::vector<ojson> mine;
        for (const ojson& c : chunks)
            if (!c["choices"].empty() && c["choices"][0]["index"] == i) mine.push_back(c);
        std::string finish;
        int n = 0;
        ojson folded = fold(mine, finish, n);
        EXPECT_EQ(finish, "tool_calls");
        EXPECT_EQ(n, 1);
        ojson expected = whole["choices"][i]["message"];
        expected.erase("reasoning");
        for (size_t k = 0; k < folded["tool_calls"].size(); ++k)
            folded["tool_calls"][k]["id"] = expected["tool_calls"][k]["id"];
        EXPECT_EQ(folded, expected) << "choice " << i;
    }
    EXPECT_TRUE(chunks.back()["choices"].empty());
    EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], whole["usage"]["completion_tokens"]);
}

TEST(HttpGatewayTools, AutoWithoutAParserIsRefused) {
    gateway gw({});
    gw.fe.script("hello", 2);
    const auto r = gw.post("/v1/chat/completions", request("", false));
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(ojson::parse(r.body)["error"]["param"], "tool_choice");
    // tool_choice none works without one; no reasoning fields without a reasoning parser.
    const ojson m = ojson::parse(gw.post("/v1/chat/completions", request(R"(, "tool_choice": "none")", false)).body);
    EXPECT_EQ(m["choices"][0]["message"]["content"], "hello");
    EXPECT_FALSE(m["choices"][0]["message"].contains("reasoning_content"));
}

// The frontend sends whole characters, but the gateway must not depend on it: a character cut between two deltas
// is held back until it completes, so no streamed chunk carries half of one (JSON would write U+FFFD for it).
TEST(HttpGatewayTools, CharactersCutBetweenDeltasAreWrittenWhole) {
    const std::string text = "h\u00e9 \U0001F642 w\u00f6rld \u65e5\u672c \U0001F600\U0001F600";
    for (bool parse : {false, true}) {
        gateway gw(parse ? std::vector<std::string>{"--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"}
                         : std::vector<std::string>{});
        for (size_t delta_bytes : {1, 2, 3, 5}) {
            gw.fe.script(text, delta_bytes);
            const auto r = gw.post("/v1/chat/completions", request(R"(, "tool_choice": "none")", true));
            ASSERT_EQ(r.status, 200);
            EXPECT_EQ(r.body.find("\xEF\xBF\xBD"), std::string::npos)
                << "U+FFFD in the stream, deltas of " << delta_bytes;
            std::string content;
            for (const ojson& c : sse_chunks(r.body)) {
                if (c["choices"].empty()) continue;
                const ojson& d = c["choices"][0]["delta"];
                if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
            }
            EXPECT_EQ(content, text) << "parsers " << parse << ", deltas of " << delta_bytes;
        }
    }
}

}  // namespace
