#include "actors/child_process.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "base/error.hpp"

extern char** environ;

namespace zmoe {

child_process child_process::spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
    if (argv.empty()) throw error(errc::invalid_argument, "spawn: empty argv");
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);

    std::vector<std::string> env_store;
    for (char** e = environ; *e; ++e) {
        std::string entry(*e);
        std::string name = entry.substr(0, entry.find('='));
        bool overridden = false;
        for (const auto& x : extra_env) overridden |= x.substr(0, x.find('=')) == name;
        if (!overridden) env_store.push_back(std::move(entry));
    }
    for (const auto& x : extra_env) env_store.push_back(x);
    std::vector<char*> envp;
    for (auto& e : env_store) envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGPIPE);
    sigset_t empty;
    sigemptyset(&empty);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &empty);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

    pid_t pid = -1;
    bool search_path = argv[0].find('/') == std::string::npos;
    int rc = search_path ? posix_spawnp(&pid, argv[0].c_str(), nullptr, &attr, args.data(), envp.data())
                         : posix_spawn(&pid, argv[0].c_str(), nullptr, &attr, args.data(), envp.data());
    posix_spawnattr_destroy(&attr);
    if (rc != 0) throw error(errc::io, "spawn " + argv[0] + ": " + std::strerror(rc));
    child_process c;
    c.pid_ = pid;
    return c;
}

child_process::child_process(child_process&& other) noexcept : pid_(other.pid_), status_(other.status_) {
    other.pid_ = -1;
}

child_process& child_process::operator=(child_process&& other) noexcept {
    if (this != &other) {
        if (pid_ > 0 && !status_) {
            ::kill(pid_, SIGKILL);
            reap(true);
        }
        pid_ = other.pid_;
        status_ = other.status_;
        other.pid_ = -1;
    }
    return *this;
}

child_process::~child_process() {
    if (pid_ > 0 && !status_) {
        ::kill(pid_, SIGKILL);
        reap(true);
    }
}

bool child_process::reap(bool block) {
    if (status_) return true;
    if (pid_ <= 0) return false;
    int st = 0;
    pid_t r;
    do {
        r = waitpid(pid_, &st, block ? 0 : WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r != pid_) return false;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 255;
    return true;
}

bool child_process::running() { return pid_ > 0 && !reap(false); }

void child_process::kill(int sig) {
    if (running()) ::kill(pid_, sig);
}

int child_process::wait() {
    if (pid_ <= 0) throw error(errc::invalid_argument, "wait: no child process");
    reap(true);
    return *status_;
}

std::optional<int> child_process::wait_for(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) throw error(errc::invalid_argument, "wait_for: no child process");
    auto deadline = std::chrono::steady_clock::now() + timeout;
    // waitpid has no timeout; poll with short sleeps (children of serve are few and this is not a hot path).
    while (!reap(false)) {
        if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return status_;
}

std::string self_executable_path() {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0) throw error(errc::io, std::string("readlink /proc/self/exe: ") + std::strerror(errno));
    return std::string(buf, static_cast<size_t>(n));
}

}  // namespace zmoe
