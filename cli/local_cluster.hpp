#pragma once
// The actor processes of one node, started from this executable (posix_spawn of `zmoe engine-core`, `zmoe
// worker` × N, `zmoe frontend`) and owned by the caller: `zmoe serve` and `zmoe generate` use it. Single-node
// links use ipc:// endpoints in a private temporary directory; the client endpoint is whatever the caller picks.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "actors/child_process.hpp"
#include "cli/engine_flags.hpp"

namespace zmoe::cli {

class local_cluster {
  public:
    /// Starts every actor. client_endpoint empty: an ipc endpoint in the private directory.
    /// chat_template: a Jinja file replacing the tokenizer's chat template (empty: the tokenizer's).
    local_cluster(const engine_flags& flags, std::string client_endpoint, const std::string& tokenizer = "",
                  const std::string& chat_template = "");
    /// Anything still running is stopped: SIGTERM, then SIGKILL after a grace period.
    ~local_cluster();
    local_cluster(const local_cluster&) = delete;
    local_cluster& operator=(const local_cluster&) = delete;

    const std::string& client_endpoint() const { return client_endpoint_; }

    /// Waits for the frontend to report "ok" health: true; false when SIGINT/SIGTERM arrived first (with
    /// install_stop_signal_handlers). Throws zmoe::error(peer_dead) naming the actor when one exits first, or when
    /// timeout passes.
    bool wait_ready(std::chrono::milliseconds timeout);
    /// The first actor found to have exited since the last call: "worker 1 (pid 123) exited with status 1".
    std::optional<std::string> check_exited();
    /// Graceful stop: SIGTERM to the frontend (which drains and shuts the engine core and workers down), wait up to
    /// `timeout` for every process, SIGKILL whatever is left. True when every actor exited 0.
    bool shutdown(std::chrono::milliseconds timeout);

  private:
    struct member {
        std::string name;
        child_process proc;
        std::optional<int> status;
    };
    std::string dir_;
    std::string client_endpoint_;
    std::vector<member> members_;  // engine core, workers..., frontend last
};

}  // namespace zmoe::cli
