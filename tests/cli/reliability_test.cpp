// Reliability of `zmoe serve` under load, faults and hostile input (docs/reliability.md lists what each test
// proves). Every test starts its own server on loopback, bounds its waits, and stops the server by pid.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "messages/client_protocol.hpp"
#include "messages/engine_protocol.hpp"
#include "messages/msgpack_writer.hpp"
#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;
using namespace std::chrono_literals;

namespace {

const std::string kModel = kFixtures + "/models/qwen3_moe";

/// Every server of these tests runs the qwen3_moe fixture unless told otherwise.
struct server : serve_process {
    explicit server(std::vector<std::string> extra, const std::string& model = kModel,
                    std::vector<std::string> env = {})
        : serve_process(std::move(extra), model, std::move(env)) {}
};

double counter(const nlohmann::json& counters, const std::string& name) {
    return counters.contains(name) ? counters[name].get<double>() : 0.0;
}

/// A client that speaks the wire protocol by hand: to send what a well-behaved client would not, and to read
/// (or not read) at its own pace.
struct raw_client {
    zmq::context_t ctx;
    zmq::socket_t sock{ctx, zmq::socket_type::dealer};
    explicit raw_client(const std::string& endpoint, int rcvhwm = 1000) {
        sock.set(zmq::sockopt::linger, 0);
        sock.set(zmq::sockopt::rcvhwm, rcvhwm);
        sock.set(zmq::sockopt::sndhwm, 0);
        sock.connect(endpoint);
    }
    void send(const std::string& bytes) { sock.send(zmq::buffer(bytes), zmq::send_flags::none); }
    std::optional<zmoe::client_reply> recv(std::chrono::milliseconds timeout) {
        sock.set(zmq::sockopt::rcvtimeo, static_cast<int>(timeout.count()));
        zmq::message_t m;
        if (!sock.recv(m)) return std::nullopt;
        return zmoe::decode_client_reply({m.data<char>(), m.size()});
    }
};

zmoe::client_generate one_request(const std::string& id, int i, uint32_t max_tokens) {
    zmoe::client_generate g;
    g.client_request_id = id;
    g.prompt = std::vector<int32_t>{2 + i % 400, 3 + (i * 7) % 400};
    g.max_tokens = max_tokens;
    g.temperature = 0.f;
    g.ignore_eos = true;
    return g;
}

/// Reads until every id in `ids` has its terminal message (or `idle` passes with nothing), checking that each
/// request gets exactly one terminal and that its tokens add up to max_tokens.
void expect_all_complete(raw_client& c, size_t num, const std::string& prefix, uint32_t max_tokens,
                         std::chrono::milliseconds idle = 30s) {
    std::map<std::string, uint32_t> tokens;
    std::map<std::string, int> terminals;
    std::vector<std::string> errors;
    size_t done = 0;
    while (done < num) {
        auto r = c.recv(idle);
        if (!r) break;
        if (auto* d = std::get_if<zmoe::client_delta>(&*r)) {
            tokens[d->client_request_id] += static_cast<uint32_t>(d->token_ids.size());
            if (d->finished) {
                ++done;
                if (++terminals[d->client_request_id] > 1)
                    ADD_FAILURE() << "two terminals for " << d->client_request_id;
            }
        } else if (auto* e = std::get_if<zmoe::client_error>(&*r)) {
            ++done;
            ++terminals[e->client_request_id];
            errors.push_back(e->client_request_id + ": " + e->message);
        }
    }
    EXPECT_EQ(done, num) << "requests without a final message: " << num - done;
    EXPECT_TRUE(errors.empty()) << errors.size() << " errors, first: " << (errors.empty() ? "" : errors[0]);
    for (size_t i = 0; i < num; ++i) {
        const std::string id = prefix + std::to_string(i);
        EXPECT_EQ(terminals[id], 1) << id;
        EXPECT_EQ(tokens[id], max_tokens) << id;
        if (terminals[id] != 1 || tokens[id] != max_tokens) break;  // one message is enough
    }
}

void expect_accounted(server& s, double accepted_at_least) {
    const auto c = s.frontend_counters();
    const double accepted = counter(c, "requests_accepted");
    EXPECT_GE(accepted, accepted_at_least);
    EXPECT_EQ(accepted, counter(c, "requests_finished") + counter(c, "requests_failed")) << c.dump();
}

// Failure 1a: with more streams than the ZeroMQ high-water mark and a client that does not read for a while, the
// frontend took a full pipe for a departed client and aborted the requests (the client waited forever).
TEST(Reliability, TwoThousandStreamsToASlowReaderAllComplete) {
    constexpr int kStreams = 2400;
    server s({"--workers", "2", "--max-num-seqs", "256"});
    raw_client c(s.endpoint(), /*rcvhwm=*/16);
    for (int i = 0; i < kStreams; ++i) c.send(zmoe::encode(one_request("s" + std::to_string(i), i, 3)));
    // Not reading: the frontend's pipe to us fills long before the streams end.
    std::this_thread::sleep_for(3s);
    expect_all_complete(c, kStreams, "s", 3);
    expect_accounted(s, kStreams);
}

// Failure 1b: a burst of one-token requests overran the frontend -> engine core pipe, whose unchecked sends lost
// requests that then stayed "waiting" forever.
TEST(Reliability, BurstOfThreeThousandRequestsCompletes) {
    constexpr int kRequests = 3000;
    server s({"--workers", "1", "--max-num-seqs", "256"});
    raw_client c(s.endpoint());
    for (int i = 0; i < kRequests; ++i) c.send(zmoe::encode(one_request("b" + std::to_string(i), i, 1)));
    expect_all_complete(c, kRequests, "b", 1);
    expect_accounted(s, kRequests);
}

// Failure 5: errors must name the request they are about; an abort of an unknown id is a no-op; a duplicate live
// id is refused without touching the live request.
TEST(Reliability, ErrorsNameTheirRequestAndDuplicatesLeaveTheLiveOneAlone) {
    server s({"--workers", "1"});
    raw_client c(s.endpoint());
    // A generate whose max_tokens is a string: undecodable, but its id can be read.
    {
        zmoe::msgpack_writer w;
        w.array_header(12);
        w.uint(zmoe::kClientProtocolVersion);
        w.uint(static_cast<uint8_t>(zmoe::client_kind::generate));
        w.str("bad-field");
        w.int32_array(std::vector<int32_t>{5, 6});
        w.str("sixteen");
        for (int k = 0; k < 7; ++k) w.nil();
        c.send(w.take());
        auto r = c.recv(10s);
        ASSERT_TRUE(r);
        auto* e = std::get_if<zmoe::client_error>(&*r);
        ASSERT_TRUE(e);
        EXPECT_EQ(e->client_request_id, "bad-field");
        EXPECT_EQ(e->code, zmoe::errc::protocol);
    }
    // An abort of an id that never was: no reply at all (the next thing we hear is the health reply).
    c.send(zmoe::encode(zmoe::client_abort{"never-was"}));
    c.send(zmoe::encode(zmoe::client_health{"h1"}));
    {
        auto r = c.recv(10s);
        ASSERT_TRUE(r);
        ASSERT_TRUE(std::holds_alternative<zmoe::client_health_reply>(*r)) << "the unknown abort got a reply";
    }
    // A duplicate of a live id: refused with duplicate_request; the live request streams on to its end.
    constexpr uint32_t kTokens = 40;
    c.send(zmoe::encode(one_request("live", 1, kTokens)));
    c.send(zmoe::encode(one_request("live", 2, kTokens)));
    uint32_t tokens = 0;
    int duplicates = 0, terminals = 0;
    while (terminals == 0) {
        auto r = c.recv(30s);
        ASSERT_TRUE(r) << "the live request never finished";
        if (auto* d = std::get_if<zmoe::client_delta>(&*r)) {
            tokens += static_cast<uint32_t>(d->token_ids.size());
            if (d->finished) {
                ++terminals;
                EXPECT_EQ(d->reason, zmoe::finish_reason::length);
            }
        } else if (auto* e = std::get_if<zmoe::client_error>(&*r)) {
            EXPECT_EQ(e->client_request_id, "live");
            EXPECT_EQ(e->code, zmoe::errc::duplicate_request) << e->message;
            ++duplicates;
        }
    }
    EXPECT_EQ(duplicates, 1);
    EXPECT_EQ(tokens, kTokens);
    // The id is free again once the request ended: reuse it, and it is not hit by any stale error.
    c.send(zmoe::encode(zmoe::client_abort{"live"}));
    c.send(zmoe::encode(one_request("live", 3, 2)));
    for (;;) {
        auto r = c.recv(30s);
        ASSERT_TRUE(r) << "the reused id never finished";
        auto* d = std::get_if<zmoe::client_delta>(&*r);
        ASSERT_TRUE(d) << "the reused id got an error: " << std::get<zmoe::client_error>(*r).message;
        if (d->finished) {
            EXPECT_EQ(d->completion_tokens, 2u);
            break;
        }
    }
}

}  // namespace

