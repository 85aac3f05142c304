#pragma once
// Every actor's counters, gauges and histograms. Names may carry Prometheus-style labels
// (`kv_blocks_used{rank="1"}`), which the exporters keep as they are. Not thread-safe: an actor owns one and
// touches it on its own thread.

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zmoe {

/// A histogram over fixed, roughly logarithmic bucket bounds (1-2-5 steps), exact count, sum and max.
struct histogram {
    std::vector<double> bounds;    ///< upper bounds, ascending; an implicit +inf bucket follows
    std::vector<uint64_t> counts;  ///< bounds.size() + 1
    uint64_t count = 0;
    double sum = 0.0;
    double max = 0.0;

    histogram();
    void observe(double v);
    /// Upper bound of the bucket holding quantile q (0..1); max for the +inf bucket; 0 when empty.
    double quantile(double q) const;
};

class metrics_registry {
  public:
    void counter_add(const std::string& name, double v = 1.0) { counters_[name] += v; }
    /// A counter that follows a running total kept elsewhere (a worker's): raised to `total`, never lowered; present
    /// at 0 from the first report.
    void counter_follow(const std::string& name, double total) {
        double& c = counters_[name];
        c = std::max(c, total);
    }
    void gauge_set(const std::string& name, double v) { gauges_[name] = v; }
    void observe(const std::string& name, double v) { histograms_[name].observe(v); }
    double counter(const std::string& name) const;
    double gauge(const std::string& name) const;

    /// {"counters": {name: v}, "gauges": {name: v}, "histograms": {name: {count, sum, max, p50, p90, p99,
    /// buckets: [[le, cumulative count], ...]}}}
    nlohmann::json to_json() const;

  private:
    std::map<std::string, double> counters_;
    std::map<std::string, double> gauges_;
    std::map<std::string, histogram> histograms_;
};

struct prometheus_options {
    /// Also export the per-expert series (`zmoe_expert_tokens_total{layer,expert}`): layers x experts series, so
    /// off by default.
    bool per_expert = false;
};

/// Prometheus text exposition (format 0.0.4) of several actors' metrics JSON ({actor name: to_json() output}).
/// Every family has one `# HELP` and one `# TYPE` line and its samples together; names are `zmoe_` + the metric's
/// name with these conventions (docs/operations.md lists the families):
/// - times in seconds: a metric named `*_ms` is exported as `*_seconds` with its values, sums and bucket bounds
///   divided by 1000 (`*_s` as `*_seconds`);
/// - counters (and the engine's monotone gauges, e.g. preemptions) end in `_total`;
/// - a series labelled with rank="r" belongs to a family of its own, `<name>_per_rank`, so that the total
///   (unlabelled) series and the per-rank ones are never summed together;
/// - histograms always carry the same fixed bucket bounds (1-2-5 steps: 1 ms to 500 s for times, 1 to 100000
///   otherwise) and +Inf, whatever has been observed;
/// - every sample is labelled actor="..." (engine_core, frontend, worker_0, ...).
std::string metrics_to_prometheus(const nlohmann::json& actors, const prometheus_options& options = {});
/// A plain table (actor, metric, value) of the same JSON, histograms as count/p50/p90/p99/max.
std::string metrics_to_table(const nlohmann::json& actors);

}  // namespace zmoe
