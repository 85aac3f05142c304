// `zmoe serve` end to end: many concurrent streaming clients, hostile clients, a killed worker, SIGTERM, the
// Python client and a two-node launch on loopback.

#include <gtest/gtest.h>
#include <signal.h>

#include <random>
#include <thread>
#include <zmq.hpp>

#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;
using namespace std::chrono_literals;

namespace {

const std::string kModel = kFixtures + "/models/qwen3_moe";

struct server : serve_process {
    explicit server(std::vector<std::string> extra) : serve_process(std::move(extra), kModel) {}
};

zmoe::client_generate greedy(const std::string& id, std::vector<int32_t> prompt, uint32_t max_tokens) {
    zmoe::client_generate g;
    g.client_request_id = id;
    g.prompt = std::move(prompt);
    g.max_tokens = max_tokens;
    g.temperature = 0.f;
    g.ignore_eos = true;
    return g;
}

std::vector<int32_t> prompt_of(int i) {
    std::vector<int32_t> p;
    for (int t = 0; t < 3 + i % 29; ++t) p.push_back(2 + (i * 37 + t * 11) % 500);
    return p;
}

TEST(Serve, SixtyFourConcurrentStreamsMatchOfflineAndStopOnSigterm) {
    constexpr int kClients = 4, kPerClient = 16, kMaxTokens = 12;
    // The reference: the same prompts through `zmoe generate` with one worker.
    temp_dir dir;
    {
        std::ofstream in(dir / "in.jsonl");
        for (int i = 0; i < kClients * kPerClient; ++i)
            in << nlohmann::json{{"prompt_token_ids", prompt_of(i)},
                                 {"max_tokens", kMaxTokens},
                                 {"temperature", 0},
                                 {"ignore_eos", true}}
                      .dump()
               << "\n";
    }
    ASSERT_EQ(run_zmoe({"generate", "--model", kModel, "--input", dir / "in.jsonl", "--output", dir / "ref.jsonl",
                        "--threads", "1"}),
              0);
    const auto ref = read_jsonl(dir / "ref.jsonl");

    server s({"--workers", "2"});
    std::vector<std::vector<std::vector<int32_t>>> got(kClients);
    std::vector<int> streamed_deltas(kClients, 0);
    std::vector<std::thread> threads;
    for (int c = 0; c < kClients; ++c) {
        threads.emplace_back([&, c] {
            zmoe::zmoe_client client(s.endpoint());
            for (int k = 0; k < kPerClient; ++k)
                client.generate(greedy(std::to_string(k), prompt_of(c * kPerClient + k), kMaxTokens));
            got[c].resize(kPerClient);
            int left = kPerClient;
            while (left > 0) {
                auto ev = client.next_any(30s);
                if (!ev) break;
                auto* d = std::get_if<zmoe::client_delta>(&*ev);
                if (!d) break;
                ++streamed_deltas[c];
                auto& v = got[c][std::stoi(d->client_request_id)];
                v.insert(v.end(), d->token_ids.begin(), d->token_ids.end());
                if (d->finished) --left;
            }
        });
    }
    for (auto& t : threads) t.join();
    for (int c = 0; c < kClients; ++c) {
        EXPECT_GT(streamed_deltas[c], kPerClient) << "client " << c << " got no streaming (one delta per request)";
        for (int k = 0; k < kPerClient; ++k)
            EXPECT_EQ(nlohmann::json(got[c][k]), ref[c * kPerClient + k]["token_ids"])
                << "client " << c << " req " << k;
    }
    // Metrics cover every actor.
    {
        zmoe::zmoe_client client(s.endpoint());
        const auto m = nlohmann::json::parse(client.metrics(5s));
        EXPECT_TRUE(m.contains("frontend"));
        EXPECT_TRUE(m.contains("engine_core"));
        EXPECT_TRUE(m.contains("worker_1"));
        EXPECT_GE(m["frontend"]["counters"]["generation_tokens"].get<double>(), kClients * kPerClient * kMaxTokens);
    }
    s.proc.kill(SIGTERM);
    const auto st = s.proc.wait_for(10s);
    ASSERT_TRUE(st.has_value()) << "serve did not exit within 10 s of SIGTERM";
    EXPECT_EQ(*st, 0);
}

TEST(Serve, HostileClientsGetErrorsWhileOthersAreServed) {
    server s({"--workers", "1"});
    zmq::context_t ctx;
    zmq::socket_t evil(ctx, zmq::socket_type::dealer);
    evil.set(zmq::sockopt::linger, 0);
    evil.connect(s.endpoint());
    zmoe::zmoe_client good(s.endpoint());
    good.generate(greedy("g", prompt_of(3), 16));
    // Random bytes, msgpack of the wrong shape, a wrong-typed generate, an unknown kind, an oversized prompt.
    std::mt19937 rng(5);
    int sent = 0;
    for (int i = 0; i < 50; ++i) {
        std::string junk(1 + rng() % 200, '\0');
        for (auto& ch : junk) ch = static_cast<char>(rng());
        evil.send(zmq::buffer(junk), zmq::send_flags::none);
        ++sent;
    }
    const std::vector<std::string> shaped = {
        std::string("\x93\x01\x01\xc0", 4),      // generate with a nil request id and nothing else
        std::string("\x92\x01\x63", 3),          // unknown kind 99
        std::string("\x93\x02\x01\x01", 4),      // wrong protocol version
        std::string("\xdd\xff\xff\xff\xff", 5),  // array claiming 4G elements
    };
    for (const auto& m : shaped) {
        evil.send(zmq::buffer(m), zmq::send_flags::none);
        ++sent;
    }
    // Every hostile frame gets an error reply naming the protocol problem.
    int errors = 0;
    evil.set(zmq::sockopt::rcvtimeo, 3000);
    for (int i = 0; i < sent; ++i) {
        zmq::message_t reply;
        if (!evil.recv(reply)) break;
        auto decoded = zmoe::decode_client_reply(reply.to_string_view());
        if (auto* e = std::get_if<zmoe::client_error>(&decoded)) errors += e->code == zmoe::errc::protocol;
    }
    EXPECT_EQ(errors, sent);
    // Semantically bad requests get clear errors.
    zmoe::client_generate bad = greedy("zero", prompt_of(1), 1);
    bad.max_tokens = 0;
    good.generate(bad);
    zmoe::client_generate oov = greedy("oov", {1, 2, 100000}, 4);
    good.generate(oov);
    zmoe::client_generate longp = greedy("long", std::vector<int32_t>(600, 5), 4);
    good.generate(longp);
    zmoe::client_generate topp = greedy("topp", prompt_of(2), 4);
    topp.top_p = 1.5f;
    good.generate(topp);
    for (const char* id : {"zero", "oov", "long", "topp"}) {
        auto ev = good.next(id, 5s);
        ASSERT_TRUE(ev.has_value()) << id;
        auto* e = std::get_if<zmoe::client_error>(&*ev);
        ASSERT_NE(e, nullptr) << id;
        EXPECT_EQ(e->code, zmoe::errc::invalid_argument) << id << ": " << e->message;
    }
    // Aborting an id that was never sent is a no-op (no reply), and the good request is served in full meanwhile
    // (its events are gathered from the same stream of replies).
    good.abort("never-sent");
    bool good_done = false;
    std::vector<int32_t> good_tokens;
    for (int i = 0; i < 400 && !good_done; ++i) {
        auto ev = good.next_any(10s);
        ASSERT_TRUE(ev.has_value());
        if (auto* e = std::get_if<zmoe::client_error>(&*ev)) {
            ADD_FAILURE() << "unexpected error for '" << e->client_request_id << "': " << e->message;
        } else if (auto* d = std::get_if<zmoe::client_delta>(&*ev); d && d->client_request_id == "g") {
            good_tokens.insert(good_tokens.end(), d->token_ids.begin(), d->token_ids.end());
            if (d->finished) {
                good_done = true;
                EXPECT_EQ(d->reason, zmoe::finish_reason::length);
            }
        }
    }
    EXPECT_TRUE(good_done);
    EXPECT_EQ(good_tokens.size(), 16u);
    // A frame over the 64 MiB limit: the frontend drops that connection, and keeps serving everyone else.
    {
        zmq::socket_t huge(ctx, zmq::socket_type::dealer);
        huge.set(zmq::sockopt::linger, 0);
        huge.connect(s.endpoint());
        huge.send(zmq::buffer(std::string((65u << 20), '\x91')), zmq::send_flags::none);
        std::this_thread::sleep_for(300ms);
    }
    EXPECT_EQ(good.health(5s).status, "ok");
    good.generate(greedy("after", prompt_of(4), 8));
    EXPECT_EQ(good.collect("after", 30s).token_ids.size(), 8u);
    s.proc.kill(SIGTERM);
    EXPECT_EQ(s.proc.wait_for(10s).value_or(-1), 0);
}

TEST(Serve, KilledWorkerFailsItsRequestsWithinTheHeartbeatBound) {
    // One sequence per rank at a time keeps the run long enough to kill a worker in the middle of it.
    server s({"--workers", "2", "--heartbeat-ms", "200", "--failure-grace-ms", "1500", "--max-num-seqs", "1"});
    zmoe::zmoe_client client(s.endpoint());
    for (int k = 0; k < 8; ++k) client.generate(greedy(std::to_string(k), prompt_of(k), 400));
    std::this_thread::sleep_for(200ms);
    const auto victims = find_processes(s.proc.pid(), {" worker ", "--rank 1"});
    ASSERT_EQ(victims.size(), 1u);
    const auto killed_at = std::chrono::steady_clock::now();
    kill(victims[0], SIGKILL);
    int ended = 0, errors = 0;
    while (ended < 8) {
        auto ev = client.next_any(5s);
        ASSERT_TRUE(ev.has_value()) << "a request was left hanging after the worker died";
        if (auto* e = std::get_if<zmoe::client_error>(&*ev)) {
            ++ended;
            ++errors;
            EXPECT_EQ(e->code, zmoe::errc::peer_dead) << e->message;
        } else if (std::get<zmoe::client_delta>(*ev).finished) {
            ++ended;
        }
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
    EXPECT_GT(errors, 0);
    // A bound (3 heartbeats + the failure grace + slack for a loaded CI machine), far below the 600 s a client
    // would wait without heartbeats.
    EXPECT_LT(waited, 3 * 0.2 + 1.5 + 5.0) << "failure detected too late";
    // serve reports the failure and exits non-zero.
    const auto st = s.proc.wait_for(15s);
    ASSERT_TRUE(st.has_value());
    EXPECT_NE(*st, 0);
}

TEST(Serve, PythonClientStreams) {
    server s({"--workers", "1"});
    const std::string script = std::string(ZMOE_SOURCE_DIR) + "/tests/cli/python_client_e2e.py";
    auto p = zmoe::child_process::spawn({ZMOE_PYTHON3, script, s.endpoint()});
    const auto st = p.wait_for(60s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(*st, 0);
    s.proc.kill(SIGTERM);
    EXPECT_EQ(s.proc.wait_for(10s).value_or(-1), 0);
}

TEST(Launch, TwoNodesOnLoopbackServeLikeOne) {
    temp_dir dir;
    const int engine_port = free_port();
    const int port = free_port();
    const std::string launch = std::string(ZMOE_SOURCE_DIR) + "/scripts/launch.sh";
    auto common = [&](int rank) {
        return std::vector<std::string>{"bash",
                                        launch,
                                        "--model",
                                        kModel,
                                        "--nodes",
                                        "2",
                                        "--node-rank",
                                        std::to_string(rank),
                                        "--engine-host",
                                        "127.0.0.1",
                                        "--engine-port",
                                        std::to_string(engine_port),
                                        "--port",
                                        std::to_string(port),
                                        "--node-host",
                                        "127.0.0.1",
                                        "--zmoe",
                                        kZmoe,
                                        "--skip-tokenizer-init"};
    };
    // Both nodes of one run share its secret (launch.sh refuses a multi-node run without one).
    const std::vector<std::string> secret = {"ZMOE_RUN_SECRET=two-node-test-secret"};
    auto node1 = zmoe::child_process::spawn(common(1), secret);
    auto node0 = zmoe::child_process::spawn(common(0), secret);
    zmoe::zmoe_client client("tcp://127.0.0.1:" + std::to_string(port));
    // Whatever happens below, stop both launchers (and so every actor they started) at the end.
    struct stop_launchers {
        zmoe::child_process& a;
        zmoe::child_process& b;
        ~stop_launchers() {
            if (a.running()) a.kill(SIGTERM);
            if (b.running()) b.kill(SIGTERM);
            a.wait_for(15s);
            b.wait_for(15s);
        }
    } guard{node0, node1};
    bool healthy = false;
    for (int i = 0; i < 300 && !healthy; ++i) {
        try {
            healthy = client.health(300ms).status == "ok";
        } catch (const zmoe::error&) {
        }
        if (!healthy) std::this_thread::sleep_for(100ms);
    }
    ASSERT_TRUE(healthy);
    const auto ref = read_json(kModel + "/reference.json");
    const auto& p = ref["prompts"][3];
    client.generate(greedy("r", p["token_ids"].get<std::vector<int32_t>>(), 16));
    const auto done = client.collect("r", 30s);
    const auto want = p["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(done.token_ids, std::vector<int32_t>(want.begin(), want.begin() + 16));
    node0.kill(SIGTERM);
    EXPECT_EQ(node0.wait_for(15s).value_or(-1), 0);
    EXPECT_EQ(node1.wait_for(15s).value_or(-1), 0);
}

}  // namespace

namespace {

TEST(Serve, KilledClientLosesNothingOfOthersAndItsRequestsAreReaped) {
    server s({"--workers", "2", "--max-num-seqs", "2"});
    // A Python client that starts long requests and is then killed mid-stream.
    const std::string code =
        "import sys, time; sys.path.insert(0, '" + std::string(ZMOE_SOURCE_DIR) +
        "/clients/python'); import zmoe_client\n"
        "c = zmoe_client.Client(sys.argv[1])\n"
        "streams = [c.generate(prompt_token_ids=[3, 4, 5, i + 6], max_tokens=450, temperature=0, ignore_eos=True)"
        " for i in range(4)]\n"
        "next(iter(streams[0]))\n"
        "print('streaming', flush=True)\n"
        "time.sleep(60)\n";
    auto doomed = zmoe::child_process::spawn({ZMOE_PYTHON3, "-c", code, s.endpoint()});
    zmoe::zmoe_client client(s.endpoint());
    // Wait until the doomed client's requests are running, then kill it.
    bool running = false;
    for (int i = 0; i < 100 && !running; ++i) {
        const auto h = client.health(2s);
        running = h.num_running >= 1 && h.num_running + h.num_waiting >= 4;
        if (!running) std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(running);
    doomed.kill(SIGKILL);
    doomed.wait();
    // Another client is served in full.
    for (int k = 0; k < 4; ++k) client.generate(greedy("k" + std::to_string(k), prompt_of(k), 20));
    for (int k = 0; k < 4; ++k) {
        const auto done = client.collect("k" + std::to_string(k), 60s);
        EXPECT_EQ(done.token_ids.size(), 20u);
        EXPECT_EQ(done.reason, zmoe::finish_reason::length);
    }
    // The dead client's requests do not run to completion for nobody: they are aborted once their stream has no
    // one to go to.
    bool reaped = false;
    for (int i = 0; i < 100 && !reaped; ++i) {
        const auto h = client.health(2s);
        reaped = h.num_running + h.num_waiting == 0;
        if (!reaped) std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(reaped);
    const auto m = nlohmann::json::parse(client.metrics(5s));
    EXPECT_GE(m["frontend"]["counters"].value("requests_finished{reason=\"abort\"}", 0.0), 1.0) << m["frontend"].dump();
    s.proc.kill(SIGTERM);
    EXPECT_EQ(s.proc.wait_for(10s).value_or(-1), 0);
}

}  // namespace

namespace {

TEST(Serve, KilledEngineCoreFailsEveryRequestAndServeExitsNonZero) {
    server s({"--workers", "1", "--heartbeat-ms", "200", "--failure-grace-ms", "1000", "--max-num-seqs", "1"});
    zmoe::zmoe_client client(s.endpoint());
    for (int k = 0; k < 4; ++k) client.generate(greedy(std::to_string(k), prompt_of(k), 400));
    std::this_thread::sleep_for(200ms);
    const auto victims = find_processes(s.proc.pid(), {" engine-core "});
    ASSERT_EQ(victims.size(), 1u);
    const auto killed_at = std::chrono::steady_clock::now();
    kill(victims[0], SIGKILL);
    int ended = 0;
    while (ended < 4) {
        auto ev = client.next_any(5s);
        ASSERT_TRUE(ev.has_value()) << "a request was left hanging after the engine core died";
        if (auto* e = std::get_if<zmoe::client_error>(&*ev)) {
            ++ended;
            EXPECT_EQ(e->code, zmoe::errc::peer_dead) << e->message;
        } else if (std::get<zmoe::client_delta>(*ev).finished) {
            ++ended;
        }
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
    // A bound (3 heartbeats + the failure grace + slack for a loaded CI machine), far below the 600 s a client
    // would wait without heartbeats.
    EXPECT_LT(waited, 3 * 0.2 + 1.5 + 5.0) << "failure detected too late";
    const auto st = s.proc.wait_for(15s);
    ASSERT_TRUE(st.has_value());
    EXPECT_NE(*st, 0);
}

}  // namespace
