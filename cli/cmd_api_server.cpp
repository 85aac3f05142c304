// `zmoe api-server --endpoint tcp://HOST:P [--port H] [--host ADDR] [bounds]`: the OpenAI-compatible HTTP gateway in
// front of a running frontend (docs/openai_api.md), until SIGINT/SIGTERM. `zmoe serve --http-port H` starts one itself.

#include <sys/prctl.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "actors/client_auth.hpp"
#include "actors/stop_signals.hpp"
#include "base/log.hpp"
#include "cli/command.hpp"
#include "cli/options.hpp"
#include "cli/output_parsers.hpp"
#include "gateway/http_gateway.hpp"

namespace po = boost::program_options;

namespace {

int cmd_api_server(int argc, char** argv) {
    zmoe::gateway::gateway_options o;
    int header_timeout_s = 10, body_timeout_s = 30, keep_alive_timeout_s = 30, send_timeout_s = 30;
    int heartbeat_ms = 1000;
    int legacy_threads = 0;
    std::string tool_call_parser = "none", reasoning_parser = "none";
    po::options_description opts("zmoe api-server options");
    opts.add_options()("endpoint", po::value(&o.frontend_endpoint)->required(),
                       "the frontend's client endpoint, e.g. tcp://127.0.0.1:5555")(
        "port", po::value(&o.port)->default_value(o.port), "HTTP port (0: any free port)")(
        "host", po::value(&o.host)->default_value(o.host), "address to listen on (loopback unless told)")(
        "served-model-name", po::value(&o.served_model_name), "the model name of /v1/models (default: the model's)")(
        "tool-call-parser", po::value(&tool_call_parser)->default_value(tool_call_parser),
        "tool calls in chat outputs: hermes, deepseek_v3, llama3_json, mistral or none (tool_choice auto needs one)")(
        "reasoning-parser", po::value(&reasoning_parser)->default_value(reasoning_parser),
        "thinking apart from the answer (reasoning_content): qwen3, deepseek_r1 or none")(
        "num-threads", po::value(&o.num_threads)->default_value(0), "I/O threads (0: one per core, at most 16)")(
        "threads", po::value(&legacy_threads), "the former name of --num-threads")(
        "header-timeout", po::value(&header_timeout_s)->default_value(header_timeout_s),
        "seconds a request's header may take to arrive")(
        "body-timeout", po::value(&body_timeout_s)->default_value(body_timeout_s),
        "seconds a request's body may take to arrive after its header")(
        "keep-alive-timeout", po::value(&keep_alive_timeout_s)->default_value(keep_alive_timeout_s),
        "seconds an idle keep-alive connection waits for its next request")(
        "send-timeout", po::value(&send_timeout_s)->default_value(send_timeout_s),
        "seconds a write to a client may make no progress before its request is ended")(
        "max-header-bytes", po::value(&o.max_header_bytes)->default_value(o.max_header_bytes),
        "largest request header (431 beyond)")("max-body-bytes",
                                               po::value(&o.max_body_bytes)->default_value(o.max_body_bytes),
                                               "largest request body (413 beyond)")(
        "max-connections", po::value(&o.max_connections)->default_value(o.max_connections),
        "open connections beyond which new ones get 503 and are closed (0: the descriptor limit less a margin)")(
        "max-connections-per-address",
        po::value(&o.max_connections_per_address)->default_value(o.max_connections_per_address),
        "the same per remote IP address")("max-inflight", po::value(&o.max_inflight)->default_value(o.max_inflight),
                                          "generate requests in flight beyond which new ones get 429 with Retry-After")(
        "heartbeat-ms", po::value(&heartbeat_ms)->default_value(heartbeat_ms),
        "heartbeat interval of the frontend connection (at most the frontend's own --heartbeat-ms)")(
        "heartbeat-max-missed", po::value(&o.heartbeat_max_missed)->default_value(o.heartbeat_max_missed),
        "intervals without a frame from the frontend before it is taken for dead");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, opts, vm)) return 0;
    if (legacy_threads > 0 && vm["num-threads"].defaulted()) o.num_threads = legacy_threads;
    if (tool_call_parser == "auto" || reasoning_parser == "auto") {
        std::cerr << "zmoe api-server: 'auto' parsers need the model (zmoe serve resolves them): give a name or none\n";
        return 2;
    }
    const auto parsers = zmoe::cli::resolve_output_parsers(tool_call_parser, reasoning_parser, "", "");
    o.tool_call_parser = parsers.tool_call;
    o.reasoning_parser = parsers.reasoning;
    for (const auto& [name, v] : {std::pair<const char*, int>{"header-timeout", header_timeout_s},
                                  {"body-timeout", body_timeout_s},
                                  {"keep-alive-timeout", keep_alive_timeout_s},
                                  {"send-timeout", send_timeout_s},
                                  {"heartbeat-ms", heartbeat_ms},
                                  {"heartbeat-max-missed", o.heartbeat_max_missed}})
        if (v <= 0) {
            std::cerr << "zmoe api-server: --" << name << " must be positive\n";
            return 2;
        }
    o.header_timeout = std::chrono::seconds(header_timeout_s);
    o.body_timeout = std::chrono::seconds(body_timeout_s);
    o.keep_alive_timeout = std::chrono::seconds(keep_alive_timeout_s);
    o.send_timeout = std::chrono::seconds(send_timeout_s);
    o.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
    // Started by `zmoe serve`: stop with it.
    if (const char* env = std::getenv("ZMOE_DIE_WITH_PARENT"); env && std::string(env) == "1") {
        const pid_t parent = getppid();
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) return 0;
    }
    o.api_key = zmoe::api_key_from_env();  // set by serve --api-key; its frontend client presents it too
    zmoe::log_set_name("api-server");
    zmoe::install_stop_signal_handlers();
    zmoe::gateway::http_gateway gw(o);
    const int port = gw.bind();
    std::thread watcher([&gw] {
        while (!zmoe::stop_signal_received()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        gw.stop();
    });
    std::cout << "zmoe api-server: listening on http://" << o.host << ":" << port << std::endl;
    ZMOE_LOG(info, "api-server: http://" << o.host << ":" << port << " -> " << o.frontend_endpoint);
    gw.run();
    watcher.join();
    return 0;
}

}  // namespace

ZMOE_COMMAND("api-server", "OpenAI-compatible HTTP gateway in front of a running frontend", cmd_api_server);
