#pragma once
// The request-level metrics the gateway measures itself, exported under vLLM's names and types (vllm:*) so that
// dashboards built for vLLM work unchanged (docs/operations.md lists them): time to first token, inter-token
// latency and end-to-end latency as the gateway sees them (from the request's arrival to its bytes), prompt and
// generation tokens per request, finished requests by reason. Engine gauges (running, waiting, KV cache usage) are
// passed in from the engine's own metrics. Thread-safe.

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "messages/finish_reason.hpp"

namespace zmoe::gateway {

/// A Prometheus histogram with fixed upper bounds (an implicit +Inf bucket follows).
struct prom_histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  ///< per bucket (not cumulative), bounds.size() + 1
    uint64_t count = 0;
    double sum = 0.0;

    explicit prom_histogram(std::vector<double> upper_bounds);
    void observe(double v, uint64_t times = 1);
};

/// The engine's state as vLLM's gauges; a negative value: not known (the gauge is left out).
struct engine_gauges {
    double num_running = -1;
    double num_waiting = -1;
    double kv_cache_usage = -1;  ///< fraction of KV blocks in use, [0, 1]
    /// The engine core's request_queue_time_ms histogram (added until first scheduled), as its metrics JSON gives
    /// it: sparse cumulative buckets {upper bound in ms, count at or below}; count 0 with no buckets: none yet.
    std::vector<std::pair<double, uint64_t>> queue_time_buckets_ms{};
    uint64_t queue_time_count = 0;
    double queue_time_sum_ms = 0.0;
    /// The engine core's prefix-cache counters (tokens looked up, tokens found); negative: not known.
    double prefix_cache_queries = -1;
    double prefix_cache_hits = -1;
};

/// vLLM's request_queue_time_seconds from the engine's histogram, on the engine's 1-2-5 bounds (1 ms to 500 s, in
/// seconds; vLLM's own bounds for this family are not all on that grid, and the engine's counts cannot be split).
prom_histogram queue_time_histogram(const engine_gauges& engine);

class serving_metrics {
  public:
    serving_metrics();

    void observe_ttft(double seconds);
    /// n tokens that arrived `seconds` after the previous ones: n inter-token gaps of seconds / n.
    void observe_inter_token(double seconds, uint32_t n);
    /// A request's end: its latency from arrival, its token counts, and how its choices finished.
    void observe_finished(double e2e_seconds, uint32_t prompt_tokens, uint32_t generation_tokens);
    void count_finished_choice(finish_reason reason);

    /// The vllm:* families in Prometheus text format 0.0.4, every sample labelled model_name="...".
    std::string prometheus(const std::string& model_name, const engine_gauges& engine) const;

  private:
    mutable std::mutex mutex_;
    prom_histogram ttft_, itl_, e2e_, prompt_tokens_, generation_tokens_;
    uint64_t prompt_tokens_total_ = 0, generation_tokens_total_ = 0;
    uint64_t success_stop_ = 0, success_length_ = 0, success_abort_ = 0, success_error_ = 0;
};

}  // namespace zmoe::gateway
