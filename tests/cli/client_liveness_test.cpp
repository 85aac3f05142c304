// Client liveness (docs/reliability.md): a client that is busy reading long streams is alive, whatever it sent
// before, and a client that stops calling into its library is ended with an error that says why.
//
// The regression: a client that heartbeated while it waited for the server to come up, then only read its
// streams, was declared dead 3 heartbeat intervals later and every request of it was aborted (the client library
// heartbeated only after an interval with nothing received; the frontend judged the client by what it sent).
// Here each client starts before the server, waits for it through health() (heartbeating meanwhile), then reads
// 8 long streams for 30 s: 150 of the server's 200 ms heartbeat intervals, so the old behaviour fails at once.

#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <thread>

#include "actors/child_process.hpp"
#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr int kStreams = 8;
constexpr uint32_t kMaxTokens = 3500;  // the demo's context is 4096 tokens: streams long enough to outlast 30 s
constexpr auto kListen = 30s;

/// A demo checkpoint and the command that serves it (heartbeat 200 ms, one sequence running at a time, so the
/// streams of one client outlast the listening window on any machine: the queued ones send nothing for a while,
/// which is when a client that only heartbeats in silence would also be at risk). Not started here: each test
/// starts it after its client is already waiting.
struct demo_checkpoint {
    temp_dir dir;
    int port = free_port();
    std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port); }
    demo_checkpoint() {
        const std::string tokenizer = std::string(ZMOE_SOURCE_DIR) + "/third_party/tokenizers/qwen3";
        if (run_zmoe({"make-demo", "--out", dir / "demo", "--tokenizer", tokenizer}) != 0)
            throw std::runtime_error("make-demo failed");
    }
    zmoe::child_process serve() const {
        return zmoe::child_process::spawn({kZmoe, "serve", "--model", dir / "demo", "--port", std::to_string(port),
                                           "--threads", "1", "--heartbeat-ms", "200", "--max-num-seqs", "2"});
    }
};

void stop(zmoe::child_process& p) {
    if (!p.running()) return;
    p.kill(SIGTERM);
    if (!p.wait_for(30s)) {
        p.kill(SIGKILL);
        p.wait();
    }
}

/// Polls health until "ok" (60 s at most): the client waits for a server that is still starting.
void wait_healthy(zmoe::zmoe_client& c) {
    const auto deadline = clock_type::now() + 60s;
    while (clock_type::now() < deadline) {
        try {
            if (c.health(300ms).status == "ok") return;
        } catch (const zmoe::error&) {
        }
    }
    throw std::runtime_error("the server did not become healthy within 60 s");
}

zmoe::client_generate long_request(int i) {
    zmoe::client_generate g;
    g.client_request_id = "long" + std::to_string(i);
    g.prompt = std::vector<int32_t>{100 + i, 200 + i, 300 + i};
    g.max_tokens = kMaxTokens;
    g.temperature = 0.f;
    g.ignore_eos = true;
    return g;
}

double frontend_counter(const std::string& endpoint, const std::string& name) {
    zmoe::zmoe_client c(endpoint);
    const auto m = nlohmann::json::parse(c.metrics(10s))["frontend"]["counters"];
    return m.contains(name) ? m[name].get<double>() : 0.0;
}

