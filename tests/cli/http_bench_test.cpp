// The HTTP client of `zmoe bench serve --base-url` against a small OpenAI-like SSE server in this process
// (loopback, a thread per connection): kept-alive connections reused, the concurrency cap held, a connection the
// server closed between requests replaced, and each kind of failure recorded with its reason. Plus the URL and
// request-body helpers.

#include "cli/http_bench.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/error.hpp"

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using zmoe::cli::http_bench_target;
using zmoe::cli::openai_endpoint_type;
using zmoe::cli::serve_bench_params;

namespace {

TEST(HttpBench, ParsesBaseUrls) {
    auto u = zmoe::cli::parse_http_url("http://127.0.0.1:8000");
    EXPECT_EQ(u.host, "127.0.0.1");
    EXPECT_EQ(u.port, 8000);
    EXPECT_EQ(u.prefix, "");
    u = zmoe::cli::parse_http_url("http://example.org/api/");
    EXPECT_EQ(u.host, "example.org");
    EXPECT_EQ(u.port, 80);
    EXPECT_EQ(u.prefix, "/api");
    u = zmoe::cli::parse_http_url("http://[::1]:9000/x");
    EXPECT_EQ(u.host, "::1");
    EXPECT_EQ(u.port, 9000);
    EXPECT_EQ(u.prefix, "/x");
    for (const char* bad : {"https://h:1", "h:1", "http://:80", "http://h:0", "http://h:65536", "http://h:8x",
                            "http://[::1", "http://[::1]x"}) {
        try {
            zmoe::cli::parse_http_url(bad);
            ADD_FAILURE() << bad << " was accepted";
        } catch (const zmoe::error& e) {
            EXPECT_EQ(e.code(), zmoe::errc::invalid_argument) << bad;
        }
    }
}

TEST(HttpBench, RequestBodiesAskForAStreamOfExactlyTheTokens) {
    const zmoe::cli::bench_prompt prompt{.token_ids = {5, 6, 7}, .output_len = 9};
    const auto c =
        nlohmann::json::parse(zmoe::cli::openai_request_body(openai_endpoint_type::completions, "m", prompt, "", 0.f));
    EXPECT_EQ(c["model"], "m");
    EXPECT_EQ(c["prompt"], nlohmann::json::array({5, 6, 7}));
    EXPECT_EQ(c["max_tokens"], 9);
    EXPECT_EQ(c["temperature"], 0.0);
    EXPECT_EQ(c["ignore_eos"], true);
    EXPECT_EQ(c["stream"], true);
    EXPECT_EQ(c["stream_options"]["include_usage"], true);
    EXPECT_FALSE(c.contains("messages"));
    const auto h =
        nlohmann::json::parse(zmoe::cli::openai_request_body(openai_endpoint_type::chat, "m", prompt, "hi", 0.5f));
    EXPECT_EQ(h["messages"], nlohmann::json::parse(R"([{"role":"user","content":"hi"}])"));
    EXPECT_EQ(h["temperature"], 0.5);
    EXPECT_FALSE(h.contains("prompt"));
}

/// What the fake server does with the n-th completion request (0-based).
enum class answer { stream, http_500, cut_mid_stream, error_event, hang, until_close };

/// An OpenAI-like server on a loopback port: GET /health, GET /v1/models, and POST /v1/completions answered by
/// `behaviour` with max_tokens chunks of one character each, a usage chunk and [DONE] (chunked encoding).
class fake_openai_server {
  public:
    std::function<answer(int)> behaviour = [](int) { return answer::stream; };
    bool close_after_each = false;  ///< close every connection after its answer, though it said keep-alive

    fake_openai_server() : acceptor_(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)) {
        accept_thread_ = std::thread([this] { accept_loop(); });
    }
    ~fake_openai_server() {
        stopping_ = true;
        beast::error_code ec;
        {  // a blocking accept() is not woken by closing its socket: a connection wakes it
            tcp::socket wake(ioc_);
            wake.connect(acceptor_.local_endpoint(), ec);
            accept_thread_.join();
        }
        acceptor_.close(ec);
        std::lock_guard lock(mu_);
        for (auto& s : sockets_) s->shutdown(tcp::socket::shutdown_both, ec);
        for (auto& t : threads_) t.join();
    }
    std::string base_url() const { return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }

    std::atomic<int> connections{0}, completions{0}, in_flight{0}, max_in_flight{0};

  private:
    void accept_loop() {
        for (;;) {
            auto socket = std::make_shared<tcp::socket>(ioc_);
            beast::error_code ec;
            acceptor_.accept(*socket, ec);
            if (ec || stopping_) return;
            ++connections;
            std::lock_guard lock(mu_);
            sockets_.push_back(socket);
            threads_.emplace_back([this, socket] { serve(*socket); });
        }
    }

