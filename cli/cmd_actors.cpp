// One actor per process: `zmoe engine-core`, `zmoe worker`, `zmoe frontend`. `zmoe serve` and
// scripts/launch.sh start these; each runs until told to stop (SIGTERM/SIGINT or its peer's shutdown) and exits
// 0 after a clean stop, 1 after a failure.

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "actors/client_auth.hpp"
#include "actors/stop_signals.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "cli/command.hpp"
#include "cli/engine_flags.hpp"
#include "cli/frontend_flags.hpp"
#include "cli/options.hpp"
#include "engine_core/engine_core_actor.hpp"
#include "frontend/frontend_actor.hpp"
#include "workers/worker_actor.hpp"

namespace po = boost::program_options;

namespace {

/// Actors started by serve/generate/launch.sh (ZMOE_DIE_WITH_PARENT=1) stop when their parent dies, even by
/// SIGKILL: no orphaned actors keep a port or a GPU.
void follow_parent() {
    const char* env = std::getenv("ZMOE_DIE_WITH_PARENT");
    if (!env || std::string(env) != "1") return;
    const pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) std::raise(SIGTERM);  // the parent died before prctl took effect
}

bool parse(int argc, char** argv, po::options_description& opts) {
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, opts, vm)) return false;
    follow_parent();
    return true;
}

/// The heartbeat flags are checked before any actor exists (the runtime requires both positive).
void check_heartbeat(int heartbeat_ms, int max_missed) {
    if (heartbeat_ms < 1 || max_missed < 1)
        throw zmoe::error(zmoe::errc::invalid_argument, "--heartbeat-ms and --heartbeat-max-missed must be >= 1");
}

int cmd_engine_core(int argc, char** argv) {
    zmoe::engine_core_options o;
    po::options_description opts("zmoe engine-core options");
    opts.add_options()("worker-endpoint", po::value(&o.worker_endpoint)->required(), "bind: workers connect here")(
        "frontend-endpoint", po::value(&o.frontend_endpoint)->required(), "bind: the frontend connects here");
    zmoe::cli::add_engine_options(opts, o.config);
    if (!parse(argc, argv, opts)) return 0;
    check_heartbeat(o.config.heartbeat_ms, o.config.heartbeat_max_missed);
    zmoe::log_set_name("engine_core");
    zmoe::install_stop_signal_handlers();
    zmoe::engine_core_actor a(o);
    a.run();
    return a.exit_code();
}

int cmd_worker(int argc, char** argv) {
    zmoe::worker_options o;
    int heartbeat_ms = 1000;
    po::options_description opts("zmoe worker options (the run's configuration comes from the engine core)");
    opts.add_options()("engine", po::value(&o.engine_endpoint)->required(), "the engine core's worker endpoint")(
        "rank", po::value(&o.rank)->required(), "this worker's rank")(
        "device", po::value(&o.device)->default_value(o.device), "cpu or cuda (must be the engine core's --device)")(
        "data-bind", po::value(&o.data_bind)->default_value(o.data_bind), "where peers reach this worker")(
        "heartbeat-ms", po::value(&heartbeat_ms)->default_value(heartbeat_ms), "heartbeat interval")(
        "heartbeat-max-missed", po::value(&o.heartbeat_max_missed)->default_value(o.heartbeat_max_missed),
        "intervals of silence before the engine core is declared dead");
    if (!parse(argc, argv, opts)) return 0;
    check_heartbeat(heartbeat_ms, o.heartbeat_max_missed);
    zmoe::log_set_name("worker_" + std::to_string(o.rank));
    zmoe::install_stop_signal_handlers();
    o.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
    zmoe::worker_actor a(o);
    a.run();
    return a.exit_code();
}

int cmd_frontend(int argc, char** argv) {
    zmoe::cli::frontend_flags f;
    po::options_description opts("zmoe frontend options");
    zmoe::cli::add_frontend_options(opts, f);
    if (!parse(argc, argv, opts)) return 0;
    zmoe::frontend_options o = f.resolved();
    check_heartbeat(f.heartbeat_ms, o.heartbeat_max_missed);
    zmoe::log_set_name("frontend");
    zmoe::install_stop_signal_handlers();
    o.api_key = zmoe::api_key_from_env();  // from the environment, never the command line (visible in ps)
    zmoe::frontend_actor a(o);
    a.run();
    return a.exit_code();
}

}  // namespace

ZMOE_COMMAND("engine-core", "run the engine core actor (started by serve / launch.sh)", cmd_engine_core);
ZMOE_COMMAND("worker", "run one worker actor (started by serve / launch.sh)", cmd_worker);
ZMOE_COMMAND("frontend", "run the frontend actor (started by serve / launch.sh)", cmd_frontend);
