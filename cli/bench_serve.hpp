#pragma once
// The load generator of `zmoe bench serve`: random prompts of token ids sized exactly, sent to a running server
// through one zmoe_client at a request rate (all at once, or Poisson arrivals) under a concurrency cap, every
// stream consumed and timed.

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cli/bench_metrics.hpp"
#include "messages/structured_output.hpp"

namespace zmoe::cli {

struct serve_bench_params {
    std::string endpoint;  ///< the frontend, e.g. tcp://127.0.0.1:5555
    uint32_t num_prompts = 1000;
    uint32_t input_len = 1024;  ///< prompt tokens (before the range ratio)
    uint32_t output_len = 128;  ///< tokens to generate, exactly (ignore_eos)
    double range_ratio = 0.0;   ///< lengths drawn uniformly from [len*(1-r), len*(1+r)]
    double request_rate = std::numeric_limits<double>::infinity();  ///< requests/s, Poisson; inf = all at once
    uint32_t max_concurrency = 0;                                   ///< requests in flight at most; 0 = no cap
    uint64_t seed = 0;
    int64_t vocab_size = 0;             ///< prompt ids are drawn from [0, vocab_size) ...
    std::vector<int32_t> excluded_ids;  ///< ... minus these (bos/eos)
    float temperature = 0.f;
    double timeout_s = 600.0;  ///< with requests in flight and no event for this long, the rest fail
    bool progress = false;     ///< a progress bar on stderr
    /// Every request constrained by this (docs/structured_outputs.md); kind none: unconstrained.
    structured_output structured{};
};

/// The prompts of a run: lengths and ids drawn from params.seed (the same seed gives the same prompts).
struct bench_prompt {
    std::vector<int32_t> token_ids;
    uint32_t output_len = 0;
};
std::vector<bench_prompt> make_bench_prompts(const serve_bench_params& params);

/// When each of n requests may be sent, in seconds from the start: all 0 for an infinite request rate, else a
/// Poisson process of that rate (exponential gaps, drawn from params.seed) whose first arrival is 0. Throws
/// errc::invalid_argument for a rate that is not positive.
std::vector<double> bench_arrival_times(const serve_bench_params& params, size_t n);

/// Every actor's metrics of the server at `endpoint`, as `zmoe ctl metrics` reads them; an empty object (and a
/// warning) when it does not answer within 10 s.
nlohmann::json scrape_server_metrics(const std::string& endpoint);

/// A one-line progress bar redrawn in place on stderr, at most every 100 ms; nothing when off.
class bench_progress_bar {
  public:
    bench_progress_bar(bool on, uint32_t total) : on_(on), total_(total) {}
    void update(uint32_t done, uint32_t failed, uint32_t in_flight, uint64_t tokens, double elapsed_s, bool force);
    void finish();

  private:
    bool on_;
    uint32_t total_;
    std::chrono::steady_clock::time_point last_{};
};

struct serve_bench_run {
    std::vector<bench_request_record> records;  ///< in prompt order
    double duration_s = 0.0;                    ///< first send to last terminal event
    /// The server's metrics (every actor's, as `zmoe ctl metrics` reads them) just before the first request and
    /// just after the last: their difference is what the engine core saw of this run (served_steps_summary).
    nlohmann::json metrics_before, metrics_after;
    std::string served_model;  ///< the "model" the requests named (HTTP path)
};

/// Waits until the server reports healthy (throws errc::peer_dead after ready_timeout_s), then runs the benchmark.
serve_bench_run run_serve_bench(const serve_bench_params& params, double ready_timeout_s = 60.0);

}  // namespace zmoe::cli
