#include "actors/async_client.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "tests/actors/fake_frontend.hpp"

namespace zmoe {
namespace {

using namespace std::chrono_literals;

// Every event of every request, by request id, as the socket thread hands them over.
struct recorder {
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::string, std::vector<async_client::event>> events;
    size_t num_ended = 0;

    async_client::event_sink sink(const std::string& name) {
        return [this, name](async_client::event ev) {
            std::lock_guard<std::mutex> lock(mutex);
            const bool terminal = std::holds_alternative<client_error>(ev) || std::get<client_delta>(ev).finished;
            events[name].push_back(std::move(ev));
            num_ended += terminal;
            changed.notify_all();
        };
    }
    bool wait_ended(size_t n, std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(mutex);
        return changed.wait_for(lock, timeout, [&] { return num_ended >= n; });
    }
};

client_generate ids_request(int32_t last_id, uint32_t max_tokens) {
    client_generate g;
    g.prompt = std::vector<int32_t>{7, last_id};
    g.max_tokens = max_tokens;
    return g;
}

client_generate text_request(const std::string& text) {
    client_generate g;
    g.prompt = text;
    return g;
}

TEST(AsyncClient, MultiplexesConcurrentRequestsOnOneConnection) {
    test::fake_frontend server;
    server.start();
    async_client client({.endpoint = server.endpoint()});
    recorder rec;
    constexpr int kRequests = 64;
    std::set<std::string> ids;
    for (int i = 0; i < kRequests; ++i)
        ids.insert(
            client.generate(ids_request(100 * i, static_cast<uint32_t>(1 + i % 7)), rec.sink(std::to_string(i))));
    EXPECT_EQ(ids.size(), static_cast<size_t>(kRequests)) << "ids are unique";
    ASSERT_TRUE(rec.wait_ended(kRequests, 10s));
    std::lock_guard<std::mutex> lock(rec.mutex);
    for (int i = 0; i < kRequests; ++i) {
        const auto& evs = rec.events[std::to_string(i)];
        const uint32_t want = static_cast<uint32_t>(1 + i % 7);
        ASSERT_EQ(evs.size(), want) << i;
        for (uint32_t k = 0; k < want; ++k) {
            const auto& d = std::get<client_delta>(evs[k]);
            EXPECT_EQ(d.token_ids, std::vector<int32_t>{100 * i + 1 + static_cast<int32_t>(k)}) << "in order, its own";
            EXPECT_EQ(d.finished, k + 1 == want);
        }
    }
    EXPECT_EQ(client.health().num_inflight, 0u);
}

TEST(AsyncClient, ErrorsEndTheirRequestAndAbortStopsTheEvents) {
    test::fake_frontend server;
    server.start();
    async_client client({.endpoint = server.endpoint()});
    recorder rec;
    client.generate(text_request("fail"), rec.sink("fail"));
    const std::string hang = client.generate(text_request("hang"), rec.sink("hang"));
    ASSERT_TRUE(rec.wait_ended(1, 5s));
    {
        std::lock_guard<std::mutex> lock(rec.mutex);
        ASSERT_EQ(rec.events["fail"].size(), 1u);
        EXPECT_EQ(std::get<client_error>(rec.events["fail"][0]).code, errc::invalid_argument);
    }
    EXPECT_EQ(client.health().num_inflight, 1u);
    client.abort(hang);
    // The fake answers the abort with a finished delta: the sink is gone by then and hears nothing.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (client.health().num_inflight != 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(client.health().num_inflight, 0u);
    std::lock_guard<std::mutex> lock(rec.mutex);
    EXPECT_TRUE(rec.events["hang"].empty());
}

TEST(AsyncClient, HealthIsPolledAndTokensRepliesTimeOut) {
    test::fake_frontend server;
    server.start();
    async_client client({.endpoint = server.endpoint(), .heartbeat_interval = 100ms, .reply_timeout = 300ms});
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!client.health().health && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    const auto h = client.health();
    ASSERT_TRUE(h.health.has_value());
    EXPECT_TRUE(h.alive);
    EXPECT_EQ(h.health->model, "fake-moe");
    // The fake never answers tokenize: the reply times out as peer_dead.
    std::promise<client_tokens_reply> got;
    client.tokenize({.tag = {}, .text = "x", .chat = {}, .add_special_tokens = true},
                    [&got](client_tokens_reply r) { got.set_value(std::move(r)); });
    auto fut = got.get_future();
    ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(fut.get().code, errc::peer_dead);
    // Metrics are answered.
    std::promise<std::optional<std::string>> metrics;
    client.metrics([&metrics](std::optional<std::string> j) { metrics.set_value(std::move(j)); });
    auto mf = metrics.get_future();
    ASSERT_EQ(mf.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(mf.get(), std::optional<std::string>(R"({"requests":1})"));
}

// Heartbeats go out every interval whatever flows, and a frontend that goes silent is taken for dead within the
// bound: its open requests end with peer_dead.
TEST(AsyncClient, DeadFrontendEndsOpenRequests) {
    auto server = std::make_unique<test::fake_frontend>();
    server->start();
    async_client client({.endpoint = server->endpoint(), .heartbeat_interval = 50ms, .heartbeat_max_missed = 3});
    recorder rec;
    client.generate(text_request("hang"), rec.sink("hang"));
    std::this_thread::sleep_for(500ms);
    const auto before = client.health();
    EXPECT_TRUE(before.alive);
    EXPECT_GE(before.num_heartbeats_sent, 6u);
    EXPECT_LE(before.num_heartbeats_sent, 12u);
    server.reset();  // gone: nothing answers any more
    const auto gone_at = std::chrono::steady_clock::now();
    ASSERT_TRUE(rec.wait_ended(1, 5s));
    EXPECT_LT(std::chrono::steady_clock::now() - gone_at, 2s) << "3 intervals of 50 ms, plus scheduling";
    std::lock_guard<std::mutex> lock(rec.mutex);
    ASSERT_EQ(rec.events["hang"].size(), 1u);
    EXPECT_EQ(std::get<client_error>(rec.events["hang"][0]).code, errc::peer_dead);
    EXPECT_FALSE(client.health().alive);
    // New requests are refused at once while it is dead.
    recorder later;
    client.generate(text_request("hang"), later.sink("x"));
    EXPECT_TRUE(later.wait_ended(1, 1s));
}

}  // namespace
}  // namespace zmoe