TEST(ClientLiveness, ACppClientReadingLongStreamsFor30sLosesNothing) {
    demo_checkpoint ckpt;
    // The client heartbeats every 400 ms, twice the server's interval: the frontend judges it by its own period.
    zmoe::zmoe_client c(ckpt.endpoint(), {.heartbeat_interval = 400ms, .heartbeat_max_missed = 3});
    auto server = ckpt.serve();
    wait_healthy(c);
    for (int i = 0; i < kStreams; ++i) c.generate(long_request(i));

    std::map<std::string, uint32_t> tokens;
    std::map<std::string, zmoe::finish_reason> finished;
    std::vector<std::string> errors;
    const auto start = clock_type::now();
    while (finished.size() + errors.size() < kStreams && clock_type::now() - start < kListen) {
        auto e = c.next_any(1s);
        if (!e) continue;
        if (auto* d = std::get_if<zmoe::client_delta>(&*e)) {
            tokens[d->client_request_id] += static_cast<uint32_t>(d->token_ids.size());
            if (d->finished) finished[d->client_request_id] = d->reason;
        } else {
            const auto& err = std::get<zmoe::client_error>(*e);
            errors.push_back(err.client_request_id + ": " + err.message);
        }
    }
    const auto listened = clock_type::now() - start;
    EXPECT_TRUE(errors.empty()) << errors.size() << " errors, first: " << (errors.empty() ? "" : errors[0]);
    for (const auto& [id, reason] : finished) {
        EXPECT_EQ(reason, zmoe::finish_reason::length) << id << " ended early";
        EXPECT_EQ(tokens[id], kMaxTokens) << id;
    }
    // Streams still running after the window: the client ends them itself, and each ends with an abort it asked
    // for, having lost none of its tokens so far (the counts only grow from here).
    std::vector<std::string> running;
    for (int i = 0; i < kStreams; ++i) {
        const std::string id = "long" + std::to_string(i);
        if (!finished.count(id)) running.push_back(id);
    }
    EXPECT_TRUE(listened >= kListen || running.empty());
    EXPECT_GT(tokens.size(), 0u) << "no stream produced a token";
    for (const auto& id : running) c.abort(id);
    for (const auto& id : running) {
        for (;;) {
            auto e = c.next(id, 30s);
            ASSERT_TRUE(e.has_value()) << id << ": no terminal after its abort";
            if (auto* err = std::get_if<zmoe::client_error>(&*e)) FAIL() << id << ": " << err->message;
            const auto& d = std::get<zmoe::client_delta>(*e);
            tokens[id] += static_cast<uint32_t>(d.token_ids.size());
            if (d.finished) {
                EXPECT_TRUE(d.reason == zmoe::finish_reason::abort || d.reason == zmoe::finish_reason::length) << id;
                break;
            }
        }
    }
    EXPECT_EQ(frontend_counter(ckpt.endpoint(), "requests_aborted_client_gone"), 0);
    stop(server);
}

TEST(ClientLiveness, AClientThatStopsCallingIsEndedWithAClearError) {
    demo_checkpoint ckpt;
    zmoe::zmoe_client c(ckpt.endpoint(), {.heartbeat_interval = 200ms, .heartbeat_max_missed = 3});
    auto server = ckpt.serve();
    wait_healthy(c);
    c.generate(long_request(0));
    c.generate(long_request(1));
    // Read a little: the client is known to heartbeat and its streams have started.
    int deltas = 0;
    const auto start = clock_type::now();
    while (deltas < 5 && clock_type::now() - start < 30s)
        if (auto e = c.next_any(1s); e && std::holds_alternative<zmoe::client_delta>(*e)) ++deltas;
    ASSERT_GE(deltas, 5);
    // Then it stops calling: no heartbeat for 3 s, 5 times the bound of 3 × 200 ms.
    std::this_thread::sleep_for(3s);
    std::map<std::string, std::string> why;
    const auto deadline = clock_type::now() + 30s;
    while (why.size() < 2 && clock_type::now() < deadline) {
        auto e = c.next_any(1s);
        if (!e) continue;
        if (auto* err = std::get_if<zmoe::client_error>(&*e)) {
            EXPECT_EQ(err->code, zmoe::errc::aborted);
            why[err->client_request_id] = err->message;
        } else if (std::get<zmoe::client_delta>(*e).finished) {
            ADD_FAILURE() << "a stream finished instead of being ended";
            break;
        }
    }
    ASSERT_EQ(why.size(), 2u);
    for (const auto& [id, message] : why) EXPECT_NE(message.find("no heartbeat"), std::string::npos) << message;
    EXPECT_GE(frontend_counter(ckpt.endpoint(), "requests_aborted_client_gone"), 2);
    stop(server);
}

// The same with the Python client (clients/python/zmoe_client.py): its script starts waiting before the server.
TEST(ClientLiveness, APythonClientReadingLongStreamsFor30sLosesNothing) {
    demo_checkpoint ckpt;
    auto script = zmoe::child_process::spawn(
        {ZMOE_PYTHON3, std::string(ZMOE_SOURCE_DIR) + "/tests/cli/python_client_liveness.py", ckpt.endpoint(),
         std::to_string(kStreams), std::to_string(kMaxTokens), std::to_string(std::chrono::seconds(kListen).count())});
    std::this_thread::sleep_for(1500ms);  // the script's client heartbeats while the server is not there yet
    auto server = ckpt.serve();
    const auto rc = script.wait_for(150s);
    if (!rc) {
        script.kill(SIGKILL);
        script.wait();
    }
    EXPECT_EQ(rc.value_or(-1), 0) << "python_client_liveness.py failed (its output is above)";
    if (server.running()) {  // exactly the two the script ended by not calling; none of the listened streams
        EXPECT_EQ(frontend_counter(ckpt.endpoint(), "requests_aborted_client_gone"), 2);
    }
    stop(server);
}

}  // namespace
