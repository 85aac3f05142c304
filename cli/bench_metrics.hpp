#pragma once
// What `zmoe bench serve` measures per request, and the summary it reports: the metrics and JSON key names of
// vLLM's `vllm bench serve` (request/output/total token throughput; mean, median, std and percentiles of TTFT,
// TPOT, ITL and end-to-end latency), so that results and scripts written for one read the other.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace zmoe::cli {

/// One request as the benchmark saw it. Times are seconds from the moment the request was sent.
struct bench_request_record {
    uint32_t input_len = 0;   ///< prompt tokens sent
    uint32_t output_len = 0;  ///< tokens asked for (max_tokens, with ignore_eos)
    bool success = false;
    std::string error;           ///< why it failed; empty on success
    uint32_t prompt_tokens = 0;  ///< prompt length the server reported
    uint32_t output_tokens = 0;  ///< token ids received
    double ttft_s = 0.0;         ///< to the first delta carrying a token
    double latency_s = 0.0;      ///< to the final delta
    std::vector<double> itl_s;   ///< between consecutive deltas carrying tokens (one entry per delta, as vLLM)
    double sent_s = -1.0;        ///< when it was sent, seconds from the start of the run; -1: never sent
    /// The prompt tokens the server found in its prefix cache (usage.prompt_tokens_details.cached_tokens); -1 where
    /// the server did not say.
    int64_t cached_tokens = -1;
    int32_t conversation = -1;  ///< multi-turn: its conversation, from 0; -1 otherwise
    int32_t turn = -1;          ///< multi-turn: its turn in the conversation, from 0; -1 otherwise
    uint32_t answer_len = 0;    ///< multi-turn: the tokens of its answer that the next turn's prompt carries
};

/// The p-th percentile (0..100) of values, interpolated linearly between closest ranks (numpy's default, which
/// vLLM uses); 0 for no values.
double percentile(std::vector<double> values, double p);

/// The summary of a run that took duration_s: "duration", "completed", "failed", "total_input_tokens",
/// "total_output_tokens", "request_throughput", "output_throughput", "total_token_throughput", then for each of
/// ttft, tpot, itl, e2el: "mean_X_ms", "median_X_ms", "std_X_ms" and "pP_X_ms" for each P of percentiles; then
/// the per-request arrays "input_lens", "output_lens", "ttfts", "itls" (seconds) and "errors". Only completed
/// requests enter the token counts and latencies. TPOT of a request is (latency - ttft) / (output tokens - 1),
/// over requests with more than one output token.
nlohmann::ordered_json bench_summary(const std::vector<bench_request_record>& records, double duration_s,
                                     const std::vector<double>& percentiles);

/// What the engine core saw of a run, from its metrics scraped before (`before`) and after (`after`) it (each
/// {actor: {"counters", "gauges", "histograms"}}): the served decode steps (steps in which every sequence fed one
/// token) beside their memory floor (the bytes each step had to read over the device's measured copy bandwidth).
/// Keys: "decode_steps", "decode_tokens", "mean_decode_step_ms", "decode_output_throughput" (decode tokens over
/// the served time of the decode steps), "mean_floor_decode_step_ms", "floor_decode_output_throughput",
/// "decode_floor_fraction" (floor / served time), "mean_decode_worker_wait_ms" (the workers' idle wait per decode
/// step), "served_step_s" and "floor_step_s" (every step, prefill included), "copy_bandwidth_bytes_per_s" (the
/// slowest worker's), "mean_schedule_ms" and "mean_step_message_bytes" (the engine core's step loop). Empty when
/// the server reported no decode step (or no metrics); the floor keys are left out when no bandwidth was reported.
nlohmann::ordered_json served_steps_summary(const nlohmann::json& before, const nlohmann::json& after);

/// The engine core's ranks in a metrics snapshot (its "workers" gauge); 0 when the snapshot has none.
int32_t engine_num_ranks(const nlohmann::json& metrics);

/// Per GPU (rank): "num_gpus" = num_ranks, and each of "output_throughput", "total_token_throughput",
/// "decode_output_throughput" and "floor_decode_output_throughput" that `result` holds, divided by num_ranks, as
/// "<key>_per_gpu". Empty when num_ranks < 1.
nlohmann::ordered_json per_gpu_throughputs(const nlohmann::ordered_json& result, int32_t num_ranks);

/// The multi-turn view of a run's records (each with its turn): "ttft_by_turn", one object per turn (from 1) with
/// "turn", "completed", "mean_ttft_ms", "median_ttft_ms" and "pP_ttft_ms" for each P of percentiles;
/// "median_ttft_ms_later_turns" and "mean_ttft_ms_later_turns" (turns 2 and later together); and the per-request
/// arrays "conversation_ids", "turn_ids", "send_times" and "end_times" (seconds from the start of the run, when it
/// was sent and when its last event came; -1: never sent), "prompt_tokens" (as the server reported them) and
/// "answer_lens" (the tokens of each answer as the next turn's prompt carries them: the ids generated over ZeroMQ,
/// the answer's text encoded by the tokenizer over HTTP).
nlohmann::ordered_json multi_turn_summary(const std::vector<bench_request_record>& records,
                                          const std::vector<double>& percentiles);

/// Prefix-cache counters of the server over a run, in tokens: "prefix_cache_queries", "prefix_cache_hits" and
/// "prefix_cache_hit_rate" (hits / queries), each null when the server does not report them; then
/// "request_cached_tokens" and "request_cached_token_rate" (cached over prompt tokens of the completed requests
/// that reported cached_tokens), null when none did. `before` and `after` are every actor's metrics JSON
/// (the ZeroMQ path: counters named prefix_cache_queries_total / prefix_cache_hits_total, or without _total; a
/// rank-labelled series per rank beside them gives "prefix_cache_per_rank"); `prom_before` and `prom_after` the
/// Prometheus text of GET /metrics (the HTTP path: vllm:prefix_cache_queries_total / vllm:prefix_cache_hits_total,
/// else zmoe_prefix_cache_*). The JSON pair is used where it has the counters, else the text pair.
nlohmann::ordered_json prefix_cache_summary(const nlohmann::json& before, const nlohmann::json& after,
                                            const std::string& prom_before, const std::string& prom_after,
                                            const std::vector<bench_request_record>& records);

/// The sum of the samples of the first of `names` that has any in Prometheus text `text` (a sample: a line
/// `NAME VALUE` or `NAME{labels} VALUE`); nullopt when none has.
std::optional<double> prometheus_value(const std::string& text, const std::vector<std::string>& names);

/// The per-rank load read during a run (serve_bench_run::rank_samples): "rank_samples" (how many reads), and
/// per rank "ranks": [{"rank", "mean_running", "mean_waiting", "max_waiting", "idle_samples" (reads in which it
/// ran nothing), "idle_while_others_wait_samples" (reads in which it ran nothing and had no queue while another
/// rank had requests waiting)}]; "idle_while_others_wait_fraction": the reads with such a rank over all reads.
/// Empty when there were no samples.
nlohmann::ordered_json rank_load_summary(const nlohmann::json& samples);

/// The multi-turn, prefix-cache and rank-load sections of a result (whichever it has) for the terminal.
std::string workload_summary_table(const nlohmann::ordered_json& result, const std::vector<double>& percentiles);

/// The human-readable table of a summary (vLLM's layout), ending with a newline.
std::string bench_summary_table(const nlohmann::ordered_json& summary, const std::vector<double>& percentiles);

/// "90" for 90.0, "99.9" for 99.9: how a percentile appears in key names.
std::string percentile_name(double p);

}  // namespace zmoe::cli