namespace {

/// The qwen3_moe fixture (512 embedding rows) with a byte-level tokenizer of 256 ids: most ids the model samples
/// are unknown to the tokenizer, as the padded rows of real checkpoints are.
std::string model_with_small_tokenizer(const temp_dir& dir) {
    const std::string model = dir / "model";
    std::filesystem::create_directories(model);
    for (const auto& e : std::filesystem::directory_iterator(kModel))
        if (e.path().filename() != "reference.json")
            std::filesystem::copy(e.path(), model + "/" + e.path().filename().string());
    write_byte_level_tokenizer(model + "/tokenizer.json");
    return model;
}

// Failure 2: an id the tokenizer does not know (the model's vocabulary is larger) made the frontend drop the
// engine's outputs message, and the request hung.
TEST(Reliability, SampledIdsBeyondTheTokenizerDecodeToNothing) {
    temp_dir dir;
    server s({"--workers", "1"}, model_with_small_tokenizer(dir));
    zmoe::zmoe_client c(s.endpoint());
    int beyond = 0;
    for (int i = 0; i < 4; ++i) {
        zmoe::client_generate g;
        g.prompt = std::string("hello world ") + std::to_string(i);
        g.max_tokens = 24;
        g.temperature = 0.f;
        g.ignore_eos = true;
        const auto done = c.collect(c.generate(g), 60s);
        EXPECT_EQ(done.reason, zmoe::finish_reason::length);
        ASSERT_EQ(done.token_ids.size(), 24u);
        // Known ids decode to their bytes, unknown ones to nothing: the text is exactly the known ids' bytes
        // (U+FFFD where they do not form valid UTF-8, which this check leaves aside by counting lengths).
        size_t known = 0;
        for (int32_t t : done.token_ids) {
            if (t < 256) {
                ++known;
            } else {
                ++beyond;
            }
        }
        EXPECT_LE(done.text.size(), known * 3);
        if (known == 0) {
            EXPECT_EQ(done.text, "");
        }
    }
    EXPECT_GT(beyond, 0) << "the model never sampled an id past the tokenizer: the test proves nothing";
    EXPECT_GT(counter(s.frontend_counters(), "unknown_token_ids"), 0);
}

}  // namespace

