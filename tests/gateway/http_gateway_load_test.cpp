// The gateway's transport under load and abuse, against a fake frontend on loopback (a ZeroMQ ROUTER in this test
// process speaking messages/client_protocol.hpp): generation is not what is measured here, so the fake answers at
// once, or holds each stream open after its first delta for as long as the test wants, which a real engine on two
// CPU cores could not do for 10 000 requests. `zmoe api-server` runs as its own process, so that its RSS and thread
// count can be read from /proc. The real frontend behind the gateway is covered by http_gateway_e2e_test.
//
// Covered: 10 000 concurrent SSE streams held with bounded memory and a fixed number of threads (and all aborted at
// the frontend when their clients close); 1 000 slow-header connections do not delay an honest request (< 100 ms
// added) and are closed at the header timeout; the per-address connection cap; 429 with Retry-After (frontend
// overloaded; in-flight cap); /version, /ping, /load, X-Request-Id; vLLM's metric names with counted histogram
// buckets; heartbeats on schedule while streams flow; a dead or degraded frontend turns /health to 503 and ends
// open streams with an error.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "actors/child_process.hpp"
#include "messages/client_protocol.hpp"
#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;
using namespace std::chrono_literals;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

// ---------------------------------------------------------------------------------------------------------------
// The fake frontend

enum class fake_mode { finish, hold, overloaded };

class fake_frontend {
  public:
    explicit fake_frontend(int port) : port_(port) {
        thread_ = std::thread([this] { run(); });
    }
    ~fake_frontend() {
        stop_ = true;
        thread_.join();
    }
    std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

    void set_mode(fake_mode m) { mode_ = m; }
    /// Silent: reads nothing and answers nothing (a frontend that hangs).
    void set_silent(bool s) { silent_ = s; }
    void set_status(const std::string& s) {
        std::lock_guard<std::mutex> lock(mutex_);
        status_ = s;
    }
    /// The text of each delta after the first of a held stream.
    void set_delta_text(std::string t) {
        std::lock_guard<std::mutex> lock(mutex_);
        delta_text_ = std::move(t);
    }
    /// Held streams get a delta every period (0: none after the first).
    void set_delta_period(std::chrono::milliseconds p) { delta_period_ms_ = static_cast<int>(p.count()); }

    size_t num_generates() const { return generates_; }
    size_t num_aborts() const { return aborts_; }
    size_t num_heartbeats() const { return heartbeats_; }
    size_t num_held() const { return held_count_; }
    /// Ends every held stream with a finished delta.
    void finish_all() { finish_all_ = true; }

  private:
    struct held {
        std::string peer, cid;
        uint32_t n = 1;
        uint32_t tokens = 1;
    };

    void send(zmq::socket_t& sock, const std::string& peer, const std::string& bytes) {
        sock.send(zmq::buffer(peer), zmq::send_flags::sndmore);
        sock.send(zmq::buffer(bytes), zmq::send_flags::none);
    }

    static zmoe::client_delta delta(const std::string& cid, uint32_t index, uint32_t tokens, bool finished) {
        zmoe::client_delta d;
        d.client_request_id = cid;
        d.token_ids = {static_cast<int32_t>(tokens)};
        d.text = "x";
        d.prompt_tokens = 3;
        d.completion_tokens = tokens;
        d.index = index;
        d.finished = finished;
        d.reason = finished ? zmoe::finish_reason::length : zmoe::finish_reason::none;
        return d;
    }

