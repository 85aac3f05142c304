#include "base/metrics.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

namespace zmoe {

histogram::histogram() {
    for (double decade = 1e-3; decade < 1e7; decade *= 10)
        for (double m : {1.0, 2.0, 5.0}) bounds.push_back(decade * m);
    counts.assign(bounds.size() + 1, 0);
}

void histogram::observe(double v) {
    const size_t i = std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin();
    ++counts[i];
    ++count;
    sum += v;
    max = count == 1 ? v : std::max(max, v);
}

double histogram::quantile(double q) const {
    if (count == 0) return 0.0;
    const double target = q * static_cast<double>(count);
    uint64_t seen = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
        seen += counts[i];
        if (static_cast<double>(seen) >= target && counts[i] > 0)
            return i < bounds.size() ? std::min(bounds[i], max) : max;
    }
    return max;
}

double metrics_registry::counter(const std::string& name) const {
    auto it = counters_.find(name);
    return it == counters_.end() ? 0.0 : it->second;
}

double metrics_registry::gauge(const std::string& name) const {
    auto it = gauges_.find(name);
    return it == gauges_.end() ? 0.0 : it->second;
}

nlohmann::json metrics_registry::to_json() const {
    nlohmann::json out = {{"counters", nlohmann::json::object()},
                          {"gauges", nlohmann::json::object()},
                          {"histograms", nlohmann::json::object()}};
    for (const auto& [k, v] : counters_) out["counters"][k] = v;
    for (const auto& [k, v] : gauges_) out["gauges"][k] = v;
    for (const auto& [k, h] : histograms_) {
        nlohmann::json buckets = nlohmann::json::array();
        uint64_t cumulative = 0;
        for (size_t i = 0; i < h.bounds.size(); ++i) {
            cumulative += h.counts[i];
            if (h.counts[i]) buckets.push_back({h.bounds[i], cumulative});
        }
        out["histograms"][k] = {{"count", h.count},       {"sum", h.sum},           {"max", h.max},
                                {"p50", h.quantile(0.5)}, {"p90", h.quantile(0.9)}, {"p99", h.quantile(0.99)},
                                {"buckets", buckets}};
    }
    return out;
}