namespace {

// Failure 6: start-up that lies. Each bad start must exit non-zero without ever printing "ready".
TEST(Reliability, StartUpFailsLoudly) {
    server first({"--workers", "1"});
    auto start = [&](std::vector<std::string> args) {
        std::vector<std::string> argv = {kZmoe, "serve", "--model", kModel, "--threads", "1", "--skip-tokenizer-init"};
        argv.insert(argv.end(), args.begin(), args.end());
        auto p = zmoe::child_process::spawn(argv);
        const auto st = p.wait_for(60s);
        if (!st) {
            p.kill(SIGKILL);
            p.wait();
            return -1;
        }
        return *st;
    };
    // The port is taken by `first`: the second frontend cannot bind, and its readiness check must not be fooled
    // by the first server's answers.
    EXPECT_NE(start({"--port", std::to_string(first.port)}), 0);
    EXPECT_EQ(zmoe::zmoe_client(first.endpoint()).health(5s).status, "ok");
    // Ports outside 1..65535 are refused instead of wrapping.
    EXPECT_NE(start({"--port", "71337"}), 0);
    EXPECT_NE(start({"--port", "0"}), 0);
    // No KV cache at all, and a context longer than the model's positions (512), are refused at start-up.
    EXPECT_NE(start({"--port", std::to_string(free_port()), "--kv-cache-mb", "0"}), 0);
    EXPECT_NE(start({"--port", std::to_string(free_port()), "--max-model-len", "100000"}), 0);
}

}  // namespace

