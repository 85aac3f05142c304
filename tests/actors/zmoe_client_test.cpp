#include "actors/zmoe_client.hpp"

#include <gtest/gtest.h>

#include <map>

#include "tests/actors/fake_frontend.hpp"

namespace zmoe {
namespace {

using namespace std::chrono_literals;

client_generate request_with_ids(std::vector<int32_t> ids, uint32_t max_tokens, bool stream = true) {
    client_generate g;
    g.prompt = std::move(ids);
    g.max_tokens = max_tokens;
    g.stream = stream;
    return g;
}

TEST(ZmoeClient, StreamsDeltasPerRequest) {
    test::fake_frontend server;
    server.start();
    zmoe_client client(server.endpoint());
    std::string a = client.generate(request_with_ids({10}, 3));
    std::string b = client.generate(request_with_ids({100, 200}, 2));
    EXPECT_NE(a, b);
    EXPECT_EQ(client.num_live(), 2u);
    // Read b's stream first: a's deltas, arriving in between, are kept for later.
    auto cb = client.collect(b, 5000ms);
    EXPECT_EQ(cb.token_ids, (std::vector<int32_t>{201, 202}));
    EXPECT_EQ(cb.reason, finish_reason::length);
    EXPECT_EQ(cb.prompt_tokens, 2u);
    std::vector<int32_t> got;
    for (;;) {
        auto e = client.next(a, 5000ms);
        ASSERT_TRUE(e.has_value());
        auto& d = std::get<client_delta>(*e);
        got.insert(got.end(), d.token_ids.begin(), d.token_ids.end());
        EXPECT_EQ(d.completion_tokens, got.size());
        if (d.finished) break;
    }
    EXPECT_EQ(got, (std::vector<int32_t>{11, 12, 13}));
    EXPECT_EQ(client.num_live(), 0u);
    EXPECT_THROW(client.next(a, 10ms), error);  // finished and drained
}

TEST(ZmoeClient, NonStreamingGivesOneFinalDelta) {
    test::fake_frontend server;
    server.start();
    zmoe_client client(server.endpoint());
    std::string id = client.generate(request_with_ids({5}, 4, false));
    auto e = client.next(id, 5000ms);
    ASSERT_TRUE(e.has_value());
    const auto& d = std::get<client_delta>(*e);
    EXPECT_TRUE(d.finished);
    EXPECT_EQ(d.token_ids, (std::vector<int32_t>{6, 7, 8, 9}));
    EXPECT_EQ(d.text, "<0><1><2><3>");
}

TEST(ZmoeClient, ServerErrorsAreThrownWithTheirCode) {
    test::fake_frontend server;
    server.start();
    zmoe_client client(server.endpoint());
    client_generate g;
    g.prompt = std::string("fail");
    std::string id = client.generate(g);
    try {
        client.collect(id, 5000ms);
        FAIL() << "expected the server's error";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
        EXPECT_STREQ(e.what(), "bad prompt");
    }
}

TEST(ZmoeClient, AbortEndsTheStream) {
    test::fake_frontend server;
    server.start();
    zmoe_client client(server.endpoint());
    client_generate g;
    g.prompt = std::string("hang");
    g.client_request_id = "mine";
    EXPECT_EQ(client.generate(g), "mine");
    EXPECT_THROW(client.generate(g), error);  // id in use
    EXPECT_EQ(client.next("mine", 50ms), std::nullopt);
    client.abort("mine");
    auto c = client.collect("mine", 5000ms);
    EXPECT_EQ(c.reason, finish_reason::abort);
}

TEST(ZmoeClient, HeartbeatsKeepAQuietRequestAlive) {
    test::fake_frontend server;
    server.start();
    // 3 missed = 600 ms: wide enough that a loaded CI machine's scheduling never looks like a dead frontend.
    zmoe_client client(server.endpoint(), {.heartbeat_interval = 200ms, .heartbeat_max_missed = 3});
    client_generate g;
    g.prompt = std::string("hang");
    const auto id = client.generate(g);
    // 10 intervals without a delta: the frontend answers the heartbeats, so this is a plain timeout.
    EXPECT_EQ(client.next(id, 2000ms), std::nullopt);
}

TEST(ZmoeClient, DeadFrontendIsDetectedByHeartbeat) {
    test::fake_frontend server;
    server.echo_heartbeats = false;
    server.start();
    zmoe_client client(server.endpoint(), {.heartbeat_interval = 20ms, .heartbeat_max_missed = 3});
    client_generate g;
    g.prompt = std::string("hang");
    const auto id = client.generate(g);
    try {
        client.next(id, 60s);
        FAIL() << "expected peer_dead";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::peer_dead) << e.what();
    }
}

TEST(ZmoeClient, HealthMetricsAndTimeouts) {
    test::fake_frontend server;
    server.start();
    zmoe_client client(server.endpoint());
    auto h = client.health(5000ms);
    EXPECT_EQ(h.status, "ok");
    EXPECT_EQ(h.model, "fake-moe");
    EXPECT_EQ(client.metrics(5000ms), R"({"requests":1})");

    zmoe_client nobody("tcp://127.0.0.1:1");  // nothing listens there
    auto t0 = std::chrono::steady_clock::now();
    try {
        nobody.health(100ms);
        FAIL() << "expected a timeout";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::peer_dead);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2000ms);
}

}  // namespace
}  // namespace zmoe
