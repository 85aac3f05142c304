// `zmoe serve --model DIR [--workers N] [--device cpu|cuda] [--port P]`: every actor of one node as its own
// process, serving clients on tcp://HOST:PORT until SIGINT/SIGTERM, which drains and exits 0. A failing actor
// makes serve report it, keep answering health for a moment (so clients see the failure), and exit 1.

#include <boost/program_options.hpp>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>

#include "actors/child_process.hpp"
#include "actors/client_auth.hpp"
#include "actors/stop_signals.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "cli/command.hpp"
#include "cli/engine_flags.hpp"
#include "cli/frontend_flags.hpp"
#include "cli/local_cluster.hpp"
#include "cli/options.hpp"
#include "cli/output_parsers.hpp"
#include "frontend/chat_messages.hpp"

namespace po = boost::program_options;

namespace {

int cmd_serve(int argc, char** argv) {
    zmoe::engine_config f;
    int port = 5555;
    std::string host = "127.0.0.1";
    zmoe::cli::frontend_flags fe;
    std::string api_key;
    int http_port = -1;
    int failure_grace_ms = 3000;
    std::string tool_call_parser = "auto", reasoning_parser = "auto";
    po::options_description opts("zmoe serve options");
    opts.add_options()("help,h", "show this help")("port", po::value(&port)->default_value(port),
                                                   "client port of the frontend")(
        "host", po::value(&host)->default_value(host), "address the frontend binds (loopback unless told)")(
        "http-port", po::value(&http_port), "also serve the OpenAI-compatible HTTP API on this port (on --host)")(
        "tool-call-parser", po::value(&tool_call_parser)->default_value(tool_call_parser),
        "tool calls in chat outputs (HTTP API): hermes, deepseek_v3, llama3_json, mistral, none, or auto (what the "
        "chat template shows)")(
        "reasoning-parser", po::value(&reasoning_parser)->default_value(reasoning_parser),
        "thinking apart from the answer (reasoning_content): qwen3, deepseek_r1, none, or auto")(
        "failure-grace-ms", po::value(&failure_grace_ms)->default_value(failure_grace_ms),
        "after an actor fails: how long health keeps reporting it before serve exits 1")(
        "api-key", po::value(&api_key),
        "clients not on loopback must present this key (zmoe client --api-key, HTTP Authorization: Bearer); "
        "required with a --host other clients can reach (default: ZMOE_API_KEY)");
    zmoe::cli::add_served_frontend_options(opts, fe);
    zmoe::cli::add_engine_options(opts, f);
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, opts, vm)) return 0;
    zmoe::cli::default_workers_to_gpus(f, vm);
    if (f.grammar_tokenizer.empty())
        f.grammar_tokenizer = fe.options.tokenizer_path;  // the workers' structured outputs
    zmoe::log_set_name("serve");
    zmoe::install_stop_signal_handlers();

    if (port < 1 || port > 65535)
        throw zmoe::error(zmoe::errc::invalid_argument, "--port " + std::to_string(port) + " is not in 1..65535");
    if (fe.shutdown_timeout_s < 0 || fe.client_send_timeout_s <= 0 || fe.client_idle_timeout_s <= 0)
        throw zmoe::error(zmoe::errc::invalid_argument,
                          "--shutdown-timeout / --client-send-timeout / --client-idle-timeout must be positive");
    zmoe::parse_content_format(fe.options.chat_template_content_format);  // a bad value fails before any child starts
    const std::string endpoint = "tcp://" + host + ":" + std::to_string(port);
    const std::string& tokenizer = fe.options.tokenizer_path;
    const auto parsers = zmoe::cli::resolve_output_parsers(
        tool_call_parser, reasoning_parser, tokenizer.empty() ? f.model : tokenizer, fe.options.chat_template_path);
    if (!fe.options.skip_tokenizer_init && !zmoe::cli::tokenizer_json_exists(f.model, tokenizer))
        throw zmoe::error(zmoe::errc::invalid_argument,
                          "no tokenizer.json in " + (tokenizer.empty() ? f.model : tokenizer) +
                              ": give --tokenizer, or --skip-tokenizer-init to serve prompt_token_ids only");
    // The key reaches the frontend and the HTTP gateway through the environment (not their command lines).
    if (!api_key.empty()) setenv("ZMOE_API_KEY", api_key.c_str(), 1);
    if (zmoe::api_key_from_env().empty() && zmoe::endpoint_reachable_off_host(endpoint))
        throw zmoe::error(zmoe::errc::invalid_argument,
                          "--host " + host +
                              " takes clients from other hosts: give --api-key (or ZMOE_API_KEY), or bind a loopback "
                              "address");
    const auto stop_wait = std::chrono::milliseconds(static_cast<int64_t>(fe.shutdown_timeout_s * 1000) + 5000);
    zmoe::cli::local_cluster cluster(f, endpoint, "", zmoe::cli::served_frontend_args(fe));
    try {
        if (!cluster.wait_ready(std::chrono::minutes(10))) {
            ZMOE_LOG(info, "zmoe serve: stop requested while starting");
            return cluster.shutdown(stop_wait) ? 0 : 1;
        }
    } catch (const zmoe::error& e) {
        ZMOE_LOG(error, "zmoe serve: " << e.what());
        cluster.shutdown(std::chrono::milliseconds(3000));
        return 1;
    }
    // The HTTP gateway: a client of the frontend like any other, in its own process.
    std::optional<zmoe::child_process> gateway;
    if (http_port >= 0) {
        // Its frontend connection heartbeats at the frontend's interval: the frontend takes a client that heartbeated
        // and then fell silent for 3 of its intervals for gone.
        gateway = zmoe::child_process::spawn(
            {zmoe::self_executable_path(), "api-server", "--endpoint", endpoint, "--port", std::to_string(http_port),
             "--host", host, "--heartbeat-ms", std::to_string(f.heartbeat_ms), "--heartbeat-max-missed",
             std::to_string(f.heartbeat_max_missed), "--tool-call-parser",
             parsers.tool_call.empty() ? "none" : parsers.tool_call, "--reasoning-parser",
             parsers.reasoning.empty() ? "none" : parsers.reasoning},
            {"ZMOE_DIE_WITH_PARENT=1"});
        std::cout << "zmoe serve: OpenAI API on http://" << host << ":" << http_port << " (tool-call parser "
                  << (parsers.tool_call.empty() ? "none" : parsers.tool_call) << ", reasoning parser "
                  << (parsers.reasoning.empty() ? "none" : parsers.reasoning) << ")" << std::endl;
    }
    const auto stop_gateway = [&gateway] {
        if (gateway && gateway->running()) {
            gateway->kill(SIGTERM);
            if (!gateway->wait_for(std::chrono::seconds(5))) {
                gateway->kill(SIGKILL);
                gateway->wait();
            }
        }
    };
    ZMOE_LOG(info, "zmoe serve: ready on " << endpoint << " (" << f.workers << " worker(s), " << f.device << ")");
    std::cout << "zmoe serve: ready on " << endpoint << std::endl;
    while (!zmoe::stop_signal_received()) {
        if (auto gone = cluster.check_exited()) {
            ZMOE_LOG(error, "zmoe serve: " << *gone << "; shutting down");
            std::this_thread::sleep_for(std::chrono::milliseconds(failure_grace_ms));
            stop_gateway();
            cluster.shutdown(std::chrono::milliseconds(3000));
            return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ZMOE_LOG(info, "zmoe serve: stop requested; draining");
    stop_gateway();
    const bool clean = cluster.shutdown(stop_wait);
    if (!clean) ZMOE_LOG(error, "zmoe serve: an actor exited with an error while stopping");
    return clean ? 0 : 1;
}

}  // namespace

ZMOE_COMMAND("serve", "serve a model: frontend, engine core and workers as processes", cmd_serve);