    void run() {
        zmq::context_t ctx;
        zmq::socket_t sock(ctx, zmq::socket_type::router);
        sock.set(zmq::sockopt::linger, 0);
        sock.set(zmq::sockopt::sndhwm, 0);
        sock.set(zmq::sockopt::rcvhwm, 0);
        sock.bind(endpoint());
        std::map<std::string, held> streams;  // peer + cid -> stream
        auto last_tick = clock_type::now();
        while (!stop_) {
            zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
            zmq::poll(&item, 1, std::chrono::milliseconds(5));
            if (finish_all_.exchange(false)) {
                for (auto& [key, h] : streams)
                    for (uint32_t i = 0; i < h.n; ++i) send(sock, h.peer, encode(delta(h.cid, i, ++h.tokens, true)));
                streams.clear();
            }
            const int period = delta_period_ms_;
            if (period > 0 && !silent_ && clock_type::now() - last_tick >= std::chrono::milliseconds(period)) {
                last_tick = clock_type::now();
                std::string text;
                {
                    std::lock_guard<std::mutex> lock(mutex_);
                    text = delta_text_;
                }
                for (auto& [key, h] : streams)
                    for (uint32_t i = 0; i < h.n; ++i) {
                        zmoe::client_delta d = delta(h.cid, i, ++h.tokens, false);
                        d.text = text;
                        send(sock, h.peer, encode(d));
                    }
            }
            held_count_ = streams.size();
            if (silent_ || !(item.revents & ZMQ_POLLIN)) continue;
            for (int batch = 0; batch < 1024; ++batch) {
                zmq::message_t peer_msg, body;
                if (!sock.recv(peer_msg, zmq::recv_flags::dontwait)) break;
                (void)sock.recv(body, zmq::recv_flags::none);
                const std::string peer = peer_msg.to_string();
                zmoe::client_request req;
                try {
                    req = zmoe::decode_client_request({body.data<char>(), body.size()});
                } catch (const zmoe::error&) {
                    continue;
                }
                if (auto* g = std::get_if<zmoe::client_generate>(&req)) {
                    ++generates_;
                    if (mode_ == fake_mode::overloaded) {
                        send(sock, peer,
                             encode(zmoe::client_error{g->client_request_id, zmoe::errc::overloaded,
                                                       "the engine core's queue is full: retry later"}));
                    } else if (mode_ == fake_mode::finish) {
                        for (uint32_t i = 0; i < g->n; ++i) {
                            send(sock, peer, encode(delta(g->client_request_id, i, 1, false)));
                            send(sock, peer, encode(delta(g->client_request_id, i, 2, true)));
                        }
                    } else {
                        for (uint32_t i = 0; i < g->n; ++i)
                            send(sock, peer, encode(delta(g->client_request_id, i, 1, false)));
                        streams[peer + "/" + g->client_request_id] = {peer, g->client_request_id, g->n, 1};
                    }
                } else if (auto* a = std::get_if<zmoe::client_abort>(&req)) {
                    if (streams.erase(peer + "/" + a->client_request_id)) ++aborts_;
                } else if (std::holds_alternative<zmoe::client_heartbeat>(req)) {
                    ++heartbeats_;
                    send(sock, peer, encode(zmoe::client_heartbeat{}));
                } else if (auto* h = std::get_if<zmoe::client_health>(&req)) {
                    zmoe::client_health_reply r;
                    r.tag = h->tag;
                    {
                        std::lock_guard<std::mutex> lock(mutex_);
                        r.status = status_;
                    }
                    r.model = "fake-model";
                    r.num_running = static_cast<uint32_t>(streams.size());
                    r.version = "fake";
                    send(sock, peer, encode(r));
                } else if (auto* m = std::get_if<zmoe::client_metrics>(&req)) {
                    const json all = {{"frontend",
                                       {{"counters", {{"requests_accepted", generates_.load()}}},
                                        {"gauges", json::object()},
                                        {"histograms", json::object()}}},
                                      {"engine_core",
                                       {{"counters", json::object()},
                                        {"gauges",
                                         {{"requests_running", 3},
                                          {"requests_waiting", 2},
                                          {"kv_blocks_used", 25},
                                          {"kv_blocks_total", 100}}},
                                        {"histograms", json::object()}}}};
                    send(sock, peer, encode(zmoe::client_metrics_reply{m->tag, all.dump()}));
                }
            }
        }
    }

    int port_;
    std::thread thread_;
    std::atomic<bool> stop_{false}, silent_{false}, finish_all_{false};
    std::atomic<fake_mode> mode_{fake_mode::finish};
    std::atomic<int> delta_period_ms_{0};
    std::atomic<size_t> generates_{0}, aborts_{0}, heartbeats_{0}, held_count_{0};
    std::mutex mutex_;
    std::string status_ = "ok";
    std::string delta_text_ = "x";
};

// ---------------------------------------------------------------------------------------------------------------
// The gateway process and a raw HTTP client

struct gateway_process {
    int port = free_port();
    zmoe::child_process proc;

    gateway_process(const std::string& endpoint, const std::vector<std::string>& extra) {
        std::vector<std::string> argv = {kZmoe, "api-server", "--endpoint", endpoint, "--port", std::to_string(port)};
        argv.insert(argv.end(), extra.begin(), extra.end());
        proc = zmoe::child_process::spawn(argv);
    }
    ~gateway_process() {
        if (proc.running()) {
            proc.kill(SIGTERM);
            if (!proc.wait_for(10s)) {
                proc.kill(SIGKILL);
                proc.wait();
            }
        }
    }
    /// A line of /proc/PID/status as a number (kB for VmRSS).
    long status_field(const std::string& name) const {
        std::ifstream in("/proc/" + std::to_string(proc.pid()) + "/status");
        std::string line;
        while (std::getline(in, line))
            if (line.rfind(name + ":", 0) == 0) return std::atol(line.c_str() + name.size() + 1);
        return -1;
    }
};

