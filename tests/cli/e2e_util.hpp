#pragma once
// Helpers for the end-to-end tests: run the real zmoe binary as processes, on loopback, with bounded time.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/child_process.hpp"
#include "actors/zmoe_client.hpp"
#include "tests/frontend/byte_tokenizer.hpp"

namespace zmoe::test {

inline const std::string kZmoe = ZMOE_BINARY;
inline const std::string kFixtures = ZMOE_FIXTURES_DIR;

/// A fresh directory under /tmp, removed at destruction.
struct temp_dir {
    std::filesystem::path path;
    temp_dir() {
        char tmpl[] = "/tmp/zmoe-test-XXXXXX";
        path = mkdtemp(tmpl);
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    std::string operator/(const std::string& name) const { return (path / name).string(); }
};

/// A TCP port on 127.0.0.1 for this test process alone, held until the process exits.
///
/// Tests run in parallel (ctest -j) and each starts servers, so "a port that was free a moment ago" is not
/// enough: two processes can be handed the same ephemeral port, or a client connection elsewhere can take it
/// as its local port before the server binds it (a CI run lost a test that way). So the port is drawn below the
/// kernel's ephemeral range (no outgoing connection is ever given it), reserved across processes by an flock on
/// /tmp/zmoe-test-ports/PORT (released by the kernel when the process exits, however it exits), and checked
/// bindable. The lock's descriptor stays open on purpose: a test process takes a handful of ports.
inline int free_port() {
    static const std::filesystem::path dir = [] {
        std::filesystem::path d = "/tmp/zmoe-test-ports";
        std::error_code ec;
        std::filesystem::create_directories(d, ec);
        std::filesystem::permissions(d, std::filesystem::perms::all, ec);
        return d;
    }();
    int lo = 32768;  // the ephemeral range's start, on Linux's default
    {
        std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
        int a = 0;
        if (range >> a && a > 12000) lo = a;
    }
    constexpr int kFloor = 10000;
    const int span = lo - kFloor;
    static std::mt19937 rng{std::random_device{}()};
    for (int attempt = 0; attempt < 4 * span; ++attempt) {
        const int port = kFloor + static_cast<int>(rng() % static_cast<unsigned>(span));
        const int lock = ::open((dir / std::to_string(port)).c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0666);
        if (lock < 0) continue;
        if (flock(lock, LOCK_EX | LOCK_NB) != 0) {
            ::close(lock);
            continue;
        }
        const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(static_cast<uint16_t>(port));
        const bool bindable = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
        ::close(fd);
        if (bindable) return port;  // `lock` stays open: the port is this process's until it exits
        ::close(lock);
    }
    ADD_FAILURE() << "no free loopback port between " << kFloor << " and " << lo;
    return 0;
}

/// `zmoe serve --model MODEL --port P --threads 1 EXTRA...` (env: more environment variables) on a free loopback port,
/// waited for until its health says "ok" (at most 60 s; a test failure otherwise); stopped by pid at destruction:
/// SIGTERM, then SIGKILL after 15 s.
struct serve_process {
    int port = free_port();
    std::string host = "127.0.0.1";  ///< --host when extra gives one
    child_process proc;
    std::string endpoint() const { return "tcp://" + host + ":" + std::to_string(port); }

