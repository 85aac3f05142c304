#pragma once
// Helpers for the end-to-end tests: run the real zmoe binary as processes, on loopback, with bounded time.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
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

/// A TCP port on 127.0.0.1 that was free a moment ago.
inline int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    const int port = ntohs(addr.sin_port);
    close(fd);
    return port;
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
        ADD_FAILURE() << "server did not become healthy";
    }
    ~serve_process() {
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

}  // namespace zmoe::test
