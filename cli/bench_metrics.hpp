#pragma once
// What `zmoe bench serve` measures per request, and the summary it reports: the metrics and JSON key names of
// vLLM's `vllm bench serve` (request/output/total token throughput; mean, median, std and percentiles of TTFT,
// TPOT, ITL and end-to-end latency), so that results and scripts written for one read the other.

#include <cstdint>
#include <nlohmann/json.hpp>
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

/// The human-readable table of a summary (vLLM's layout), ending with a newline.
std::string bench_summary_table(const nlohmann::ordered_json& summary, const std::vector<double>& percentiles);

/// "90" for 90.0, "99.9" for 99.9: how a percentile appears in key names.
std::string percentile_name(double p);

}  // namespace zmoe::cli
