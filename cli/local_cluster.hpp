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

/// True when a tokenizer.json is where the frontend will look: `tokenizer` (a file or a directory), else `model`.
bool tokenizer_json_exists(const std::string& model, const std::string& tokenizer);

class local_cluster {
  public:
    /// Starts every actor: the engine core with `config` (engine_config_args), each worker with only what it needs
    /// before the welcome (rank, device, heartbeat), the frontend. client_endpoint empty: an ipc endpoint in the
    /// private directory. frontend_args are passed on to `zmoe frontend` (e.g. --shutdown-timeout). Private
    /// directories left by runs whose parent died (SIGKILL) are removed first.
    local_cluster(const engine_config& config, std::string client_endpoint, const std::string& tokenizer = "",
                  const std::vector<std::string>& frontend_args = {});
    /// Anything still running is stopped: SIGTERM, then SIGKILL after a grace period.
    ~local_cluster();
    local_cluster(const local_cluster&) = delete;
    local_cluster& operator=(const local_cluster&) = delete;

    const std::string& client_endpoint() const { return client_endpoint_; }

    /// Waits for this run's frontend (its health reply carries this run's id) to report "ok": true; false when
    /// SIGINT/SIGTERM arrived first (with install_stop_signal_handlers). Throws zmoe::error(peer_dead) naming the actor
    /// when one exits first, or when timeout passes.
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
    std::string run_id_;
    std::string client_endpoint_;
    std::vector<member> members_;  // engine core, workers..., frontend last
};

}  // namespace zmoe::cli
