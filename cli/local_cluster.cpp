#include "cli/local_cluster.hpp"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "actors/run_secret.hpp"
#include "actors/stop_signals.hpp"
#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "base/log.hpp"

namespace zmoe::cli {

namespace {

constexpr const char* kDirPrefix = "zmoe-run-";

/// Private directories of earlier runs whose owner is dead (a SIGKILLed serve cannot clean up): the owner's pid
/// is in the name.
void remove_orphaned_dirs() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/tmp", ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind(kDirPrefix, 0) != 0) continue;
        const auto dash = name.find('-', std::strlen(kDirPrefix));
        if (dash == std::string::npos) continue;
        const long pid = std::strtol(name.c_str() + std::strlen(kDirPrefix), nullptr, 10);
        if (pid <= 0 || pid == getpid()) continue;
        if (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // its owner lives
        std::error_code rm;
        std::filesystem::remove_all(e.path(), rm);
    }
}

}  // namespace

bool tokenizer_json_exists(const std::string& model, const std::string& tokenizer) {
    const std::filesystem::path p = tokenizer.empty() ? model : tokenizer;
    return std::filesystem::exists(std::filesystem::is_directory(p) ? p / "tokenizer.json" : p);
}

namespace {

std::string random_run_id() {
    std::random_device rd;
    char buf[33];
    std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
    return buf;
}

}  // namespace

local_cluster::local_cluster(const engine_config& flags, std::string client_endpoint, const std::string& tokenizer,
                             const std::vector<std::string>& frontend_args) {
    // Fail before starting anything when the checkpoint is not even there; deeper problems come from the workers.
    if (!std::filesystem::exists(std::filesystem::path(flags.model) / "config.json"))
        throw error(errc::invalid_checkpoint, flags.model + ": no config.json (not a checkpoint directory)");
    if (flags.workers < 1) throw error(errc::invalid_argument, "--workers must be >= 1");
    if (flags.heartbeat_ms < 1 || flags.heartbeat_max_missed < 1)
        throw error(errc::invalid_argument, "--heartbeat-ms and --heartbeat-max-missed must be >= 1");
    remove_orphaned_dirs();
    std::string tmpl = "/tmp/" + std::string(kDirPrefix) + std::to_string(getpid()) + "-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw error(errc::io, "cannot create a private directory under /tmp");
    dir_ = tmpl;
    run_id_ = random_run_id();
    const std::string worker_ep = "ipc://" + dir_ + "/workers";
    const std::string engine_fe = "ipc://" + dir_ + "/engine";
    client_endpoint_ = client_endpoint.empty() ? "ipc://" + dir_ + "/clients" : std::move(client_endpoint);
    const std::string exe = self_executable_path();
    // Every actor logs at this process's level (set by --log-level).
    const std::vector<std::string> log_args = {"--log-level", log_level_name(log_get_level())};

    std::vector<std::string> argv = {exe,       "engine-core",         "--worker-endpoint",
                                     worker_ep, "--frontend-endpoint", engine_fe};
    for (auto& a : engine_config_args(flags)) argv.push_back(a);
    argv.insert(argv.end(), log_args.begin(), log_args.end());
    // A fresh secret per run unless one was given: the actors refuse hellos and all-to-all frames without it.
    const std::string inherited = run_secret();
    const std::vector<std::string> env = {"ZMOE_DIE_WITH_PARENT=1",
                                          "ZMOE_RUN_SECRET=" + (inherited.empty() ? random_run_id() : inherited)};
    members_.push_back({"engine core", child_process::spawn(argv, env), std::nullopt});
    for (int r = 0; r < flags.workers; ++r) {
        std::vector<std::string> w = {exe,
                                      "worker",
                                      "--engine",
                                      worker_ep,
                                      "--rank",
                                      std::to_string(r),
                                      "--device",
                                      flags.device,
                                      "--heartbeat-ms",
                                      std::to_string(flags.heartbeat_ms),
                                      "--heartbeat-max-missed",
                                      std::to_string(flags.heartbeat_max_missed)};
        w.insert(w.end(), log_args.begin(), log_args.end());
        members_.push_back({"worker " + std::to_string(r), child_process::spawn(w, env), std::nullopt});
    }
    std::vector<std::string> fe = {exe,
                                   "frontend",
                                   "--engine",
                                   engine_fe,
                                   "--bind",
                                   client_endpoint_,
                                   "--model",
                                   flags.model,
                                   "--workers",
                                   std::to_string(flags.workers),
                                   "--heartbeat-ms",
                                   std::to_string(flags.heartbeat_ms),
                                   "--heartbeat-max-missed",
                                   std::to_string(flags.heartbeat_max_missed),
                                   "--run-id",
                                   run_id_};
    fe.insert(fe.end(), frontend_args.begin(), frontend_args.end());
    if (!tokenizer.empty()) {
        fe.push_back("--tokenizer");
        fe.push_back(tokenizer);
    }
    fe.insert(fe.end(), log_args.begin(), log_args.end());
    members_.push_back({"frontend", child_process::spawn(fe, env), std::nullopt});
}

local_cluster::~local_cluster() {
    shutdown(std::chrono::milliseconds(5000));
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

bool local_cluster::wait_ready(std::chrono::milliseconds timeout) {
    zmoe_client client(client_endpoint_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (stop_signal_received()) return false;
        if (auto gone = check_exited()) throw error(errc::peer_dead, *gone + " before the engine was ready");
        std::optional<client_health_reply> h;
        try {
            h = client.health(std::chrono::milliseconds(500));
        } catch (const error&) {
            // not answering yet: the frontend may still be starting
        }
        if (h && h->run_id != run_id_)
            throw error(errc::io, "another server answers on " + client_endpoint_ +
                                      " (not this run's frontend): is the port in use?");
        if (h && h->status == "ok") return true;
        if (h && h->status == "degraded") throw error(errc::peer_dead, "the engine failed to start: " + h->detail);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw error(errc::peer_dead, "the engine was not ready within " + std::to_string(timeout.count()) + " ms");
}

std::optional<std::string> local_cluster::check_exited() {
    for (auto& m : members_) {
        if (m.status) continue;
        if (auto st = m.proc.wait_for(std::chrono::milliseconds(0))) {
            m.status = *st;
            return m.name + " (pid " + std::to_string(m.proc.pid()) + ") exited with status " + std::to_string(*st);
        }
    }
    return std::nullopt;
}

bool local_cluster::shutdown(std::chrono::milliseconds timeout) {
    auto& frontend = members_.back();
    if (!frontend.status && frontend.proc.running()) frontend.proc.kill(SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool all_zero = true;
    // The frontend drains, then tells the engine core, which stops the workers: wait in that order.
    for (auto it = members_.rbegin(); it != members_.rend(); ++it) {
        if (!it->status) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            it->status = it->proc.wait_for(std::max(left, std::chrono::milliseconds(0)));
        }
    }
    for (auto& m : members_) {
        if (!m.status) {
            ZMOE_LOG(warn, m.name << " (pid " << m.proc.pid() << ") did not stop in time; terminating it");
            m.proc.kill(SIGTERM);
            m.status = m.proc.wait_for(std::chrono::milliseconds(1000));
            if (!m.status) {
                m.proc.kill(SIGKILL);
                m.status = m.proc.wait();
            }
        }
        if (*m.status != 0) all_zero = false;
    }
    return all_zero;
}

}  // namespace zmoe::cli
