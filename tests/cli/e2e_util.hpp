#pragma once
// Helpers for the end-to-end tests: run the real zmoe binary as processes, on loopback, with bounded time.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "actors/child_process.hpp"

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

/// Runs `zmoe args...` to completion (bounded), returning its exit status (-1 on timeout, after killing it).
inline int run_zmoe(const std::vector<std::string>& args, std::chrono::seconds timeout = std::chrono::seconds(120)) {
    std::vector<std::string> argv = {kZmoe};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = child_process::spawn(argv);
    auto st = p.wait_for(timeout);
    if (!st) {
        p.kill(9);
        p.wait();
        return -1;
    }
    return *st;
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