    explicit serve_process(std::vector<std::string> extra, const std::string& model,
                           std::vector<std::string> env = {}) {
        using namespace std::chrono_literals;
        for (size_t i = 0; i + 1 < extra.size(); ++i)
            if (extra[i] == "--host") host = extra[i + 1];
        std::vector<std::string> argv = {kZmoe,       "serve", "--model", model, "--port", std::to_string(port),
                                         "--threads", "1"};
        // A model without a tokenizer.json (the fixtures) serves token ids only, which serve must be told.
        if (!std::filesystem::exists(model + "/tokenizer.json") &&
            std::find(extra.begin(), extra.end(), "--tokenizer") == extra.end())
            argv.push_back("--skip-tokenizer-init");
        argv.insert(argv.end(), extra.begin(), extra.end());
        proc = child_process::spawn(argv, env);
        zmoe_client c(endpoint());
        const auto deadline = std::chrono::steady_clock::now() + 60s;
        while (std::chrono::steady_clock::now() < deadline) {
            try {
                if (c.health(300ms).status == "ok") return;
            } catch (const error&) {
            }
            if (!proc.running()) break;
        }
        // Thrown, not a non-fatal failure: a test must not go on against no server (or against whatever answers on
        // the port), which once made a test wait on someone else's requests until ctest killed it.
        const bool hung = proc.running();
        stop();
        throw std::runtime_error("zmoe serve on port " + std::to_string(port) +
                                 (hung ? " did not become healthy within 60 s" : " exited before it was healthy"));
    }
    ~serve_process() { stop(); }
    /// SIGTERM, then SIGKILL after 15 s; a no-op once it has exited.
    void stop() {
        if (proc.running()) {
            proc.kill(SIGTERM);
            if (!proc.wait_for(std::chrono::seconds(15))) {
                proc.kill(SIGKILL);
                proc.wait();
            }
        }
    }
    /// The frontend's counters.
    nlohmann::json frontend_counters() {
        zmoe_client c(endpoint());
        return nlohmann::json::parse(c.metrics(std::chrono::seconds(10)))["frontend"]["counters"];
    }
};

/// Runs argv to completion (bounded), returning its exit status (-1 on timeout, after killing it).
inline int run_bounded(const std::vector<std::string>& argv, std::chrono::seconds timeout = std::chrono::seconds(120)) {
    auto p = child_process::spawn(argv);
    auto st = p.wait_for(timeout);
    if (!st) {
        p.kill(9);
        p.wait();
        return -1;
    }
    return *st;
}

/// Runs `zmoe args...` to completion (bounded), returning its exit status (-1 on timeout, after killing it).
inline int run_zmoe(const std::vector<std::string>& args, std::chrono::seconds timeout = std::chrono::seconds(120)) {
    std::vector<std::string> argv = {kZmoe};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_bounded(argv, timeout);
}

inline nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
    std::ifstream in(path);
    std::vector<nlohmann::json> out;
    std::string line;
    while (std::getline(in, line))
        if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    return out;
}

/// Writes the reference prompts of a fixture as generate input (greedy, ignore_eos, max_tokens = greedy length).
inline void write_reference_requests(const nlohmann::json& ref, const std::string& path) {
    std::ofstream out(path);
    for (const auto& p : ref["prompts"]) {
        nlohmann::json j = {{"prompt_token_ids", p["token_ids"]},
                            {"max_tokens", p["greedy"].size()},
                            {"temperature", 0},
                            {"ignore_eos", true}};
        out << j.dump() << "\n";
    }
}

/// Runs `zmoe generate` on a fixture's reference prompts (write_reference_requests) with --threads 1 and `extra`
/// flags, files named after `tag` in `dir`; the output lines (a test failure when generate fails).
inline std::vector<nlohmann::json> generate_reference(const std::string& model, const std::vector<std::string>& extra,
                                                      const temp_dir& dir, const std::string& tag) {
    write_reference_requests(read_json(kFixtures + "/models/" + model + "/reference.json"), dir / (tag + ".in.jsonl"));
    std::vector<std::string> args = {"generate",
                                     "--model",
                                     kFixtures + "/models/" + model,
                                     "--input",
                                     dir / (tag + ".in.jsonl"),
                                     "--output",
                                     dir / (tag + ".out.jsonl"),
                                     "--threads",
                                     "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run_zmoe(args), 0) << "zmoe generate failed for " << model << " " << tag;
    return read_jsonl(dir / (tag + ".out.jsonl"));
}

/// Number of leading greedy tokens that must match the reference: up to (not including) the first step whose
/// reference top-2 margin is under 1e-3 (a near-tie may go either way), plus that step itself not compared.
inline size_t comparable_prefix(const nlohmann::json& prompt) {
    const auto& margins = prompt["margins"];
    size_t n = 0;
    while (n < margins.size() && margins[n].get<double>() >= 1e-3) ++n;
    return n;
}

/// Pids of the children of `parent` whose command line contains every word of `words`.
inline std::vector<pid_t> find_processes(pid_t parent, const std::vector<std::string>& words) {
    std::vector<pid_t> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
        const auto name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream stat(e.path() / "stat");
        std::string stat_line((std::istreambuf_iterator<char>(stat)), {});
        const auto close_paren = stat_line.rfind(')');
        if (close_paren == std::string::npos) continue;
        std::istringstream fields(stat_line.substr(close_paren + 2));
        std::string state;
        long ppid = 0;
        fields >> state >> ppid;
        if (ppid != parent) continue;
        std::ifstream in(e.path() / "cmdline");
        std::string cmd((std::istreambuf_iterator<char>(in)), {});
        for (auto& c : cmd)
            if (c == '\0') c = ' ';
        bool all = cmd.rfind(kZmoe, 0) == 0;
        for (const auto& w : words) all = all && cmd.find(w) != std::string::npos;
        if (all) out.push_back(static_cast<pid_t>(std::stol(name)));
    }
    return out;
}

/// A demo checkpoint (zmoe make-demo, with the Qwen3 tokenizer) served with the HTTP gateway on free loopback ports,
/// with `extra` arguments to serve; stopped by pid (SIGTERM, SIGKILL after 30 s) and removed at destruction.
struct demo_http_server {
    temp_dir dir;
    int port = free_port();
    int http_port = free_port();
    child_process proc;
    std::string model() const { return dir / "demo"; }
    std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port); }
    std::string base_url() const { return "http://127.0.0.1:" + std::to_string(http_port); }

    explicit demo_http_server(const std::vector<std::string>& extra = {}) {
        // ZMOE_FIXTURES_DIR is <source>/tests/fixtures.
        const std::string tokenizer =
            (std::filesystem::path(kFixtures).parent_path().parent_path() / "third_party/tokenizers/qwen3").string();
        if (run_zmoe({"make-demo", "--out", model(), "--tokenizer", tokenizer}) != 0) {
            ADD_FAILURE() << "make-demo failed";
            return;
        }
        std::vector<std::string> argv = {kZmoe,         "serve",
                                         "--model",     model(),
                                         "--port",      std::to_string(port),
                                         "--http-port", std::to_string(http_port),
                                         "--threads",   "1"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        proc = child_process::spawn(argv);
    }
    ~demo_http_server() {
        if (proc.running()) {
            proc.kill(SIGTERM);
            if (!proc.wait_for(std::chrono::seconds(30))) {
                proc.kill(SIGKILL);
                proc.wait();
            }
        }
    }
    /// The engine core's count of prompt tokens it was given.
    double prompt_tokens_seen() {
        zmoe_client c(endpoint());
        const auto m = nlohmann::json::parse(c.metrics(std::chrono::seconds(10)));
        return m["engine_core"]["counters"].value("prompt_tokens", 0.0);
    }
};

}  // namespace zmoe::test