namespace {

/// TCP ports a process listens on (its socket inodes matched against /proc/net/tcp).
std::vector<int> listening_ports(pid_t pid) {
    std::set<std::string> inodes;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
        const auto target = std::filesystem::read_symlink(e.path(), ec).string();
        if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
    }
    std::vector<int> ports;
    std::ifstream tcp("/proc/net/tcp");
    std::string line;
    std::getline(tcp, line);  // header
    while (std::getline(tcp, line)) {
        std::istringstream f(line);
        std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
        f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
        if (state == "0A" && inodes.count(inode))
            ports.push_back(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
    return ports;
}

/// The serve process's private run directory (it holds the ipc endpoints of the engine core).
std::string run_dir_of(pid_t serve_pid) {
    const std::string prefix = "zmoe-run-" + std::to_string(serve_pid) + "-";
    for (const auto& e : std::filesystem::directory_iterator("/tmp"))
        if (e.path().filename().string().rfind(prefix, 0) == 0) return e.path().string();
    return {};
}

zmoe::client_completion run_one(server& s, int i, uint32_t max_tokens) {
    zmoe::zmoe_client c(s.endpoint());
    return c.collect(c.generate(one_request("after" + std::to_string(i), i, max_tokens)), 60s);
}

// Failure 4a: forged frames on a worker's all-to-all socket aborted the worker (and the run), and frames for
// future rounds were kept without bound.
TEST(Reliability, ForgedAllToAllFramesAreDroppedAndTheRunGoesOn) {
    server s({"--workers", "2"});
    const auto workers = find_processes(s.proc.pid(), {" worker ", "--rank"});
    ASSERT_EQ(workers.size(), 2u);
    zmq::context_t ctx;
    std::vector<zmq::socket_t> pushes;
    for (pid_t w : workers) {
        const auto ports = listening_ports(w);
        ASSERT_FALSE(ports.empty()) << "worker " << w << " has no all-to-all port";
        for (int port : ports) {
            auto& p = pushes.emplace_back(ctx, zmq::socket_type::push);
            p.set(zmq::sockopt::linger, 1000);
            p.connect("tcp://127.0.0.1:" + std::to_string(port));
        }
    }
    // Short junk; then frames shaped like ours (round, a real sender rank) for the next rounds, and big frames
    // for rounds far ahead.
    for (auto& p : pushes) {
        for (int i = 0; i < 2000; ++i) p.send(zmq::buffer(std::string("forged!")), zmq::send_flags::none);
        for (uint64_t round = 0; round < 3000; ++round) {
            for (int32_t sender = 0; sender < 2; ++sender) {
                std::string f(12 + 7, 'x');
                std::memcpy(f.data(), &round, 8);
                std::memcpy(f.data() + 8, &sender, 4);
                p.send(zmq::buffer(f), zmq::send_flags::none);
            }
        }
        for (uint64_t round = 1000000; round < 1000064; ++round) {
            std::string f(12 + (1 << 20), 'y');
            std::memcpy(f.data(), &round, 8);
            const int32_t sender = 1;
            std::memcpy(f.data() + 8, &sender, 4);
            p.send(zmq::buffer(f), zmq::send_flags::none);
        }
    }
    // The run goes on: requests through both workers' all-to-all complete, and no worker died.
    for (int i = 0; i < 8; ++i) {
        const auto done = run_one(s, i, 6);
        EXPECT_EQ(done.token_ids.size(), 6u);
    }
    for (pid_t w : workers) EXPECT_EQ(kill(w, 0), 0) << "worker " << w << " died";
    EXPECT_TRUE(s.proc.running());
    // What was dropped is counted, per worker, in the metrics (and so in `zmoe ctl metrics` and Prometheus text).
    zmoe::zmoe_client c(s.endpoint());
    const auto m = nlohmann::json::parse(c.metrics(10s));
    for (const char* w : {"worker_0", "worker_1"}) {
        EXPECT_GT(counter(m[w]["counters"], "frames_dropped"), 0) << w << ": " << m[w].dump();
        // Each worker's exchange redo count is there from its first step; CPU workers never redo one.
        ASSERT_TRUE(m[w]["counters"].contains("exchange_steps_redone")) << w << ": " << m[w].dump();
        EXPECT_EQ(counter(m[w]["counters"], "exchange_steps_redone"), 0) << w;
    }
}

// Failure 4b: the first peer to say hello on the engine core's frontend endpoint took the frontend's place.
TEST(Reliability, AHostileHelloIsRefused) {
    server s({"--workers", "1"});
    const std::string dir = run_dir_of(s.proc.pid());
    ASSERT_FALSE(dir.empty());
    zmq::context_t ctx;
    zmq::socket_t evil(ctx, zmq::socket_type::dealer);
    evil.set(zmq::sockopt::linger, 0);
    evil.set(zmq::sockopt::routing_id, std::string("frontend-evil"));
    evil.set(zmq::sockopt::rcvtimeo, 5000);
    evil.connect("ipc://" + dir + "/engine");
    evil.send(zmq::buffer(zmoe::encode(zmoe::engine_hello{"frontend", 1, "a guess"})), zmq::send_flags::none);
    zmq::message_t reply;
    ASSERT_TRUE(evil.recv(reply)) << "no answer to the hostile hello";
    const auto decoded = zmoe::decode_engine_to_frontend(reply.to_string_view());
    const auto* e = std::get_if<zmoe::engine_error>(&decoded);
    ASSERT_NE(e, nullptr) << "the hostile hello was welcomed";
    EXPECT_EQ(e->code, zmoe::errc::protocol);
    // The real frontend still owns the link: requests complete.
    for (int i = 0; i < 3; ++i) EXPECT_EQ(run_one(s, i, 5).token_ids.size(), 5u);
}

}  // namespace

namespace {

// Failure 7: one bad line aborted the whole batch and wrote nothing; out-of-range integers wrapped; a bad output
// path lost all the work.
TEST(Reliability, BatchClientServesGoodLinesAndReportsBadOnes) {
    server s({"--workers", "1"});
    temp_dir dir;
    {
        std::ofstream in(dir / "in.jsonl");
        in << R"({"prompt_token_ids": [1, 2], "max_tokens": 3})"
           << "\n"
           << R"({"prompt_token_ids": [4294967301], "max_tokens": 3})"
           << "\n"  // 2^32 + 5: not token 5
           << R"({"prompt_token_ids": [1, 2], "max_tokens": 3, "seed": -1})"
           << "\n"
           << R"({"prompt_token_ids": [1, 2], "max_tokens": 3, "stop": [)";
        for (int i = 0; i < 65; ++i) in << (i ? "," : "") << "\"s" << i << "\"";
        in << "]}\n"
           << "not json\n"
           << R"({"prompt_token_ids": [3, 4], "max_tokens": 2})"
           << "\n";
    }
    EXPECT_EQ(
        run_zmoe({"client", "--endpoint", s.endpoint(), "--input", dir / "in.jsonl", "--output", dir / "out.jsonl"}),
        1);  // some lines failed
    const auto out = read_jsonl(dir / "out.jsonl");
    ASSERT_EQ(out.size(), 6u);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i]["index"], i);
    EXPECT_EQ(out[0]["token_ids"].size(), 3u);
    EXPECT_EQ(out[5]["token_ids"].size(), 2u);
    for (size_t i : {1, 2, 3, 4}) {
        EXPECT_EQ(out[i]["finish_reason"], "error") << out[i].dump();
        EXPECT_EQ(out[i]["error"]["code"], "invalid_argument") << out[i].dump();
    }
    // An output path that cannot be written fails before any request is sent.
    EXPECT_NE(run_zmoe({"client", "--endpoint", s.endpoint(), "--input", dir / "in.jsonl", "--output",
                        dir / "no/such/dir/out.jsonl"}),
              0);
    EXPECT_EQ(counter(s.frontend_counters(), "requests_accepted"), 2);
}

}  // namespace

