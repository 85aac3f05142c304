#pragma once
// The engine core's periodic stats line (as vLLM's "Avg prompt throughput ... Running ... KV cache usage" line):
// throughputs over the last interval, requests running and waiting, KV cache usage, preemptions. Plain logic: the
// actor samples its counters on a timer and logs what this returns.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace zmoe {

/// The engine's totals at one moment.
struct stats_sample {
    std::chrono::steady_clock::time_point at;
    double prompt_tokens = 0;      ///< prompt tokens of requests added, since start
    double generation_tokens = 0;  ///< tokens generated, since start
    double preemptions = 0;        ///< since start
    int64_t num_running = 0;
    int64_t num_waiting = 0;
    int64_t kv_blocks_used = 0;  ///< all ranks
    int64_t kv_blocks_total = 0;
    double prefix_cache_queries = 0;  ///< prompt tokens looked up in the prefix cache, since start
    double prefix_cache_hits = 0;     ///< of those, found cached
};

class stats_line {
  public:
    /// The line for the interval since the previous sample (the first call only records its sample and returns
    /// nullopt). An idle interval (no token, nothing running or waiting) gives a line only if the interval before
    /// it was busy, so an idle server logs one idle line, not one every interval.
    std::optional<std::string> next(const stats_sample& now);

  private:
    std::optional<stats_sample> last_;
    bool last_idle_ = true;
};

}  // namespace zmoe