int connect_to(int port, const char* source = nullptr) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (source) {
        sockaddr_in src{};
        src.sin_family = AF_INET;
        inet_pton(AF_INET, source, &src.sin_addr);
        if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
            close(fd);
            return -1;
        }
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

bool send_all(int fd, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
        const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
        if (n <= 0) return false;
        off += static_cast<size_t>(n);
    }
    return true;
}

std::string post(const std::string& path, const std::string& body, const std::string& extra_headers = "") {
    return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra_headers +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string get(const std::string& path, const std::string& extra_headers = "") {
    return "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra_headers + "\r\n";
}

/// Reads until `until` appears in what was read, the peer closes, or the timeout passes.
std::string read_until(int fd, const std::string& until, std::chrono::milliseconds timeout) {
    std::string got;
    const auto deadline = clock_type::now() + timeout;
    char buf[8192];
    while (got.find(until) == std::string::npos) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
        if (left.count() <= 0) break;
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
    }
    return got;
}

struct http_reply {
    int status = 0;
    std::string head, body;
    std::string header(const std::string& name) const {
        std::string lower_head = head;
        std::transform(lower_head.begin(), lower_head.end(), lower_head.begin(), ::tolower);
        std::string key = "\r\n" + name + ": ";
        std::transform(key.begin(), key.end(), key.begin(), ::tolower);
        const size_t p = lower_head.find(key);
        if (p == std::string::npos) return {};
        const size_t start = p + key.size();
        return head.substr(start, head.find("\r\n", start) - start);
    }
};

/// One request on a fresh connection (Connection: close), read to the end.
http_reply http_exchange(int port, const std::string& request, std::chrono::milliseconds timeout = 10s) {
    http_reply r;
    const int fd = connect_to(port);
    if (fd < 0) return r;
    send_all(fd, request);
    const std::string all = read_until(fd, "\x01never", timeout);
    close(fd);
    const size_t split = all.find("\r\n\r\n");
    if (all.rfind("HTTP/1.1 ", 0) != 0 || split == std::string::npos) return r;
    r.status = std::atoi(all.c_str() + 9);
    r.head = all.substr(0, split);
    r.body = all.substr(split + 4);
    return r;
}

/// Waits until the gateway answers /health with 200.
bool wait_healthy(int port, std::chrono::seconds timeout = 30s) {
    const auto deadline = clock_type::now() + timeout;
    while (clock_type::now() < deadline) {
        if (http_exchange(port, get("/health"), 2s).status == 200) return true;
        std::this_thread::sleep_for(50ms);
    }
    return false;
}

double metric(const std::string& text, const std::string& series) {
    const size_t p = text.find("\n" + series + " ");
    return p == std::string::npos ? -1.0 : std::atof(text.c_str() + p + series.size() + 2);
}

const std::string kStream = R"({"prompt": "hi", "max_tokens": 100, "stream": true})";
const std::string kComplete = R"({"prompt": "hi", "max_tokens": 2})";

// Raises this process's descriptor limit to its hard limit; returns the soft limit now in force.
rlim_t raise_nofile() {
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
    return lim.rlim_cur;
}

// ---------------------------------------------------------------------------------------------------------------