namespace {

// Failure 3: large prompts tokenized on the frontend's only thread starved its heartbeats, and the engine core
// declared it dead. Now they are tokenized on a pool (and refused past --max-prompt-bytes) while others are served.
TEST(Reliability, HugePromptsGetErrorsWhileOthersAreServed) {
    temp_dir dir;
    server s({"--workers", "1", "--heartbeat-ms", "250", "--max-prompt-bytes", "3000000"},
             model_with_small_tokenizer(dir));
    raw_client big(s.endpoint());
    std::string text;
    for (int i = 0; text.size() < 2500000; ++i) text += "word" + std::to_string(i % 977) + " ";
    for (int i = 0; i < 3; ++i) {
        zmoe::client_generate g;
        g.client_request_id = "big" + std::to_string(i);
        g.prompt = text;
        g.max_tokens = 1;
        big.send(zmoe::encode(g));
    }
    zmoe::client_generate over;
    over.client_request_id = "over";
    over.prompt = text + text;  // past --max-prompt-bytes
    big.send(zmoe::encode(over));
    // Another client is served meanwhile.
    for (int i = 0; i < 3; ++i) EXPECT_EQ(run_one(s, i, 4).token_ids.size(), 4u);
    // Each large prompt ends with a clear error (too long for the context, or over the byte limit).
    std::set<std::string> errored;
    for (int i = 0; i < 4; ++i) {
        auto r = big.recv(120s);
        ASSERT_TRUE(r) << "a large prompt got no answer";
        auto* e = std::get_if<zmoe::client_error>(&*r);
        ASSERT_NE(e, nullptr);
        EXPECT_EQ(e->code, zmoe::errc::invalid_argument) << e->message;
        errored.insert(e->client_request_id);
    }
    EXPECT_EQ(errored.size(), 4u);
    // The run lived through it.
    EXPECT_EQ(zmoe::zmoe_client(s.endpoint()).health(5s).status, "ok");
    EXPECT_TRUE(s.proc.running());
}

}  // namespace

namespace {

/// This host's first IPv4 address that is not loopback (a client connecting to it is not on loopback); empty when
/// the host has none.
std::string non_loopback_ipv4() {
    ifaddrs* all = nullptr;
    if (getifaddrs(&all) != 0) return {};
    std::string found;
    for (ifaddrs* a = all; a && found.empty(); a = a->ifa_next) {
        if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || (a->ifa_flags & IFF_LOOPBACK)) continue;
        char buf[INET_ADDRSTRLEN];
        const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
        if (inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf) && std::string(buf).rfind("127.", 0) != 0) found = buf;
    }
    freeifaddrs(all);
    return found;
}

/// The HTTP status of GET url (curl, bounded), with an optional header.
int http_status(const std::string& url, const std::string& header = "") {
    std::string cmd = "curl -s -o /dev/null --max-time 20 -w '%{http_code}' ";
    if (!header.empty()) cmd += "-H '" + header + "' ";
    cmd += "'" + url + "'";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return -1;
    char buf[16] = {};
    const size_t n = fread(buf, 1, sizeof buf - 1, p);
    pclose(p);
    return n ? std::atoi(buf) : -1;
}

zmoe::client_event first_event(zmoe::zmoe_client& c, const std::string& id) {
    auto ev = c.next(id, 30s);
    if (!ev) throw zmoe::error(zmoe::errc::peer_dead, "no answer for " + id);
    return *ev;
}

