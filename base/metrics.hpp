#pragma once
// Every actor's counters, gauges and histograms. Names may carry Prometheus-style labels
// (`kv_blocks_used{rank="1"}`), which the exporters keep as they are. Not thread-safe: an actor owns one and
// touches it on its own thread.

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

/// Prometheus text exposition of several actors' metrics JSON ({actor name: to_json() output}); each metric is
/// prefixed `zmoe_` and labelled with actor="...".
std::string metrics_to_prometheus(const nlohmann::json& actors);
/// A plain table (actor, metric, value) of the same JSON, histograms as count/p50/p90/p99/max.
std::string metrics_to_table(const nlohmann::json& actors);

}  // namespace zmoe