namespace {

const nlohmann::json& section_of(const nlohmann::json& m, const char* key) {
    static const nlohmann::json empty = nlohmann::json::object();
    auto it = m.find(key);
    return it == m.end() ? empty : *it;
}

std::string num(double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.10g", v);
    return buf;
}

/// What the exposition says about a metric the engine records: its HELP text and, for the engine's monotone
/// values kept as gauges, that they are counters. Names are after the unit and per-rank conventions.
struct family_info {
    const char* help;
    bool counter_from_gauge = false;
};

const std::map<std::string, family_info>& known_families() {
    static const std::map<std::string, family_info> table = {
        // engine core
        {"steps", {"Engine steps completed (all ranks answered)."}},
        {"step_seconds", {"Time from sending a step to the last rank's result."}},
        {"step_tokens", {"Tokens scheduled per step, over all ranks."}},
        {"requests_added", {"Requests the engine core accepted."}},
        {"requests_finished", {"Requests finished, by reason."}},
        {"prompt_tokens", {"Prompt tokens of accepted requests."}},
        {"generation_tokens", {"Tokens generated."}},
        {"tokens_sampled_per_rank", {"Tokens sampled by each rank."}},
        {"tokens_scheduled_per_rank", {"Tokens scheduled on each rank.", true}},
        {"requests_running", {"Requests being generated, all ranks."}},
        {"requests_running_per_rank", {"Requests being generated on each rank."}},
        {"requests_waiting", {"Requests queued without a token yet, all ranks."}},
        {"requests_waiting_per_rank", {"Requests queued on each rank."}},
        {"kv_blocks_used_per_rank", {"KV cache blocks in use on each rank."}},
        {"kv_blocks_total_per_rank", {"KV cache blocks of each rank."}},
        {"preemptions", {"Requests preempted for lack of KV blocks (recomputed later).", true}},
        {"discarded_tokens", {"Tokens computed past a stop and discarded (async scheduling).", true}},
        {"steps_in_flight", {"Steps sent whose results are not all in."}},
        {"prefix_cache_queries", {"Prefix cache queries: prompt tokens of requests scheduled for the first time."}},
        {"prefix_cache_hits", {"Prefix cache hits: prompt tokens whose KV came from the prefix cache."}},
        {"prefix_cache_queries_per_rank", {"Prefix cache queries on each rank, in prompt tokens."}},
        {"prefix_cache_hits_per_rank", {"Prefix cache hits on each rank, in prompt tokens."}},
        {"prefix_cache_hit_rate", {"Prefix cache hits over queries since start (tokens), all ranks."}},
        {"prefix_cache_hit_rate_per_rank", {"Prefix cache hits over queries since start (tokens) on each rank."}},
        {"prefix_cache_blocks_per_rank", {"KV blocks holding a cached prefix on each rank (in use or free)."}},
        {"prefix_cache_evictions_per_rank", {"Cached KV blocks reused for other content on each rank."}},
        {"dp_placements", {"New requests placed on a data-parallel rank, by the placement's decision."}},
        {"requests_placed_per_rank", {"New requests placed on each data-parallel rank."}},
        {"workers", {"Worker processes of the run."}},
        {"workers_alive", {"Worker processes answering heartbeats."}},
        {"failures", {"Fatal engine failures (a worker died, a step failed)."}},
        {"expert_tokens", {"Tokens routed to each logical expert, by layer (per-expert series, behind a flag)."}},
        {"eplb_rebalances", {"EPLB rebalances completed (expert weights moved)."}},
        {"eplb_plans_not_adopted", {"EPLB plans computed and not adopted (no layer improved)."}},
        {"eplb_expert_moves", {"Expert slots moved by EPLB rebalances."}},
        {"eplb_bytes_moved", {"Expert weight bytes moved by EPLB rebalances."}},
        {"eplb_move_seconds", {"Time from staging an EPLB rebalance to every rank's switch to it."}},
        {"eplb_transfer_seconds", {"Time of one rank's EPLB weight transfer into staging (beside the steps)."}},
        {"eplb_switch_seconds", {"Host time of one rank's switch to a staged EPLB rebalance."}},
        {"eplb_install_seconds", {"Device time of one rank's staging-to-slot copies at an EPLB switch."}},
        {"eplb_switches_waited", {"EPLB switches whose transfer had not finished (the step waited for it)."}},
        {"eplb_balancedness_current", {"Mean over max tokens per rank of the current placement on the load window."}},
        {"eplb_balancedness_before", {"Balancedness before the last adopted rebalance."}},
        {"eplb_balancedness_after", {"Balancedness after the last adopted rebalance."}},
        {"eplb_layer_balancedness_before", {"Per-layer balancedness before the last adopted rebalance."}},
        {"eplb_layer_balancedness_after", {"Per-layer balancedness after the last adopted rebalance."}},
        {"uptime_seconds", {"Seconds since the actor started."}},
        {"schedule_seconds", {"Engine core time to plan, encode and send one step."}},
        {"step_message_bytes", {"Bytes of one step's messages to all workers."}},
        {"served_step_seconds",
         {"Served time of the steps: from when the workers could start each to its last result."}},
        {"floor_step_seconds", {"Memory floor of the steps: the bytes each had to read over the copy bandwidth."}},
        {"decode_steps", {"Steps in which every scheduled sequence fed one token."}},
        {"decode_tokens", {"Tokens sampled in decode steps."}},
        {"decode_served_step_seconds", {"Served time of the decode steps."}},
        {"decode_floor_step_seconds", {"Memory floor of the decode steps."}},
        {"decode_worker_wait_seconds", {"Time the slowest worker sat idle before each decode step arrived."}},
        {"decode_step_seconds", {"Served time of one decode step."}},
        {"floor_dense_bytes", {"BF16 bytes every step reads whatever the routing (the floor's dense part)."}},
        {"floor_expert_bytes", {"BF16 bytes of one routed expert (the floor's per-expert part)."}},
        {"floor_kv_bytes_per_position", {"KV cache bytes of one position over all layers."}},
        {"copy_bandwidth_bytes_per_second_per_rank",
         {"Copy bandwidth each worker measured at start-up (read + write)."}},
        // frontend
        {"requests_received", {"Generate requests received from clients."}},
        {"requests_accepted", {"Generate requests accepted (tokenized, validated, sent to the engine)."}},
        {"request_errors", {"Requests failed, by error code."}},
        {"requests_aborted_client_gone", {"Requests aborted because their client went away."}},
        {"requests_live", {"Requests in progress in the frontend."}},
        {"clients", {"Clients connected to the frontend."}},
        {"ttft_seconds", {"Time from a request's arrival at the frontend to its first token."}},
        {"inter_token_seconds", {"Time between consecutive tokens of a request."}},
        {"request_latency_seconds", {"Time from a request's arrival at the frontend to its end."}},
        // workers
        {"sampled_tokens", {"Tokens this worker sampled."}},
        {"exchange_steps_redone",
         {"Steps this worker redid on the exact expert exchange because a fixed window overflowed."}},
        {"step_compute_seconds", {"Time a worker spent computing one step."}},
        {"step_wait_seconds", {"Time a worker's compute thread sat idle before a step arrived."}},
        {"alive", {"1 while the engine core hears this worker's heartbeats."}},
    };
    return table;
}

/// Fixed histogram bounds of the exposition: 1-2-5 steps over [lo, hi].
std::vector<double> fixed_bounds(double lo, double hi) {
    std::vector<double> out;
    for (double decade = 1e-6; decade <= hi; decade *= 10)
        for (double m : {1.0, 2.0, 5.0}) {
            const double b = decade * m;
            if (b >= lo * (1 - 1e-9) && b <= hi * (1 + 1e-9)) out.push_back(b);
        }
    return out;
}

struct prom_sample {
    std::string labels;  // without braces: actor="x",a="b"
    const nlohmann::json* value;
};

struct prom_family {
    std::string type;  // counter | gauge | histogram
    std::string help;
    double scale = 1.0;  // multiplies values (ms -> s)
    bool seconds = false;
    std::vector<prom_sample> samples;
};

std::string escape_help(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

}  // namespace

std::string metrics_to_prometheus(const nlohmann::json& actors, const prometheus_options& options) {
    std::map<std::string, prom_family> families;  // sorted by exported name: stable output
    for (const auto& [actor, m] : actors.items()) {
        if (!m.is_object()) continue;
        for (const char* section : {"counters", "gauges", "histograms"}) {
            for (const auto& [key, value] : section_of(m, section).items()) {
                std::string base = key, labels;
                const auto brace = key.find('{');
                if (brace != std::string::npos) {
                    base = key.substr(0, brace);
                    labels = key.substr(brace + 1, key.size() - brace - 2);
                }
                for (char& c : base)
                    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
                if (base == "expert_tokens" && !options.per_expert) continue;
                double scale = 1.0;
                bool seconds = false;
                auto ends_with = [&](const std::string& suffix) {
                    return base.size() > suffix.size() &&
                           base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0;
                };
                if (ends_with("_ms")) {
                    base = base.substr(0, base.size() - 3) + "_seconds";
                    scale = 1e-3;
                    seconds = true;
                } else if (ends_with("_s")) {
                    base = base.substr(0, base.size() - 2) + "_seconds";
                    seconds = true;
                }
                if (labels.find("rank=\"") != std::string::npos) {
                    // A monotone per-rank value kept as a gauge named *_total is a counter named *_per_rank_total.
                    if (ends_with("_total") && std::string(section) == "gauges") {
                        const auto stripped = base.substr(0, base.size() - 6) + "_per_rank";
                        const auto it = known_families().find(stripped);
                        base = it != known_families().end() && it->second.counter_from_gauge ? stripped
                                                                                             : base + "_per_rank";
                    } else {
                        base += "_per_rank";
                    }
                }
                const auto known = known_families().find(base);
                std::string type = std::string(section) == "counters" ? "counter"
                                   : std::string(section) == "gauges" ? "gauge"
                                                                      : "histogram";
                if (known != known_families().end() && known->second.counter_from_gauge && type == "gauge")
                    type = "counter";
                const std::string name = "zmoe_" + base + (type == "counter" ? "_total" : "");
                auto& f = families[name];
                if (f.type.empty()) {
                    f.type = type;
                    f.help =
                        known != known_families().end()
                            ? known->second.help
                            : "zmoe " + std::string(section, std::strlen(section) - 1) + " " + key.substr(0, brace);
                    f.scale = scale;
                    f.seconds = seconds;
                }
                if (f.type != type) continue;  // the same name as another kind elsewhere: keep the first kind
                f.samples.push_back({"actor=\"" + actor + "\"" + (labels.empty() ? "" : "," + labels), &value});
            }
        }
    }

    std::ostringstream os;
    for (const auto& [name, f] : families) {
        os << "# HELP " << name << " " << escape_help(f.help) << "\n# TYPE " << name << " " << f.type << "\n";
        for (const auto& s : f.samples) {
            if (f.type != "histogram") {
                os << name << "{" << s.labels << "} " << num(s.value->get<double>() * f.scale) << "\n";
                continue;
            }
            // Cumulative count at each fixed bound from the registry's sparse cumulative buckets.
            const auto& h = *s.value;
            const auto bounds = f.seconds ? fixed_bounds(1e-3, 500) : fixed_bounds(1, 1e5);
            const auto& buckets = h.at("buckets");
            size_t next = 0;
            uint64_t cumulative = 0;
            for (double b : bounds) {
                while (next < buckets.size() && buckets[next][0].get<double>() * f.scale <= b * (1 + 1e-9))
                    cumulative = buckets[next++][1].get<uint64_t>();
                os << name << "_bucket{" << s.labels << ",le=\"" << num(b) << "\"} " << cumulative << "\n";
            }
            os << name << "_bucket{" << s.labels << ",le=\"+Inf\"} " << h.at("count").get<uint64_t>() << "\n";
            os << name << "_sum{" << s.labels << "} " << num(h.at("sum").get<double>() * f.scale) << "\n";
            os << name << "_count{" << s.labels << "} " << h.at("count").get<uint64_t>() << "\n";
        }
    }
    return os.str();
}

std::string metrics_to_table(const nlohmann::json& actors) {
    std::ostringstream os;
    char line[512];
    std::snprintf(line, sizeof(line), "%-14s %-52s %s\n", "actor", "metric", "value");
    os << line;
    for (const auto& [actor, m] : actors.items()) {
        if (!m.is_object()) continue;
        for (const char* section : {"counters", "gauges"})
            for (const auto& [k, v] : section_of(m, section).items()) {
                std::snprintf(line, sizeof(line), "%-14s %-52s %s\n", actor.c_str(), k.c_str(),
                              num(v.get<double>()).c_str());
                os << line;
            }
        for (const auto& [k, h] : section_of(m, "histograms").items()) {
            std::snprintf(line, sizeof(line), "%-14s %-52s n=%llu p50=%s p90=%s p99=%s max=%s\n", actor.c_str(),
                          k.c_str(), static_cast<unsigned long long>(h.at("count").get<uint64_t>()),
                          num(h.at("p50").get<double>()).c_str(), num(h.at("p90").get<double>()).c_str(),
                          num(h.at("p99").get<double>()).c_str(), num(h.at("max").get<double>()).c_str());
            os << line;
        }
    }
    return os.str();
}

}  // namespace zmoe