// Issue 9, item 4 (clients): clients over non-loopback TCP need the API key; loopback stays open. The rule
// (actors/client_auth.hpp): the key is needed by a client whose TCP connection comes from an address outside
// 127.0.0.0/8 and ::1; a serve whose --host such clients can reach refuses to start without a key.
TEST(Reliability, ClientsOffLoopbackNeedTheApiKey) {
    const std::string ip = non_loopback_ipv4();
    if (ip.empty()) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
    // Without a key, a server other hosts can reach refuses to start, with a clear error.
    {
        auto p = zmoe::child_process::spawn({kZmoe, "serve", "--model", kModel, "--skip-tokenizer-init", "--host",
                                             "0.0.0.0", "--port", std::to_string(free_port())});
        const auto st = p.wait_for(30s);
        ASSERT_TRUE(st.has_value());
        EXPECT_NE(*st, 0);
    }
    const int http_port = free_port();
    server s(
        {"--workers", "1", "--host", "0.0.0.0", "--api-key", "s3cret-key", "--http-port", std::to_string(http_port)});
    const std::string remote = "tcp://" + ip + ":" + std::to_string(s.port);
    // Not on loopback, no key: generate and metrics are refused with `unauthenticated`, naming the request.
    {
        zmoe::zmoe_client c(remote, {.api_key = ""});
        const std::string id = c.generate(one_request("nokey", 1, 2));
        const auto ev = first_event(c, id);
        const auto* e = std::get_if<zmoe::client_error>(&ev);
        ASSERT_NE(e, nullptr) << "a client without the key was served";
        EXPECT_EQ(e->code, zmoe::errc::unauthenticated) << e->message;
        EXPECT_NE(e->message.find("API key"), std::string::npos) << e->message;
        EXPECT_EQ(c.health(10s).status, "ok");  // health stays open
        try {
            c.metrics(10s);
            ADD_FAILURE() << "metrics served without the key";
        } catch (const zmoe::error& ex) {
            EXPECT_EQ(ex.code(), zmoe::errc::unauthenticated) << ex.what();
        }
    }
    // A wrong key is refused too.
    {
        zmoe::zmoe_client c(remote, {.api_key = "s3cret-kez"});
        const auto ev = first_event(c, c.generate(one_request("wrong", 1, 2)));
        const auto* e = std::get_if<zmoe::client_error>(&ev);
        ASSERT_NE(e, nullptr) << "a client with a wrong key was served";
        EXPECT_EQ(e->code, zmoe::errc::unauthenticated);
    }
    // The right key: served in full, metrics too.
    {
        zmoe::zmoe_client c(remote, {.api_key = "s3cret-key"});
        EXPECT_EQ(c.collect(c.generate(one_request("key", 1, 5)), 30s).token_ids.size(), 5u);
        EXPECT_GE(counter(nlohmann::json::parse(c.metrics(10s))["frontend"]["counters"], "requests_unauthenticated"),
                  2);
    }
    // Loopback stays open: no key needed.
    {
        zmoe::zmoe_client c(s.endpoint(), {.api_key = ""});
        EXPECT_EQ(c.collect(c.generate(one_request("local", 2, 4)), 30s).token_ids.size(), 4u);
    }
    // The HTTP gateway asks for the same key (Authorization: Bearer); /health stays open.
    const std::string base = "http://127.0.0.1:" + std::to_string(http_port);
    int health = -1;
    for (int i = 0; i < 100 && health != 200; ++i) {
        health = http_status(base + "/health");
        if (health != 200) std::this_thread::sleep_for(200ms);
    }
    EXPECT_EQ(health, 200);
    EXPECT_EQ(http_status(base + "/v1/models"), 401);
    EXPECT_EQ(http_status(base + "/v1/models", "Authorization: Bearer wrong"), 401);
    EXPECT_EQ(http_status(base + "/v1/models", "Authorization: Bearer s3cret-key"), 200);
}

// Issue 9, start-up: without tokenizer.json, serve refuses to start unless told --skip-tokenizer-init; with it,
// token-id prompts are served and text prompts get a clear per-request error.
TEST(Reliability, NoTokenizerNeedsSkipTokenizerInit) {
    auto p = zmoe::child_process::spawn({kZmoe, "serve", "--model", kModel, "--port", std::to_string(free_port())});
    const auto st = p.wait_for(30s);
    ASSERT_TRUE(st.has_value()) << "serve without a tokenizer did not exit";
    EXPECT_NE(*st, 0);
    server s({"--workers", "1"});  // the fixture has no tokenizer.json: the server adds --skip-tokenizer-init
    zmoe::zmoe_client c(s.endpoint());
    EXPECT_EQ(c.collect(c.generate(one_request("ids", 1, 3)), 30s).token_ids.size(), 3u);
    zmoe::client_generate text;
    text.client_request_id = "text";
    text.prompt = std::string("hello");
    c.generate(text);
    const auto ev = first_event(c, "text");
    const auto* e = std::get_if<zmoe::client_error>(&ev);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->code, zmoe::errc::unsupported);
    EXPECT_NE(e->message.find("--skip-tokenizer-init"), std::string::npos) << e->message;
    EXPECT_EQ(c.collect(c.generate(one_request("ids2", 2, 2)), 30s).token_ids.size(), 2u);  // the run goes on
}

}  // namespace

