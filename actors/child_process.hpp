#pragma once
// Child processes for `zmoe serve`, which starts each actor as its own process. Started with posix_spawn (never a
// bare fork: forking a process that has initialised CUDA or started threads is unsafe), reaped by their owner.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace zmoe {

class child_process {
  public:
    /// Starts argv[0] with arguments argv (argv[0] is searched in PATH unless it contains '/'). The child inherits
    /// stdio and the environment, plus extra_env entries ("NAME=value", overriding inherited ones); SIGINT/SIGTERM
    /// are reset to their defaults and unblocked in it. Throws zmoe::error(errc::io) when it cannot be started.
    static child_process spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {});

    child_process() = default;
    child_process(child_process&& other) noexcept;
    child_process& operator=(child_process&& other) noexcept;
    child_process(const child_process&) = delete;
    child_process& operator=(const child_process&) = delete;
    /// A child still running is killed (SIGKILL) and reaped: no orphans, no zombies.
    ~child_process();

    pid_t pid() const { return pid_; }
    /// True until the child has exited and been reaped.
    bool running();
    /// Sends a signal (SIGTERM asks an actor process to drain and exit).
    void kill(int sig);
    /// Waits for exit; the exit status, or 128 + signal number when a signal ended it.
    int wait();
    /// As wait(), giving up after timeout (nullopt).
    std::optional<int> wait_for(std::chrono::milliseconds timeout);

  private:
    bool reap(bool block);

    pid_t pid_ = -1;
    std::optional<int> status_;
};

/// The running executable's path (/proc/self/exe), for `zmoe serve` to start actors as `zmoe <role> ...`.
std::string self_executable_path();

}  // namespace zmoe
