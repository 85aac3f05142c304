#pragma once
// The load generator of `zmoe bench serve`: random prompts of token ids sized exactly, sent to a running server
// through one zmoe_client at a request rate (all at once, or Poisson arrivals) under a concurrency cap, every
// stream consumed and timed.

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cli/bench_metrics.hpp"
#include "messages/structured_output.hpp"

namespace zmoe::cli {

/// What the prompts are (vLLM's --dataset-name values where vLLM has them).
enum class bench_dataset {
    random,             ///< independent random prompts (--random-input-len, --random-output-len)
    prefix_repetition,  ///< vLLM's prefix_repetition: R random prefixes, each shared by num_prompts / R prompts
    multi_turn,         ///< conversations whose every turn resends the history and the model's answers
};
const char* bench_dataset_name(bench_dataset d);

/// vLLM's prefix_repetition dataset: num_prefixes random prefixes of prefix_len tokens; each prompt is one of them
/// followed by suffix_len random tokens of its own.
struct prefix_repetition_params {
    uint32_t prefix_len = 256;
    uint32_t suffix_len = 256;
    uint32_t num_prefixes = 10;
    uint32_t output_len = 128;
};

/// num_conversations conversations of num_turns turns. Turn 1's prompt is a system prompt of system_prompt_len
/// random tokens, the same in every conversation, then user_len new random tokens; turn t + 1's prompt is turn t's
/// prompt, the output_len tokens the model answered, then user_len new tokens. A turn is sent when the previous
/// answer has ended; conversations run side by side up to the concurrency cap.
struct multi_turn_params {
    uint32_t num_conversations = 16;
    uint32_t num_turns = 4;
    uint32_t system_prompt_len = 1000;
    uint32_t user_len = 100;
    uint32_t output_len = 128;
};

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
    bench_dataset dataset = bench_dataset::random;
    prefix_repetition_params prefix_repetition{};
    multi_turn_params multi_turn{};
    /// > 0: the engine core's per-rank running and waiting requests are read every this many seconds during the run
    /// (ZeroMQ metrics), for rank_load_summary.
    double rank_sample_interval_s = 0.0;
    /// Every request constrained by this (docs/structured_outputs.md); kind none: unconstrained.
    structured_output structured{};
};

/// The prompts of a run: lengths and ids drawn from params.seed (the same seed gives the same prompts).
struct bench_prompt {
    std::vector<int32_t> token_ids;
    uint32_t output_len = 0;
};
/// The prompts of the random dataset, or of the prefix-repetition dataset: num_prompts / num_prefixes prompts per
/// prefix (the first num_prompts % num_prefixes prefixes one more), shuffled (seeded), as vLLM's
/// prefix_repetition (which fills the remainder with copies of drawn prompts instead). Throws
/// errc::invalid_argument for the multi-turn dataset (its prompts depend on the answers: bench_workload builds
/// them) or fewer prompts than prefixes.
std::vector<bench_prompt> make_bench_prompts(const serve_bench_params& params);

/// Draws n token ids uniformly from [0, params.vocab_size) minus params.excluded_ids.
class bench_token_source {
  public:
    bench_token_source(const serve_bench_params& params, uint64_t seed);
    std::vector<int32_t> draw(size_t n);

  private:
    std::mt19937_64 rng_;
    std::uniform_int_distribution<int32_t> id_;
    std::set<int32_t> excluded_;
};

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
    /// The HTTP server's GET /metrics (Prometheus text) just before the first request and just after the last, for
    /// the prefix-repetition and multi-turn datasets; empty otherwise (the ZeroMQ path, the random dataset, no
    /// answer).
    std::string prometheus_before, prometheus_after;
    /// With params.rank_sample_interval_s: the engine core's per-rank load read during the run, one entry per read:
    /// {"t": seconds from the start, "running": [per rank], "waiting": [per rank]}.
    nlohmann::json rank_samples = nlohmann::json::array();
};

/// Reads the per-rank running and waiting requests of the engine core at `endpoint` every interval_s seconds on a
/// thread of its own (its own client), from construction to stop(); nothing when interval_s <= 0.
class rank_load_sampler {
  public:
    rank_load_sampler(const std::string& endpoint, double interval_s);
    ~rank_load_sampler();
    rank_load_sampler(const rank_load_sampler&) = delete;
    rank_load_sampler& operator=(const rank_load_sampler&) = delete;
    /// Ends the thread and returns the samples (serve_bench_run::rank_samples' form).
    nlohmann::json stop();

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

/// Waits until the server reports healthy (throws errc::peer_dead after ready_timeout_s), then runs the benchmark.
serve_bench_run run_serve_bench(const serve_bench_params& params, double ready_timeout_s = 60.0);

}  // namespace zmoe::cli
