#include "gateway/serving_metrics.hpp"

#include <algorithm>
#include <charconv>
#include <sstream>

namespace zmoe::gateway {

namespace {

// vLLM's bucket bounds (vllm/v1/metrics/loggers.py), so that quantiles computed from either server agree.
std::vector<double> ttft_bounds() {
    return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,   0.75,
            1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160., 640.0, 2560.0};
}
std::vector<double> itl_bounds() {
    return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_bounds() {
    return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
// vLLM's build_1_2_5_buckets up to the context length; ours stops at a million tokens whatever the model.
std::vector<double> token_bounds() {
    std::vector<double> b;
    for (double m = 1; m <= 1e6; m *= 10)
        for (double s : {1.0, 2.0, 5.0})
            if (s * m <= 1e6) b.push_back(s * m);
    return b;
}

// 1-2-5 steps from 1 ms to 500 s: the engine's histogram bounds for times (base/metrics.hpp), in seconds.
std::vector<double> engine_time_bounds() {
    std::vector<double> b;
    for (double m = 1e-3; m <= 100; m *= 10)
        for (double s : {1.0, 2.0, 5.0}) b.push_back(s * m);
    return b;
}

// The shortest text that reads back as v (0.04, not 0.040000000000000001), as Prometheus clients write bounds.
std::string number(double v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

std::string label_value(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

void family(std::ostringstream& out, const char* name, const char* type, const char* help) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

void histogram_text(std::ostringstream& out, const char* name, const char* help, const prom_histogram& h,
                    const std::string& labels) {
    family(out, name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
        cumulative += h.counts[i];
        out << name << "_bucket{" << labels << ",le=\"" << number(h.bounds[i]) << "\"} " << cumulative << "\n";
    }
    cumulative += h.counts.back();
    out << name << "_bucket{" << labels << ",le=\"+Inf\"} " << cumulative << "\n";
    out << name << "_sum{" << labels << "} " << number(h.sum) << "\n";
    out << name << "_count{" << labels << "} " << h.count << "\n";
}

}  // namespace

prom_histogram::prom_histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void prom_histogram::observe(double v, uint64_t times) {
    const size_t i = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
    counts[i] += times;
    count += times;
    sum += v * static_cast<double>(times);
}

prom_histogram queue_time_histogram(const engine_gauges& engine) {
    prom_histogram h(engine_time_bounds());
    uint64_t below = 0;
    for (const auto& [bound_ms, cumulative] : engine.queue_time_buckets_ms) {
        const double bound = bound_ms / 1000.0;
        const size_t i = static_cast<size_t>(std::lower_bound(h.bounds.begin(), h.bounds.end(), bound * (1 - 1e-9)) -
                                             h.bounds.begin());
        if (cumulative < below) continue;  // not cumulative: malformed, skipped
        h.counts[i] += cumulative - below;
        below = cumulative;
    }
    if (engine.queue_time_count > below) h.counts.back() += engine.queue_time_count - below;
    h.count = std::max(engine.queue_time_count, below);
    h.sum = engine.queue_time_sum_ms / 1000.0;
    return h;
}

serving_metrics::serving_metrics()
    : ttft_(ttft_bounds()),
      itl_(itl_bounds()),
      e2e_(e2e_bounds()),
      prompt_tokens_(token_bounds()),
      generation_tokens_(token_bounds()) {}

void serving_metrics::observe_ttft(double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    ttft_.observe(seconds);
}

void serving_metrics::observe_inter_token(double seconds, uint32_t n) {
    if (n == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    itl_.observe(seconds / n, n);
}

void serving_metrics::observe_finished(double e2e_seconds, uint32_t prompt_tokens, uint32_t generation_tokens) {
    std::lock_guard<std::mutex> lock(mutex_);
    e2e_.observe(e2e_seconds);
    prompt_tokens_.observe(prompt_tokens);
    generation_tokens_.observe(generation_tokens);
    prompt_tokens_total_ += prompt_tokens;
    generation_tokens_total_ += generation_tokens;
}

void serving_metrics::count_finished_choice(finish_reason reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    switch (reason) {
        case finish_reason::stop:
            ++success_stop_;
            return;
        case finish_reason::length:
            ++success_length_;
            return;
        case finish_reason::abort:
            ++success_abort_;
            return;
        case finish_reason::error:
            ++success_error_;
            return;
        case finish_reason::none:
            return;
    }
}

std::string serving_metrics::prometheus(const std::string& model_name, const engine_gauges& engine) const {
    const std::string labels = "model_name=\"" + label_value(model_name) + "\"";
    std::ostringstream out;
    std::lock_guard<std::mutex> lock(mutex_);
    if (engine.num_running >= 0) {
        family(out, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
        out << "vllm:num_requests_running{" << labels << "} " << number(engine.num_running) << "\n";
    }
    if (engine.num_waiting >= 0) {
        family(out, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
        out << "vllm:num_requests_waiting{" << labels << "} " << number(engine.num_waiting) << "\n";
    }
    if (engine.kv_cache_usage >= 0) {
        family(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
        out << "vllm:kv_cache_usage_perc{" << labels << "} " << number(engine.kv_cache_usage) << "\n";
    }
    if (engine.prefix_cache_queries >= 0 && engine.prefix_cache_hits >= 0) {
        family(out, "vllm:prefix_cache_queries_total", "counter",
               "Prefix cache queries, in terms of number of queried tokens.");
        out << "vllm:prefix_cache_queries_total{" << labels << "} " << number(engine.prefix_cache_queries) << "\n";
        family(out, "vllm:prefix_cache_hits_total", "counter",
               "Prefix cache hits, in terms of number of cached tokens.");
        out << "vllm:prefix_cache_hits_total{" << labels << "} " << number(engine.prefix_cache_hits) << "\n";
    }
    family(out, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.");
    out << "vllm:prompt_tokens_total{" << labels << "} " << prompt_tokens_total_ << "\n";
    family(out, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.");
    out << "vllm:generation_tokens_total{" << labels << "} " << generation_tokens_total_ << "\n";
    family(out, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
    for (const auto& [reason, n] : {std::pair<const char*, uint64_t>{"stop", success_stop_},
                                    {"length", success_length_},
                                    {"abort", success_abort_},
                                    {"error", success_error_}})
        out << "vllm:request_success_total{" << labels << ",finished_reason=\"" << reason << "\"} " << n << "\n";
    histogram_text(out, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft_,
                   labels);
    histogram_text(out, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl_,
                   labels);
    histogram_text(out, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2e_,
                   labels);
    if (engine.queue_time_count > 0)
        histogram_text(out, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                       queue_time_histogram(engine), labels);
    histogram_text(out, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", prompt_tokens_, labels);
    histogram_text(out, "vllm:request_generation_tokens", "Number of generation tokens processed.", generation_tokens_,
                   labels);
    return out.str();
}

}  // namespace zmoe::gateway
