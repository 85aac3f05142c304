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
    zmoe::frontend_options o;
    int heartbeat_ms = 1000;
    double shutdown_timeout_s = 5.0, client_send_timeout_s = 30.0, client_idle_timeout_s = 60.0;
    size_t tokenizer_threads = o.tokenizer_threads;
    po::options_description opts("zmoe frontend options");
    opts.add_options()("engine", po::value(&o.engine_endpoint)->required(), "the engine core's frontend endpoint")(
        "bind", po::value(&o.client_endpoint)->default_value(o.client_endpoint), "where clients connect")(
        "model", po::value(&o.model_dir)->required(), "checkpoint directory (tokenizer.json, config.json)")(
        "tokenizer", po::value(&o.tokenizer_path), "tokenizer.json or its directory (default: --model)")(
        "chat-template", po::value(&o.chat_template_path), "a Jinja file replacing the tokenizer's chat template")(
        "workers", po::value(&o.num_workers)->default_value(1), "workers of the run (for health before ready)")(
        "heartbeat-ms", po::value(&heartbeat_ms)->default_value(heartbeat_ms), "heartbeat interval")(
        "heartbeat-max-missed", po::value(&o.heartbeat_max_missed)->default_value(o.heartbeat_max_missed),
        "intervals of silence before the engine core is declared dead")("run-id", po::value(&o.run_id),
                                                                        "echoed in health replies (set by serve)")(
        "shutdown-timeout", po::value(&shutdown_timeout_s)->default_value(shutdown_timeout_s),
        "seconds running requests may finish after SIGTERM; then they end with error 7 (aborted)")(
        "client-send-timeout", po::value(&client_send_timeout_s)->default_value(client_send_timeout_s),
        "seconds a client may take none of its messages before its requests end with an error")(
        "max-prompt-bytes", po::value(&o.max_prompt_bytes)->default_value(o.max_prompt_bytes),
        "text prompts longer than this are refused")("tokenizer-threads",
                                                     po::value(&tokenizer_threads)->default_value(tokenizer_threads),
                                                     "threads tokenizing prompts")(
        "skip-tokenizer-init", po::bool_switch(&o.skip_tokenizer_init),
        "serve prompt_token_ids only, without a tokenizer (required when there is no tokenizer.json)")(
        "client-idle-timeout", po::value(&client_idle_timeout_s)->default_value(client_idle_timeout_s),
        "seconds after which a silent client with no live request is forgotten");
    if (!parse(argc, argv, opts)) return 0;
    check_heartbeat(heartbeat_ms, o.heartbeat_max_missed);
    zmoe::log_set_name("frontend");
    zmoe::install_stop_signal_handlers();
    o.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
    o.drain_timeout = std::chrono::milliseconds(static_cast<int64_t>(shutdown_timeout_s * 1000));
    o.client_send_timeout = std::chrono::milliseconds(static_cast<int64_t>(client_send_timeout_s * 1000));
    o.client_idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(client_idle_timeout_s * 1000));
    if (o.client_idle_timeout.count() <= 0 || o.client_send_timeout.count() <= 0)
        throw zmoe::error(zmoe::errc::invalid_argument,
                          "--client-send-timeout / --client-idle-timeout must be positive");
    o.tokenizer_threads = tokenizer_threads;
    o.api_key = zmoe::api_key_from_env();  // from the environment, never the command line (visible in ps)
    zmoe::frontend_actor a(o);
    a.run();
    return a.exit_code();
}

}  // namespace

ZMOE_COMMAND("engine-core", "run the engine core actor (started by serve / launch.sh)", cmd_engine_core);
ZMOE_COMMAND("worker", "run one worker actor (started by serve / launch.sh)", cmd_worker);
ZMOE_COMMAND("frontend", "run the frontend actor (started by serve / launch.sh)", cmd_frontend);
