// `zmoe api-server --endpoint tcp://HOST:P [--port H] [--host ADDR]`: the OpenAI-compatible HTTP gateway in front of
// a running frontend (docs/openai_api.md), until SIGINT/SIGTERM. `zmoe serve --http-port H` starts one itself.

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
#include "gateway/http_gateway.hpp"

namespace po = boost::program_options;

namespace {

int cmd_api_server(int argc, char** argv) {
    zmoe::gateway::gateway_options o;
    po::options_description opts("zmoe api-server options");
    opts.add_options()("endpoint", po::value(&o.frontend_endpoint)->required(),
                       "the frontend's client endpoint, e.g. tcp://127.0.0.1:5555")(
        "port", po::value(&o.port)->default_value(o.port), "HTTP port (0: any free port)")(
        "host", po::value(&o.host)->default_value(o.host), "address to listen on (loopback unless told)")(
        "served-model-name", po::value(&o.served_model_name), "the model name of /v1/models (default: the model's)")(
        "threads", po::value(&o.num_threads)->default_value(o.num_threads), "concurrent HTTP requests");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, opts, vm)) return 0;
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
