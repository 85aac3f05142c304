#pragma once
// The in-process actor harness, frontend side: the real frontend actor, engine core and CPU workers of one run as
// threads of this process (inproc:// links; the clients' endpoint is inproc unless --bind says otherwise), the
// frontend configured from a `zmoe frontend` command line exactly as that command parses it. Tests reach it with
// the C++ client (actors/zmoe_client.hpp), so the frontend's own rules (limits, tokenizer, chat template,
// sampling defaults, drain, liveness) are tested without spawning processes.

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "actors/zmoe_client.hpp"
#include "cli/frontend_flags.hpp"
#include "frontend/frontend_actor.hpp"
#include "tests/engine_core/inproc_engine.hpp"

namespace zmoe::test {

/// `args` with `flag value` appended unless `flag` is already there.
inline void add_default_flag(std::vector<std::string>& args, const std::string& flag, const std::string& value) {
    if (std::find(args.begin(), args.end(), flag) == args.end()) args.insert(args.end(), {flag, value});
}

/// An engine core and its CPU workers (inproc_backend) behind the real frontend.
class inproc_server : public inproc_backend {
  public:
    /// frontend_args: `zmoe frontend` flags; --engine, --model, --bind, --workers and --heartbeat-ms default to
    /// this harness's engine core, config's model, a private inproc endpoint, config's workers and heartbeat, and
    /// --skip-tokenizer-init is added for a model without tokenizer.json unless --tokenizer is given.
    explicit inproc_server(const engine_config& config, std::vector<std::string> frontend_args = {})
        : inproc_backend(config) {
        add_default_flag(frontend_args, "--engine", frontend_endpoint());
        add_default_flag(frontend_args, "--model", config.model);
        add_default_flag(frontend_args, "--bind", endpoint("-clients"));
        add_default_flag(frontend_args, "--workers", std::to_string(config.workers));
        add_default_flag(frontend_args, "--heartbeat-ms", std::to_string(config.heartbeat_ms));
        // The model fixtures have no tokenizer.json: they serve token ids, which the frontend must be told.
        const auto has = [&](const char* flag) {
            return std::find(frontend_args.begin(), frontend_args.end(), flag) != frontend_args.end();
        };
        if (!has("--tokenizer") && !has("--skip-tokenizer-init") &&
            !std::filesystem::exists(std::filesystem::path(config.model) / "tokenizer.json"))
            frontend_args.push_back("--skip-tokenizer-init");
        frontend_ = std::make_unique<frontend_actor>(cli::parse_frontend_args(frontend_args));
        frontend_->start();
        // Read on the frontend's own thread, after its start-up bound the clients' socket.
        auto bound = std::make_shared<std::promise<std::string>>();
        auto endpoint = bound->get_future();
        frontend_->post([f = frontend_.get(), bound] { bound->set_value(f->client_endpoint()); });
        if (endpoint.wait_for(std::chrono::seconds(10)) == std::future_status::ready) client_endpoint_ = endpoint.get();
    }
    /// The frontend drains (its --shutdown-timeout) and stops before the engine core and workers.
    ~inproc_server() { frontend_.reset(); }

    frontend_actor& frontend() { return *frontend_; }
    /// Where clients connect (the resolved endpoint: a tcp port 0 / * comes back with its port).
    const std::string& client_endpoint() const { return client_endpoint_; }
    std::unique_ptr<zmoe_client> connect() const { return std::make_unique<zmoe_client>(client_endpoint()); }

    /// Waits for health "ok" (the engine core welcomed the frontend); false when the timeout passes first.
    bool wait_serving(std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) const {
        auto c = connect();
        return wait_until(
            [&] {
                try {
                    return c->health(std::chrono::milliseconds(300)).status == "ok";
                } catch (const error&) {
                    return false;
                }
            },
            timeout);
    }

  private:
    std::unique_ptr<frontend_actor> frontend_;
    std::string client_endpoint_;
};

/// The frontend's counter `name` from a metrics reply (0 when absent).
inline double frontend_counter(zmoe_client& c, const std::string& name) {
    const auto m = nlohmann::json::parse(c.metrics(std::chrono::seconds(10)));
    const auto& counters = m["frontend"]["counters"];
    return counters.contains(name) ? counters[name].get<double>() : 0.0;
}

}  // namespace zmoe::test