    static void write(tcp::socket& s, const std::string& bytes) {
        beast::error_code ec;
        net::write(s, net::buffer(bytes), ec);
    }
    static void chunk(tcp::socket& s, const std::string& data) {
        char size[16];
        std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
        write(s, size + data + "\r\n");
    }

    void serve(tcp::socket& s) {
        beast::flat_buffer buffer;
        for (;;) {
            http::request<http::string_body> req;
            beast::error_code ec;
            http::read(s, buffer, req, ec);
            if (ec) return;
            if (req.target() == "/health") {
                write(s, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            } else if (req.target() == "/v1/models") {
                const std::string body = R"({"object":"list","data":[{"id":"fake","object":"model"}]})";
                write(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n" + body);
            } else if (!stream(s, req)) {
                return;
            }
            if (close_after_each || !req.keep_alive()) {
                s.shutdown(tcp::socket::shutdown_both, ec);
                return;
            }
        }
    }

    /// One completion; false when the connection is to be dropped.
    bool stream(tcp::socket& s, const http::request<http::string_body>& req) {
        const int n = completions++;
        const int now = ++in_flight;
        for (int m = max_in_flight.load(); now > m && !max_in_flight.compare_exchange_weak(m, now);) {
        }
        // Leaves the in-flight count before the answer's last bytes go out: once the client has those it may open
        // its next request's connection, whose thread can count itself in before this one returns.
        struct leave {
            std::atomic<int>& v;
            bool done = false;
            void now() {
                if (!done) --v;
                done = true;
            }
            ~leave() { now(); }
        } leave_{in_flight};
        const auto body = nlohmann::json::parse(req.body());
        const int tokens = body["max_tokens"].get<int>();
        const answer a = behaviour(n);
        if (a == answer::http_500) {
            const std::string err = R"({"error":{"message":"boom","code":500}})";
            leave_.now();
            write(s, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: " +
                         std::to_string(err.size()) + "\r\n\r\n" + err);
            return true;
        }
        if (a == answer::hang) {  // says nothing for 3 s, then drops the connection
            std::this_thread::sleep_for(std::chrono::seconds(3));
            return false;
        }
        if (a == answer::until_close) {  // no length, no chunks: the body ends when the connection does
            write(s, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
            for (int i = 0; i < tokens; ++i) write(s, "data: {\"choices\":[{\"text\":\"x\"}]}\n\n");
            leave_.now();
            write(s, "data: [DONE]\n\n");
            beast::error_code ec;
            s.shutdown(tcp::socket::shutdown_both, ec);
            return false;
        }
        write(s, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
        for (int i = 0; i < tokens; ++i) {
            if (a == answer::cut_mid_stream && i == 1) {
                chunk(s, "data: {\"choices\":[{\"text\":\"");  // half an event, then the connection goes
                beast::error_code ec;
                s.shutdown(tcp::socket::shutdown_both, ec);
                return false;
            }
            if (a == answer::error_event && i == 1) {
                chunk(s, "data: {\"error\":{\"message\":\"the engine died\",\"code\":503}}\n\n");
                break;
            }
            chunk(s, "data: {\"choices\":[{\"index\":0,\"text\":\"x\",\"finish_reason\":null}]}\n\n");
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        leave_.now();
        if (a == answer::stream)
            chunk(s, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":" + std::to_string(body["prompt"].size()) +
                         ",\"completion_tokens\":" + std::to_string(tokens) + "}}\n\n");
        chunk(s, "data: [DONE]\n\n");
        write(s, "0\r\n\r\n");
        return true;
    }

    net::io_context ioc_;
    tcp::acceptor acceptor_;
    std::atomic<bool> stopping_{false};
    std::thread accept_thread_;
    std::mutex mu_;
    std::vector<std::shared_ptr<tcp::socket>> sockets_;
    std::vector<std::thread> threads_;
};

serve_bench_params params(uint32_t n, uint32_t cap) {
    serve_bench_params p;
    p.num_prompts = n;
    p.input_len = 6;
    p.output_len = 5;
    p.max_concurrency = cap;
    p.vocab_size = 1000;
    p.timeout_s = 30;
    return p;
}

TEST(HttpBench, KeptAliveConnectionsAreReusedUnderTheCap) {
    fake_openai_server server;
    http_bench_target t{.base_url = server.base_url()};
    const auto run = zmoe::cli::run_http_bench(params(12, 3), t, 10.0);
    ASSERT_EQ(run.records.size(), 12u);
    for (const auto& r : run.records) {
        EXPECT_TRUE(r.success) << r.error;
        EXPECT_EQ(r.output_tokens, 5u);
        EXPECT_EQ(r.prompt_tokens, 6u);
        EXPECT_EQ(r.itl_s.size(), 4u);
        EXPECT_LE(r.ttft_s, r.latency_s);
    }
    EXPECT_EQ(run.served_model, "fake");
    EXPECT_LE(server.max_in_flight.load(), 3);
    // Two connections for /health and /v1/models, then at most one per slot of the cap.
    EXPECT_LE(server.connections.load(), 2 + 3);
}

TEST(HttpBench, ConnectionPerRequestWithoutKeepAlive) {
    fake_openai_server server;
    http_bench_target t{.base_url = server.base_url(), .model_name = "given", .keep_alive = false};
    const auto run = zmoe::cli::run_http_bench(params(6, 2), t, 10.0);
    for (const auto& r : run.records) EXPECT_TRUE(r.success) << r.error;
    EXPECT_EQ(run.served_model, "given");  // no GET /v1/models
    EXPECT_EQ(server.connections.load(), 1 + 6);
    EXPECT_LE(server.max_in_flight.load(), 2);
}

TEST(HttpBench, AConnectionClosedByTheServerIsReplaced) {
    fake_openai_server server;
    server.close_after_each = true;  // says keep-alive, then closes: each reuse fails and goes again
    const auto run = zmoe::cli::run_http_bench(params(8, 2), {.base_url = server.base_url()}, 10.0);
    for (const auto& r : run.records) EXPECT_TRUE(r.success) << r.error;
    EXPECT_EQ(server.completions.load(), 8);
}

TEST(HttpBench, FailuresAreRecordedWithTheirReasons) {
    fake_openai_server server;
    server.behaviour = [](int n) {
        return n == 1   ? answer::http_500
               : n == 2 ? answer::cut_mid_stream
               : n == 3 ? answer::error_event
                        : answer::stream;
    };
    // One at a time, so request i is the server's i-th.
    const auto run = zmoe::cli::run_http_bench(params(5, 1), {.base_url = server.base_url()}, 10.0);
    ASSERT_EQ(run.records.size(), 5u);
    EXPECT_TRUE(run.records[0].success) << run.records[0].error;
    EXPECT_FALSE(run.records[1].success);
    EXPECT_EQ(run.records[1].error, R"(HTTP 500: {"error":{"message":"boom","code":500}})");
    EXPECT_FALSE(run.records[2].success);
    EXPECT_NE(run.records[2].error.find("reading the response"), std::string::npos) << run.records[2].error;
    EXPECT_FALSE(run.records[3].success);
    EXPECT_EQ(run.records[3].error, "error in the stream: the engine died");
    EXPECT_TRUE(run.records[4].success) << run.records[4].error;
    const auto sum = zmoe::cli::bench_summary(run.records, run.duration_s, {99.0});
    EXPECT_EQ(sum["completed"].get<int>(), 2);
    EXPECT_EQ(sum["failed"].get<int>(), 3);
    EXPECT_EQ(sum["total_output_tokens"].get<int>(), 10);
}

TEST(HttpBench, ABodyEndedByClosingTheConnection) {
    fake_openai_server server;
    server.behaviour = [](int) { return answer::until_close; };
    const auto run = zmoe::cli::run_http_bench(params(4, 2), {.base_url = server.base_url()}, 10.0);
    for (const auto& r : run.records) {
        EXPECT_TRUE(r.success) << r.error;
        EXPECT_EQ(r.output_tokens, 5u);  // no usage: one token per chunk
    }
    EXPECT_EQ(server.connections.load(), 2 + 4);  // none could be reused
}

TEST(HttpBench, AStalledServerFailsTheRestUnsent) {
    fake_openai_server server;
    server.behaviour = [](int) { return answer::hang; };
    auto p = params(3, 1);
    p.timeout_s = 1;
    const auto run = zmoe::cli::run_http_bench(p, {.base_url = server.base_url()}, 10.0);
    ASSERT_EQ(run.records.size(), 3u);
    EXPECT_EQ(run.records[0].error, "no data for 1 s");
    EXPECT_EQ(run.records[1].error, "not sent: the server stalled");
    EXPECT_EQ(run.records[2].error, "not sent: the server stalled");
    EXPECT_EQ(server.completions.load(), 1);
}

TEST(HttpBench, ThousandsOfConcurrentStreamsFromOneProcess) {
    // The cap is the number of prompts: every stream is open at once, on a few I/O threads.
    fake_openai_server server;
    auto p = params(1000, 0);
    p.output_len = 3;
    const auto run = zmoe::cli::run_http_bench(p, {.base_url = server.base_url(), .num_threads = 2}, 60.0);
    size_t ok = 0;
    for (const auto& r : run.records) ok += r.success;
    EXPECT_EQ(ok, 1000u) << run.records[0].error;
    EXPECT_GT(server.max_in_flight.load(), 100);
}

}  // namespace