namespace {

/// Stops a process for a while, then lets it go on (and lets it go on in any case when the test fails early).
struct stall {
    pid_t pid;
    explicit stall(pid_t p) : pid(p) { kill(pid, SIGSTOP); }
    ~stall() { kill(pid, SIGCONT); }
};

// Issue 9, liveness: the heartbeat tolerance is one serve flag that every actor takes. A worker stopped for 1.5 s
// (six 250 ms heartbeats) is survived with a tolerance of 20 intervals (5 s): the requests complete.
TEST(Reliability, AStallShorterThanTheHeartbeatToleranceIsSurvived) {
    server s({"--workers", "2", "--heartbeat-ms", "250", "--heartbeat-max-missed", "20"});
    zmoe::zmoe_client c(s.endpoint());
    std::vector<std::string> ids;
    for (int i = 0; i < 4; ++i) ids.push_back(c.generate(one_request("st" + std::to_string(i), i, 200)));
    const auto workers = find_processes(s.proc.pid(), {" worker ", "--rank 1"});
    ASSERT_EQ(workers.size(), 1u);
    {
        stall stopped(workers[0]);
        std::this_thread::sleep_for(1500ms);
    }
    for (const auto& id : ids) EXPECT_EQ(c.collect(id, 60s).token_ids.size(), 200u) << id;
    EXPECT_EQ(c.health(10s).status, "ok");
    EXPECT_TRUE(s.proc.running());
}

// ... and the default tolerance (3 intervals) still declares the same stalled worker dead: its requests end with
// peer_dead and serve exits non-zero.
TEST(Reliability, TheDefaultHeartbeatToleranceDetectsAStalledPeer) {
    server s({"--workers", "2", "--heartbeat-ms", "250", "--failure-grace-ms", "500"});
    zmoe::zmoe_client c(s.endpoint());
    const std::string id = c.generate(one_request("dead", 1, 400));
    const auto workers = find_processes(s.proc.pid(), {" worker ", "--rank 1"});
    ASSERT_EQ(workers.size(), 1u);
    {
        stall stopped(workers[0]);
        try {
            c.collect(id, 30s);
            ADD_FAILURE() << "the request finished although a worker was stopped for good";
        } catch (const zmoe::error& e) {
            EXPECT_EQ(e.code(), zmoe::errc::peer_dead) << e.what();
        }
    }
    const auto st = s.proc.wait_for(30s);
    ASSERT_TRUE(st.has_value()) << "serve did not exit after a worker was declared dead";
    EXPECT_NE(*st, 0);
}

// Issue 9, liveness: on SIGTERM, `serve --shutdown-timeout S` lets running requests finish for S seconds, then ends
// the rest with error 7 (aborted) and exits 0. Every request gets exactly one final message.
TEST(Reliability, ShutdownTimeoutDrainsThenEndsTheRestWithErrorSeven) {
    server s({"--workers", "1", "--max-num-seqs", "1", "--shutdown-timeout", "1"});
    zmoe::zmoe_client c(s.endpoint());
    // One request runs at a time: the first is short and running at SIGTERM; the long ones queue behind it far
    // longer than the timeout (24 x 480 tokens: about 10 s on a loaded 2-core machine).
    constexpr int kLong = 24;
    c.generate(one_request("short", 1, 40));
    for (int i = 0; i < kLong; ++i) c.generate(one_request("long" + std::to_string(i), i, 480));
    auto ev = c.next("short", 30s);
    ASSERT_TRUE(ev.has_value());
    ASSERT_TRUE(std::holds_alternative<zmoe::client_delta>(*ev));
    kill(s.proc.pid(), SIGTERM);
    std::map<std::string, int> terminals;
    int finished = 0, aborted = 0;
    auto record = [&](const zmoe::client_event& e) {
        if (const auto* d = std::get_if<zmoe::client_delta>(&e)) {
            if (!d->finished) return;
            ++terminals[d->client_request_id];
            ++finished;
            EXPECT_EQ(d->reason, zmoe::finish_reason::length) << d->client_request_id;
        } else {
            const auto& err = std::get<zmoe::client_error>(e);
            ++terminals[err.client_request_id];
            ++aborted;
            EXPECT_EQ(err.code, zmoe::errc::aborted) << err.client_request_id << ": " << err.message;
            EXPECT_NE(err.message.find("--shutdown-timeout"), std::string::npos) << err.message;
        }
    };
    record(*ev);
    while (c.num_live() > 0) {
        auto e = c.next_any(30s);
        ASSERT_TRUE(e.has_value()) << c.num_live() << " request(s) never got a final message";
        record(*e);
    }
    EXPECT_EQ(terminals["short"], 1);
    EXPECT_GE(finished, 1) << "the running request was not drained";
    EXPECT_GE(aborted, 1) << "nothing was left to end at the timeout: the test proves nothing";
    for (const auto& [id, n] : terminals) EXPECT_EQ(n, 1) << id;
    EXPECT_EQ(terminals.size(), 1u + kLong);
    const auto st = s.proc.wait_for(30s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(*st, 0);
}

// Issue 9, liveness: a serve killed by SIGKILL cannot remove its private directory; the next start does.
TEST(Reliability, StaleRunDirectoriesAreReapedAtTheNextStart) {
    std::string stale;
    {
        server s({"--workers", "1"});
        stale = run_dir_of(s.proc.pid());
        ASSERT_FALSE(stale.empty());
        s.proc.kill(SIGKILL);
        s.proc.wait();
    }
    ASSERT_TRUE(std::filesystem::exists(stale)) << "SIGKILL left nothing behind: the test proves nothing";
    // Its actors follow their parent (SIGTERM on its death); a directory of a live owner is never touched.
    server next({"--workers", "1"});
    EXPECT_FALSE(std::filesystem::exists(stale)) << stale << " was not reaped";
    EXPECT_FALSE(run_dir_of(next.proc.pid()).empty()) << "the live run's own directory is gone";
}

// Issue 9, liveness: the frontend forgets clients with no live request after --client-idle-timeout of silence,
// so its per-client map stays bounded.
TEST(Reliability, IdleClientsAreForgotten) {
    server s({"--workers", "1", "--client-idle-timeout", "1", "--heartbeat-ms", "250"});
    for (int i = 0; i < 40; ++i) {
        zmoe::zmoe_client c(s.endpoint());
        EXPECT_EQ(c.health(10s).status, "ok");
    }
    zmoe::zmoe_client watcher(s.endpoint());
    auto clients = [&] {
        return nlohmann::json::parse(watcher.metrics(10s))["frontend"]["gauges"]["clients"].get<double>();
    };
    // (No check that all 40 are known at once: on a slow machine the first may already be forgotten.)
    double now = clients();
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (now > 1 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(200ms);
        now = clients();
    }
    EXPECT_LE(now, 1) << "idle clients were not forgotten";  // only the watcher, which keeps asking
    EXPECT_GE(counter(s.frontend_counters(), "clients_reaped"), 40);
}

}  // namespace

namespace {

/// Runs `zmoe args...` with its stderr on `fd` (stdin from /dev/null, stdout inherited); its exit status, and
/// everything readable from `read_fd` (the pty's master side; -1: nothing to read) until it exits, within 120 s.
std::pair<int, std::string> run_with_stderr(const std::vector<std::string>& args, int fd, int read_fd) {
    std::vector<std::string> argv = {kZmoe};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fd, 2);
    if (read_fd >= 0) posix_spawn_file_actions_addclose(&fa, read_fd);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, kZmoe.c_str(), &fa, nullptr, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return {-1, ""};
    close(fd);
    std::string got;
    int status = -1;
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    for (;;) {
        if (read_fd >= 0) {
            pollfd p{read_fd, POLLIN, 0};
            if (poll(&p, 1, 100) > 0) {
                char buf[4096];
                const ssize_t n = read(read_fd, buf, sizeof buf);
                if (n > 0) got.append(buf, static_cast<size_t>(n));
            }
        } else {
            std::this_thread::sleep_for(100ms);
        }
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        if (std::chrono::steady_clock::now() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return {-1, got};
        }
    }
    if (read_fd >= 0) {  // what is left in the pty
        pollfd p{read_fd, POLLIN, 0};
        char buf[4096];
        ssize_t n;
        while (poll(&p, 1, 100) > 0 && (n = read(read_fd, buf, sizeof buf)) > 0)
            got.append(buf, static_cast<size_t>(n));
    }
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, got};
}

