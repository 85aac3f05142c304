// `zmoe ctl metrics|health|eplb --endpoint tcp://HOST:PORT`: operator views of a running server.

#include <boost/program_options.hpp>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "base/metrics.hpp"
#include "cli/command.hpp"
#include "cli/options.hpp"

namespace po = boost::program_options;

namespace {

int cmd_ctl(int argc, char** argv) {
    std::string what, endpoint;
    bool prometheus = false, as_json = false, per_expert = false;
    int timeout_ms = 5000;
    po::options_description opts("zmoe ctl options (zmoe ctl metrics|health|eplb --endpoint E)");
    opts.add_options()("help,h", "show this help")("what", po::value(&what)->required(), "metrics, health or eplb")(
        "endpoint", po::value(&endpoint)->default_value("tcp://127.0.0.1:5555"), "the frontend")(
        "prometheus", po::bool_switch(&prometheus), "metrics in Prometheus text format")(
        "per-expert", po::bool_switch(&per_expert), "with --prometheus: also the per-expert series (layers x experts)")(
        "json", po::bool_switch(&as_json), "raw JSON")("timeout-ms", po::value(&timeout_ms)->default_value(timeout_ms),
                                                       "how long to wait for the answer");
    po::positional_options_description pos;
    pos.add("what", 1);
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, opts, vm, &pos)) return 0;
    zmoe::zmoe_client client(endpoint);
    const auto timeout = std::chrono::milliseconds(timeout_ms);
    if (what == "health") {
        const auto h = client.health(timeout);
        nlohmann::ordered_json j = {{"status", h.status},
                                    {"model", h.model},
                                    {"num_workers", h.num_workers},
                                    {"num_workers_alive", h.num_workers_alive},
                                    {"num_running", h.num_running},
                                    {"num_waiting", h.num_waiting},
                                    {"uptime_s", h.uptime_s},
                                    {"version", h.version},
                                    {"detail", h.detail}};
        std::cout << j.dump(as_json ? -1 : 2) << "\n";
        return h.status == "ok" ? 0 : 1;
    }
    const auto text = client.metrics(timeout);
    const auto all = nlohmann::json::parse(text);
    if (what == "metrics") {
        if (as_json) {
            std::cout << text << "\n";
            return 0;
        }
        nlohmann::json actors = nlohmann::json::object();
        for (const auto& [k, v] : all.items())
            if (v.is_object() && v.contains("counters")) actors[k] = v;
        std::cout << (prometheus ? zmoe::metrics_to_prometheus(actors, {.per_expert = per_expert})
                                 : zmoe::metrics_to_table(actors));
        return 0;
    }
    if (what == "eplb") {
        if (!all.contains("eplb_placement")) {
            std::cout << "no expert placement reported (the engine is not serving a MoE model yet)\n";
            return 1;
        }
        const auto& placement = all["eplb_placement"];
        const auto& g = all["engine_core"]["gauges"];
        const auto& c = all["engine_core"]["counters"];
        const int workers = static_cast<int>(all["engine_core"]["gauges"].value("workers", 1.0));
        std::cout << "rebalances: " << c.value("eplb_rebalances", 0.0)
                  << "  expert moves: " << c.value("eplb_expert_moves", 0.0)
                  << "  bytes moved: " << c.value("eplb_bytes_moved", 0.0) << "\nlast rebalance: balancedness "
                  << g.value("eplb_balancedness_before", 1.0) << " -> " << g.value("eplb_balancedness_after", 1.0)
                  << "; current placement on the latest window: " << g.value("eplb_balancedness_current", 1.0) << "\n";
        for (size_t l = 0; l < placement.size(); ++l) {
            const auto& row = placement[l];
            const size_t per_rank = row.size() / std::max(1, workers);
            std::cout << "layer " << l << ":";
            for (size_t s = 0; s < row.size(); ++s) {
                if (per_rank && s % per_rank == 0) std::cout << "  | rank " << s / per_rank << ":";
                std::cout << " " << row[s].get<int>();
            }
            std::cout << "\n";
        }
        return 0;
    }
    throw zmoe::error(zmoe::errc::invalid_argument, "unknown ctl view '" + what + "' (metrics, health, eplb)");
}

}  // namespace

ZMOE_COMMAND("ctl", "operator views of a running server: metrics, health, eplb", cmd_ctl);