// 10 000 SSE streams held open at once, each past its first chunk: the gateway's threads stay as many as with one
// connection, its memory stays bounded, and closing the clients aborts every request at the frontend.
TEST(HttpGatewayLoad, TenThousandStreamsHeldWithBoundedMemoryAndFixedThreads) {
    constexpr int kStreams = 10000;
    if (raise_nofile() < static_cast<rlim_t>(kStreams + 200))
        GTEST_SKIP() << "RLIMIT_NOFILE's hard limit is below " << kStreams + 200 << " descriptors";
    fake_frontend fe(free_port());
    // The gateway starts with the usual soft limit (1024) and must raise it itself.
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = 1024;
    setrlimit(RLIMIT_NOFILE, &lim);
    gateway_process gw(fe.endpoint(), {"--max-connections-per-address", "20000", "--max-inflight", "20000"});
    raise_nofile();
    ASSERT_TRUE(wait_healthy(gw.port));
    ASSERT_EQ(http_exchange(gw.port, post("/v1/completions", kComplete, "Connection: close\r\n")).status, 200);
    // The gateway raised its descriptor limit's soft value to the hard one at start (from 1024).
    {
        std::ifstream limits("/proc/" + std::to_string(gw.proc.pid()) + "/limits");
        std::string line;
        while (std::getline(limits, line) && line.rfind("Max open files", 0) != 0) {
        }
        std::istringstream fields(line.substr(std::string("Max open files").size()));
        long soft = 0, hard = 0;
        fields >> soft >> hard;
        EXPECT_GT(soft, kStreams) << line;
        EXPECT_EQ(soft, hard) << line;
    }
    const long threads_idle = gw.status_field("Threads");
    const long rss_idle_kb = gw.status_field("VmRSS");
    ASSERT_GT(threads_idle, 0);

    fe.set_mode(fake_mode::hold);
    std::vector<int> fds;
    fds.reserve(kStreams);
    const auto t0 = clock_type::now();
    const std::string request = post("/v1/completions", kStream);
    for (int i = 0; i < kStreams; ++i) {
        const int fd = connect_to(gw.port);
        ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
        ASSERT_TRUE(send_all(fd, request));
        fds.push_back(fd);
    }
    // Every stream's first event: a 200 and a first chunk.
    std::vector<std::string> got(kStreams);
    std::vector<bool> ok(kStreams, false);
    int num_ok = 0;
    std::vector<pollfd> pfds(kStreams);
    const auto deadline = clock_type::now() + 90s;
    while (num_ok < kStreams && clock_type::now() < deadline) {
        for (int i = 0; i < kStreams; ++i) pfds[i] = {fds[i], static_cast<short>(ok[i] ? 0 : POLLIN), 0};
        if (poll(pfds.data(), pfds.size(), 1000) <= 0) continue;
        for (int i = 0; i < kStreams; ++i) {
            if (ok[i] || !(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[4096];
            const ssize_t n = recv(fds[i], buf, sizeof buf, MSG_DONTWAIT);
            if (n <= 0) {
                ok[i] = true;  // closed: counted as a failure below
                got[i] += "<closed>";
                ++num_ok;
                continue;
            }
            got[i].append(buf, static_cast<size_t>(n));
            if (got[i].find("data: ") != std::string::npos) {
                ok[i] = true;
                ++num_ok;
            }
        }
    }
    const double open_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    int num_streaming = 0;
    for (int i = 0; i < kStreams; ++i)
        num_streaming += got[i].rfind("HTTP/1.1 200", 0) == 0 && got[i].find("data: ") != std::string::npos;
    EXPECT_EQ(num_streaming, kStreams) << "e.g. " << got[0];
    EXPECT_EQ(fe.num_generates(), static_cast<size_t>(kStreams + 1));

    const long threads_loaded = gw.status_field("Threads");
    const long rss_loaded_kb = gw.status_field("VmRSS");
    std::printf(
        "gateway with %d SSE streams held: RSS %ld MiB (idle %ld MiB), %ld threads (idle %ld); opened in %.1f s\n",
        kStreams, rss_loaded_kb / 1024, rss_idle_kb / 1024, threads_loaded, threads_idle, open_s);
    RecordProperty("gateway_rss_kib_10k_streams", static_cast<int>(rss_loaded_kb));
    RecordProperty("gateway_threads", static_cast<int>(threads_loaded));
    EXPECT_EQ(threads_loaded, threads_idle) << "the gateway's threads grew with its connections";
    // Measured at 42 MiB (11 MiB idle) on x86-64 Debian 12: a few KiB per stream.
    EXPECT_LT(rss_loaded_kb, 256 * 1024) << "10 000 held streams should cost well under 256 MiB";
    const auto load = http_exchange(gw.port, get("/load"));
    ASSERT_EQ(load.status, 200) << load.body;
    EXPECT_EQ(json::parse(load.body)["server_load"], kStreams);

    // The clients go away: every request is aborted at the frontend, and nothing stays in flight.
    for (int fd : fds) close(fd);
    const auto abort_deadline = clock_type::now() + 30s;
    while (fe.num_aborts() < static_cast<size_t>(kStreams) && clock_type::now() < abort_deadline)
        std::this_thread::sleep_for(50ms);
    EXPECT_EQ(fe.num_aborts(), static_cast<size_t>(kStreams));
    EXPECT_EQ(json::parse(http_exchange(gw.port, get("/load")).body)["server_load"], 0);
}

// Median latency of n honest completions, each on its own connection.
double honest_latency_ms(int port, int n) {
    std::vector<double> ms;
    for (int i = 0; i < n; ++i) {
        const auto t = clock_type::now();
        const auto r = http_exchange(port, post("/v1/completions", kComplete, "Connection: close\r\n"), 10s);
        ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t).count());
        if (r.status != 200) return 1e9;
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// 1 000 connections sending their header a line a second (slowloris) delay an honest request by less than 100 ms,
// and each is closed once the header timeout passes.
TEST(HttpGatewayLoad, SlowHeadersDoNotDelayHonestRequestsAndTimeOut) {
    constexpr int kSlow = 1000;
    raise_nofile();
    fake_frontend fe(free_port());
    gateway_process gw(fe.endpoint(), {"--header-timeout", "5"});
    ASSERT_TRUE(wait_healthy(gw.port));
    const double baseline = honest_latency_ms(gw.port, 9);

    std::vector<int> slow;
    for (int i = 0; i < kSlow; ++i) {
        const int fd = connect_to(gw.port);
        ASSERT_GE(fd, 0);
        ASSERT_TRUE(send_all(fd, "POST /v1/completions HTTP/1.1\r\n"));
        slow.push_back(fd);
    }
    const auto started = clock_type::now();
    std::atomic<bool> stop{false};
    std::thread dripper([&] {
        for (int line = 0; !stop; ++line) {
            for (int fd : slow) send_all(fd, "X-Slow-" + std::to_string(line) + ": 1\r\n");
            for (int i = 0; i < 10 && !stop; ++i) std::this_thread::sleep_for(100ms);
        }
    });
    std::this_thread::sleep_for(1500ms);
    const double loaded = honest_latency_ms(gw.port, 9);
    std::printf("honest completion: %.2f ms alone, %.2f ms beside %d slow-header connections\n", baseline, loaded,
                kSlow);
    EXPECT_LT(loaded - baseline, 100.0);

    // The header timeout (5 s) closes them, although they keep sending.
    int closed = 0;
    const auto deadline = started + 9s;
    std::vector<bool> seen(kSlow, false);
    while (closed < kSlow && clock_type::now() < deadline) {
        std::vector<pollfd> p;
        for (int i = 0; i < kSlow; ++i) p.push_back({slow[i], static_cast<short>(seen[i] ? 0 : POLLIN), 0});
        poll(p.data(), p.size(), 200);
        for (int i = 0; i < kSlow; ++i) {
            if (seen[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[256];
            if (recv(slow[i], buf, sizeof buf, MSG_DONTWAIT) <= 0) {
                seen[i] = true;
                ++closed;
            }
        }
    }
    const double closed_after_s = std::chrono::duration<double>(clock_type::now() - started).count();
    stop = true;
    dripper.join();
    for (int fd : slow) close(fd);
    EXPECT_EQ(closed, kSlow) << "slow-header connections still open " << closed_after_s << " s after they began";
    EXPECT_GE(closed_after_s, 4.5);
    const std::string m = http_exchange(gw.port, get("/metrics")).body;
    EXPECT_EQ(metric(m, R"(zmoe_http_header_timeouts_total{actor="gateway"})"), kSlow) << m.substr(0, 2000);
}

// Connections over the per-address cap are answered 503 and closed; another address still gets in.
TEST(HttpGatewayLoad, PerAddressConnectionCap) {
    fake_frontend fe(free_port());
    gateway_process gw(fe.endpoint(), {"--max-connections-per-address", "4"});
    ASSERT_TRUE(wait_healthy(gw.port));
    std::vector<int> idle;
    for (int i = 0; i < 4; ++i) idle.push_back(connect_to(gw.port));
    std::this_thread::sleep_for(200ms);  // accepted and counted
    const int over = connect_to(gw.port);
    ASSERT_GE(over, 0);
    const std::string refused = read_until(over, "\x01never", 5s);
    EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
    close(over);
    // From 127.0.0.2: its own count.
    const int other = connect_to(gw.port, "127.0.0.2");
    ASSERT_GE(other, 0);
    send_all(other, get("/version"));
    const std::string version = read_until(other, "}", 5s);
    EXPECT_EQ(version.rfind("HTTP/1.1 200", 0), 0u) << version;
    close(other);
    // One of the four leaves: a new one from 127.0.0.1 is served.
    close(idle.back());
    idle.pop_back();
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(http_exchange(gw.port, get("/version")).status, 200);
    for (int fd : idle) close(fd);
}

// Back-pressure: the frontend's `overloaded` and the gateway's in-flight cap are 429 with Retry-After.
TEST(HttpGatewayLoad, BackPressureIs429WithRetryAfter) {
    fake_frontend fe(free_port());
    gateway_process gw(fe.endpoint(), {"--max-inflight", "2"});
    ASSERT_TRUE(wait_healthy(gw.port));
    fe.set_mode(fake_mode::overloaded);
    const auto refused = http_exchange(gw.port, post("/v1/completions", kComplete, "Connection: close\r\n"));
    EXPECT_EQ(refused.status, 429) << refused.head << refused.body;
    EXPECT_EQ(refused.header("Retry-After"), "1");
    EXPECT_EQ(json::parse(refused.body)["error"]["type"], "rate_limit_error");

    fe.set_mode(fake_mode::hold);
    std::vector<int> held;
    for (int i = 0; i < 2; ++i) {
        held.push_back(connect_to(gw.port));
        send_all(held.back(), post("/v1/completions", kStream));
        EXPECT_NE(read_until(held.back(), "data: ", 5s).find("data: "), std::string::npos);
    }
    const auto capped = http_exchange(gw.port, post("/v1/completions", kStream, "Connection: close\r\n"));
    EXPECT_EQ(capped.status, 429) << capped.body;
    EXPECT_EQ(capped.header("Retry-After"), "1");
    EXPECT_NE(capped.body.find("in flight"), std::string::npos) << capped.body;
    for (int fd : held) close(fd);
    // Closed clients free their places.
    fe.set_mode(fake_mode::finish);
    const auto deadline = clock_type::now() + 5s;
    int status = 0;
    while (status != 200 && clock_type::now() < deadline) {
        status = http_exchange(gw.port, post("/v1/completions", kComplete, "Connection: close\r\n")).status;
        if (status != 200) std::this_thread::sleep_for(50ms);
    }
    EXPECT_EQ(status, 200);
}

// /version, /ping (GET and POST), /load, X-Request-Id, and vLLM's metric names with their buckets counted.
TEST(HttpGatewayLoad, OperationsRoutesAndMetrics) {
    fake_frontend fe(free_port());
    gateway_process gw(fe.endpoint(), {});
    ASSERT_TRUE(wait_healthy(gw.port));
    const auto version = http_exchange(gw.port, get("/version"));
    ASSERT_EQ(version.status, 200);
    EXPECT_TRUE(json::parse(version.body)["version"].is_string());
    EXPECT_EQ(http_exchange(gw.port, get("/ping")).status, 200);
    EXPECT_EQ(http_exchange(gw.port, post("/ping", "", "Connection: close\r\n")).status, 200);
    EXPECT_EQ(json::parse(http_exchange(gw.port, get("/load")).body)["server_load"], 0);
    EXPECT_EQ(json::parse(http_exchange(gw.port, get("/v1/models")).body)["data"][0]["id"], "fake-model");

    // X-Request-Id: echoed, and the response id's suffix; streamed too.
    const auto tagged =
        http_exchange(gw.port, post("/v1/completions", kComplete, "Connection: close\r\nX-Request-Id: abc-123\r\n"));
    ASSERT_EQ(tagged.status, 200) << tagged.body;
    EXPECT_EQ(tagged.header("X-Request-Id"), "abc-123");
    EXPECT_EQ(json::parse(tagged.body)["id"], "cmpl-abc-123");
    const auto chat = http_exchange(
        gw.port, post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "stream": true})",
                      "Connection: close\r\nX-Request-Id: s-9\r\n"));
    ASSERT_EQ(chat.status, 200) << chat.body;
    EXPECT_EQ(chat.header("X-Request-Id"), "s-9");
    EXPECT_NE(chat.body.find(R"("id":"chatcmpl-s-9")"), std::string::npos) << chat.body;
    EXPECT_NE(chat.body.find("data: [DONE]"), std::string::npos);
    EXPECT_EQ(
        http_exchange(gw.port, post("/v1/completions", kComplete, "Connection: close\r\nX-Request-Id: a b\r\n")).status,
        400);
    // Expect: 100-continue (curl sends it before a body over 1 KiB): the interim answer, then the real one.
    {
        const int fd = connect_to(gw.port);
        const std::string body = R"({"prompt": ")" + std::string(2000, 'a') + R"(", "max_tokens": 2})";
        send_all(fd,
                 "POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nConnection: close\r\n"
                 "Content-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n");
        EXPECT_EQ(read_until(fd, "\r\n\r\n", 5s), "HTTP/1.1 100 Continue\r\n\r\n");
        send_all(fd, body);
        const std::string answer = read_until(fd, "\x01never", 5s);
        EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
        close(fd);
    }
    // HTTP/1.0: a stream without chunked encoding, ended by closing the connection.
    {
        const int fd = connect_to(gw.port);
        const std::string body = R"({"prompt": "hi", "max_tokens": 2, "stream": true})";
        send_all(fd,
                 "POST /v1/completions HTTP/1.0\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
        const std::string answer = read_until(fd, "\x01never", 5s);
        EXPECT_EQ(answer.find("chunked"), std::string::npos) << answer;
        EXPECT_NE(answer.find("\r\n\r\ndata: {"), std::string::npos) << answer;
        EXPECT_NE(answer.find("data: [DONE]\n\n"), std::string::npos) << answer;
        close(fd);
    }
    // Keep-alive with pipelining: three requests in one write, answered in order on one connection.
    {
        const int fd = connect_to(gw.port);
        send_all(fd, "GET /version HTTP/1.1\r\nHost: x\r\n\r\n" +
                         post("/v1/completions", kComplete, "X-Request-Id: p1\r\n") +
                         post("/v1/completions", kComplete, "X-Request-Id: p2\r\nConnection: close\r\n"));
        const std::string all = read_until(fd, "\x01never", 10s);
        close(fd);
        const size_t v = all.find("\"version\""), p1 = all.find("cmpl-p1"), p2 = all.find("cmpl-p2");
        EXPECT_TRUE(v != std::string::npos && p1 != std::string::npos && p2 != std::string::npos) << all;
        EXPECT_LT(v, p1);
        EXPECT_LT(p1, p2);
    }

    // 6 completions so far (tagged, streamed chat, 100-continue, HTTP/1.0, 2 pipelined; the refused one never reached
    // the frontend).
    const std::string m = http_exchange(gw.port, get("/metrics")).body;
    const std::string model = R"(model_name="fake-model")";
    for (const char* h :
         {"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
          "vllm:request_prompt_tokens", "vllm:request_generation_tokens"}) {
        EXPECT_NE(m.find(std::string("# TYPE ") + h + " histogram"), std::string::npos) << h;
    }
    EXPECT_EQ(metric(m, "vllm:e2e_request_latency_seconds_count{" + model + "}"), 6) << m.substr(0, 3000);
    EXPECT_EQ(metric(m, "vllm:e2e_request_latency_seconds_bucket{" + model + R"(,le="+Inf"})"), 6);
    EXPECT_EQ(metric(m, "vllm:time_to_first_token_seconds_count{" + model + "}"), 6);
    // Each request: tokens 1 then 2 in two deltas, one inter-token gap each.
    EXPECT_EQ(metric(m, "vllm:inter_token_latency_seconds_count{" + model + "}"), 6);
    EXPECT_EQ(metric(m, "vllm:request_generation_tokens_bucket{" + model + R"(,le="2"})"), 6);
    EXPECT_EQ(metric(m, "vllm:request_generation_tokens_bucket{" + model + R"(,le="1"})"), 0);
    EXPECT_EQ(metric(m, "vllm:request_prompt_tokens_sum{" + model + "}"), 18);
    EXPECT_EQ(metric(m, "vllm:request_success_total{" + model + R"(,finished_reason="length"})"), 6);
    EXPECT_EQ(metric(m, "vllm:kv_cache_usage_perc{" + model + "}"), 0.25);
    EXPECT_EQ(metric(m, "vllm:num_requests_running{" + model + "}"), 3);
    EXPECT_EQ(metric(m, "vllm:num_requests_waiting{" + model + "}"), 2);
    EXPECT_NE(m.find(R"(zmoe_requests_accepted_total{actor="frontend"})"), std::string::npos);
}

// The gateway heartbeats the frontend on schedule while streams flow (a busy connection is not a silent one).
TEST(HttpGatewayLoad, HeartbeatsFlowWhileStreaming) {
    fake_frontend fe(free_port());
    fe.set_mode(fake_mode::hold);
    fe.set_delta_period(5ms);
    gateway_process gw(fe.endpoint(), {"--heartbeat-ms", "200"});
    ASSERT_TRUE(wait_healthy(gw.port));
    std::vector<int> streams;
    for (int i = 0; i < 8; ++i) {
        streams.push_back(connect_to(gw.port));
        send_all(streams.back(), post("/v1/completions", kStream));
    }
    const size_t before = fe.num_heartbeats();
    // Read the streams for 3 s: deltas every 5 ms each.
    const auto until = clock_type::now() + 3s;
    size_t bytes = 0;
    while (clock_type::now() < until) {
        std::vector<pollfd> p;
        for (int fd : streams) p.push_back({fd, POLLIN, 0});
        poll(p.data(), p.size(), 50);
        for (int fd : streams) {
            char buf[65536];
            const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) bytes += static_cast<size_t>(n);
        }
    }
    const size_t beats = fe.num_heartbeats() - before;
    EXPECT_GT(bytes, 100000u);
    EXPECT_GE(beats, 10u) << "3 s at one heartbeat per 200 ms (15), less a loaded machine's late wake-ups";
    EXPECT_LE(beats, 18u);
    for (int fd : streams) close(fd);
}

// A streaming client that stops reading: what the gateway holds for it stays bounded (deltas coalesce while a
// write is blocked) and after the send timeout its request is ended and aborted at the frontend.
TEST(HttpGatewayLoad, StalledReaderIsEndedAfterTheSendTimeout) {
    fake_frontend fe(free_port());
    fe.set_mode(fake_mode::hold);
    fe.set_delta_text(std::string(16384, 'y'));
    fe.set_delta_period(2ms);  // ~8 MB/s, far more than the socket buffers hold
    gateway_process gw(fe.endpoint(), {"--send-timeout", "2"});
    ASSERT_TRUE(wait_healthy(gw.port));
    const long rss_before_kb = gw.status_field("VmRSS");
    const int fd = connect_to(gw.port);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    send_all(fd, post("/v1/completions", kStream));
    // Never read. The write blocks once the socket buffers are full; 2 s later the request ends.
    const auto deadline = clock_type::now() + 20s;
    while (fe.num_aborts() == 0 && clock_type::now() < deadline) std::this_thread::sleep_for(50ms);
    EXPECT_EQ(fe.num_aborts(), 1u);
    const long rss_after_kb = gw.status_field("VmRSS");
    std::printf("stalled reader: gateway RSS %ld -> %ld KiB\n", rss_before_kb, rss_after_kb);
    const std::string m = http_exchange(gw.port, get("/metrics")).body;
    EXPECT_EQ(metric(m, R"(zmoe_http_send_timeouts_total{actor="gateway"})"), 1);
    close(fd);
}

// A frontend that stops answering: /health turns 503 within the heartbeat bound and an open stream ends with an
// error event; when it answers again, /health is 200 again. A degraded frontend is a 503 too.
TEST(HttpGatewayLoad, DeadOrDegradedFrontendIs503) {
    fake_frontend fe(free_port());
    fe.set_mode(fake_mode::hold);
    gateway_process gw(fe.endpoint(), {"--heartbeat-ms", "200"});
    ASSERT_TRUE(wait_healthy(gw.port));
    const int stream = connect_to(gw.port);
    send_all(stream, post("/v1/completions", kStream));
    ASSERT_NE(read_until(stream, "data: ", 5s).find("data: "), std::string::npos);

    fe.set_silent(true);
    const auto silent_at = clock_type::now();
    int status = 200;
    while (status == 200 && clock_type::now() - silent_at < 5s) {
        status = http_exchange(gw.port, get("/health"), 2s).status;
        if (status == 200) std::this_thread::sleep_for(20ms);
    }
    const double after_s = std::chrono::duration<double>(clock_type::now() - silent_at).count();
    EXPECT_EQ(status, 503);
    EXPECT_LT(after_s, 2.5) << "3 heartbeat intervals of 200 ms, plus scheduling";
    const std::string tail = read_until(stream, "[DONE]", 5s);
    EXPECT_NE(tail.find("\"error\""), std::string::npos) << tail;
    EXPECT_NE(tail.find("stopped answering"), std::string::npos) << tail;
    EXPECT_NE(tail.find("data: [DONE]"), std::string::npos) << tail;
    close(stream);
    // A request while it is dead: 503 at once.
    EXPECT_EQ(http_exchange(gw.port, post("/v1/completions", kComplete, "Connection: close\r\n"), 5s).status, 503);

    fe.set_silent(false);
    EXPECT_TRUE(wait_healthy(gw.port, 5s));
    fe.set_status("degraded");
    const auto degraded_at = clock_type::now();
    http_reply r;
    while (clock_type::now() - degraded_at < 5s) {
        r = http_exchange(gw.port, get("/health"), 2s);
        if (r.status == 503) break;
        std::this_thread::sleep_for(20ms);
    }
    EXPECT_EQ(r.status, 503);
    EXPECT_NE(r.body.find("degraded"), std::string::npos) << r.body;
    EXPECT_EQ(http_exchange(gw.port, get("/ping")).status, 503);
}

// Over-long headers and bodies: 431 and 413.
TEST(HttpGatewayLoad, HeaderAndBodyLimits) {
    fake_frontend fe(free_port());
    gateway_process gw(fe.endpoint(), {"--max-header-bytes", "4096", "--max-body-bytes", "65536"});
    ASSERT_TRUE(wait_healthy(gw.port));
    const auto big_header = http_exchange(gw.port, get("/version", "X-Big: " + std::string(8000, 'a') + "\r\n"));
    EXPECT_EQ(big_header.status, 431) << big_header.head;
    const auto big_body =
        http_exchange(gw.port, post("/v1/completions", std::string(100000, ' '), "Connection: close\r\n"));
    EXPECT_EQ(big_body.status, 413) << big_body.head;
    EXPECT_EQ(http_exchange(gw.port, get("/version")).status, 200);
}

}  // namespace