// Issue 9, batch client: a progress bar on stderr when it is a terminal, and none when it is not.
TEST(Reliability, BatchProgressBarOnlyOnATerminal) {
    server s({"--workers", "1"});
    temp_dir dir;
    {
        std::ofstream in(dir / "in.jsonl");
        for (int i = 0; i < 3; ++i)
            in << R"({"prompt_token_ids": [1, 2], "max_tokens": 2})"
               << "\n";
    }
    const std::vector<std::string> args = {"client",         "--endpoint", s.endpoint(),     "--input",
                                           dir / "in.jsonl", "--output",   dir / "out.jsonl"};
    int master = -1, slave = -1;
    ASSERT_EQ(openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
    const auto [st, terminal] = run_with_stderr(args, slave, master);
    close(master);
    EXPECT_EQ(st, 0) << terminal;
    EXPECT_NE(terminal.find("] 3/3"), std::string::npos) << terminal;
    EXPECT_NE(terminal.find("[" + std::string(40, '#') + "]"), std::string::npos) << terminal;
    EXPECT_EQ(read_jsonl(dir / "out.jsonl").size(), 3u);
    // stderr to a file: no bar.
    const int file = open((dir / "err.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(file, 0);
    EXPECT_EQ(run_with_stderr(args, file, -1).first, 0);
    std::ifstream err(dir / "err.txt");
    const std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("3/3"), std::string::npos) << text;
}

}  // namespace
