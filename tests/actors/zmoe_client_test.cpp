#include "actors/zmoe_client.hpp"

#include <gtest/gtest.h>

#include <map>

#include "actors/actor.hpp"
#include "messages/client_protocol.hpp"

namespace zmoe {
namespace {

using namespace std::chrono_literals;

/// A stand-in for the frontend: "generates" max_tokens tokens, token i = last prompt token + 1 + i, text "<i>",
/// one delta per token (or one final delta when stream is false). A prompt of "fail" gets an error; a prompt of
/// "hang" waits for an abort.
class fake_frontend : public actor {
  public:
    fake_frontend() : actor("fake_frontend") {
        sock_ = add_socket(socket_kind::router, [this](const inbound_message& m) { on_message(m); });
        endpoint_ = bind(sock_, "tcp://127.0.0.1:*");
    }
    ~fake_frontend() override {
        request_stop();
        join();
    }
    const std::string& endpoint() const { return endpoint_; }

  private:
    void on_message(const inbound_message& m) {
        std::string peer(m.peer);
        std::visit([&](const auto& msg) { handle(peer, msg); }, decode_client_request(m.payload));
    }
    void handle(const std::string& peer, const client_generate& g) {
        if (const auto* text = std::get_if<std::string>(&g.prompt)) {
            if (*text == "fail") {
                send_to(sock_, peer, encode(client_error{g.client_request_id, errc::invalid_argument, "bad prompt"}));
                return;
            }
            if (*text == "hang") {
                hanging_[g.client_request_id] = peer;
                return;
            }
        }
        int32_t base = 0;
        uint32_t num_prompt = 1;
        if (const auto* ids = std::get_if<std::vector<int32_t>>(&g.prompt)) {
            base = ids->empty() ? 0 : ids->back();
            num_prompt = static_cast<uint32_t>(ids->size());
        }
        client_delta all{g.client_request_id, {}, "", true, finish_reason::length, num_prompt, g.max_tokens};
        for (uint32_t i = 0; i < g.max_tokens; ++i) {
            client_delta d{g.client_request_id,
                           {base + 1 + static_cast<int32_t>(i)},
                           std::string("<").append(std::to_string(i)).append(">"),
                           i + 1 == g.max_tokens,
                           i + 1 == g.max_tokens ? finish_reason::length : finish_reason::none,
                           num_prompt,
                           i + 1};
            all.token_ids.push_back(d.token_ids[0]);
            all.text += d.text;
            if (g.stream) send_to(sock_, peer, encode(d));
        }
        if (!g.stream) send_to(sock_, peer, encode(all));
    }
    void handle(const std::string& peer, const client_abort& a) {
        auto it = hanging_.find(a.client_request_id);
        if (it == hanging_.end()) return;
        send_to(sock_, peer, encode(client_delta{a.client_request_id, {}, "", true, finish_reason::abort, 1, 0}));
        hanging_.erase(it);
    }
    void handle(const std::string& peer, const client_health& h) {
        send_to(sock_, peer, encode(client_health_reply{h.tag, "ok", "fake-moe", 2, 2, 0, 0, 1.5, "test"}));
    }
    void handle(const std::string& peer, const client_metrics& m) {
        send_to(sock_, peer, encode(client_metrics_reply{m.tag, R"({"requests":1})"}));
    }
    void handle(const std::string& peer, const client_heartbeat&) { send_to(sock_, peer, encode(client_heartbeat{})); }

    socket_id sock_;
    std::string endpoint_;
    std::map<std::string, std::string> hanging_;
};

client_generate request_with_ids(std::vector<int32_t> ids, uint32_t max_tokens, bool stream = true) {
    client_generate g;
    g.prompt = std::move(ids);
    g.max_tokens = max_tokens;
    g.stream = stream;
    return g;
}

TEST(ZmoeClient, StreamsDeltasPerRequest) {
    fake_frontend server;
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
    fake_frontend server;
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
    fake_frontend server;
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
    fake_frontend server;
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

TEST(ZmoeClient, HealthMetricsAndTimeouts) {
    fake_frontend server;
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
