#include "cli/bench_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace zmoe::cli {

double percentile(std::vector<double> values, double p) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(rank));
    const size_t hi = std::min(lo + 1, values.size() - 1);
    return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

std::string percentile_name(double p) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", p);
    return buf;
}

namespace {

double mean(const std::vector<double>& v) {
    return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double stddev(const std::vector<double>& v) {  // population standard deviation, as numpy's std
    if (v.empty()) return 0.0;
    const double m = mean(v);
    double s = 0.0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(v.size()));
}

void add_stats(nlohmann::ordered_json& out, const std::string& metric, const std::vector<double>& seconds,
               const std::vector<double>& percentiles) {
    std::vector<double> ms(seconds.size());
    std::transform(seconds.begin(), seconds.end(), ms.begin(), [](double s) { return s * 1000.0; });
    out["mean_" + metric + "_ms"] = mean(ms);
    out["median_" + metric + "_ms"] = percentile(ms, 50.0);
    out["std_" + metric + "_ms"] = stddev(ms);
    for (double p : percentiles) out["p" + percentile_name(p) + "_" + metric + "_ms"] = percentile(ms, p);
}

}  // namespace

nlohmann::ordered_json bench_summary(const std::vector<bench_request_record>& records, double duration_s,
                                     const std::vector<double>& percentiles) {
    uint64_t completed = 0, failed = 0, total_input = 0, total_output = 0;
    std::vector<double> ttfts, tpots, itls, e2els;
    nlohmann::json input_lens = nlohmann::json::array(), output_lens = nlohmann::json::array(),
                   ttft_list = nlohmann::json::array(), itl_list = nlohmann::json::array(),
                   errors = nlohmann::json::array();
    for (const auto& r : records) {
        input_lens.push_back(r.input_len);
        output_lens.push_back(r.success ? r.output_tokens : 0);
        ttft_list.push_back(r.success ? r.ttft_s : 0.0);
        itl_list.push_back(r.success ? r.itl_s : std::vector<double>{});
        errors.push_back(r.error);
        if (!r.success) {
            ++failed;
            continue;
        }
        ++completed;
        total_input += r.input_len;
        total_output += r.output_tokens;
        ttfts.push_back(r.ttft_s);
        e2els.push_back(r.latency_s);
        if (r.output_tokens > 1) tpots.push_back((r.latency_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
        itls.insert(itls.end(), r.itl_s.begin(), r.itl_s.end());
    }
    const double d = duration_s > 0 ? duration_s : 1e-9;
    nlohmann::ordered_json out;
    out["duration"] = duration_s;
    out["completed"] = completed;
    out["failed"] = failed;
    out["total_input_tokens"] = total_input;
    out["total_output_tokens"] = total_output;
    out["request_throughput"] = static_cast<double>(completed) / d;
    out["output_throughput"] = static_cast<double>(total_output) / d;
    out["total_token_throughput"] = static_cast<double>(total_input + total_output) / d;
    add_stats(out, "ttft", ttfts, percentiles);
    add_stats(out, "tpot", tpots, percentiles);
    add_stats(out, "itl", itls, percentiles);
    add_stats(out, "e2el", e2els, percentiles);
    out["input_lens"] = std::move(input_lens);
    out["output_lens"] = std::move(output_lens);
    out["ttfts"] = std::move(ttft_list);
    out["itls"] = std::move(itl_list);
    out["errors"] = std::move(errors);
    return out;
}

namespace {

const nlohmann::json& section(const nlohmann::json& m, const char* actor, const char* kind) {
    static const nlohmann::json empty = nlohmann::json::object();
    if (!m.is_object()) return empty;
    const auto a = m.find(actor);
    if (a == m.end() || !a->is_object()) return empty;
    const auto k = a->find(kind);
    return k == a->end() || !k->is_object() ? empty : *k;
}

double number(const nlohmann::json& obj, const std::string& key, const char* field = nullptr) {
    const auto it = obj.find(key);
    if (it == obj.end()) return 0.0;
    if (field) {
        const auto f = it->find(field);
        return f != it->end() && f->is_number() ? f->get<double>() : 0.0;
    }
    return it->is_number() ? it->get<double>() : 0.0;
}

}  // namespace

nlohmann::ordered_json served_steps_summary(const nlohmann::json& before, const nlohmann::json& after) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    const auto& c0 = section(before, "engine_core", "counters");
    const auto& c1 = section(after, "engine_core", "counters");
    auto delta = [&](const char* key) { return number(c1, key) - number(c0, key); };
    const double steps = delta("decode_steps");
    if (!(steps > 0)) return out;
    const double tokens = delta("decode_tokens"), served_ms = delta("decode_served_step_ms");
    out["decode_steps"] = steps;
    out["decode_tokens"] = tokens;
    out["mean_decode_step_ms"] = served_ms / steps;
    out["decode_output_throughput"] = served_ms > 0 ? tokens / (served_ms / 1e3) : 0.0;
    double bandwidth = 0;
    for (const auto& [k, v] : section(after, "engine_core", "gauges").items()) {
        if (k.rfind("copy_bandwidth_bytes_per_second", 0) != 0 || !v.is_number()) continue;
        const double b = v.get<double>();
        bandwidth = bandwidth == 0 ? b : std::min(bandwidth, b);
    }
    const double floor_ms = delta("decode_floor_step_ms");
    if (bandwidth > 0 && floor_ms > 0) {
        out["mean_floor_decode_step_ms"] = floor_ms / steps;
        out["floor_decode_output_throughput"] = tokens / (floor_ms / 1e3);
        out["decode_floor_fraction"] = served_ms > 0 ? floor_ms / served_ms : 0.0;
        out["copy_bandwidth_bytes_per_s"] = bandwidth;
    }
    out["mean_decode_worker_wait_ms"] = delta("decode_worker_wait_ms") / steps;
    out["served_step_s"] = delta("served_step_ms") / 1e3;
    if (bandwidth > 0) out["floor_step_s"] = delta("floor_step_ms") / 1e3;
    const auto& h0 = section(before, "engine_core", "histograms");
    const auto& h1 = section(after, "engine_core", "histograms");
    auto hist_mean = [&](const char* key) {
        const double n = number(h1, key, "count") - number(h0, key, "count");
        return n > 0 ? (number(h1, key, "sum") - number(h0, key, "sum")) / n : 0.0;
    };
    out["mean_schedule_ms"] = hist_mean("schedule_ms");
    out["mean_step_message_bytes"] = hist_mean("step_message_bytes");
    return out;
}

std::string bench_summary_table(const nlohmann::ordered_json& s, const std::vector<double>& percentiles) {
    std::string out;
    char line[256];
    auto row = [&](const char* label, double v, int decimals) {
        std::snprintf(line, sizeof(line), "%-40s%-10.*f\n", label, decimals, v);
        out += line;
    };
    auto rule = [&](const char* title, char fill) {
        const int width = 50, len = static_cast<int>(std::string(title).size());
        const int left = (width - len) / 2, right = width - len - left;
        out += std::string(std::max(0, left), fill) + title + std::string(std::max(0, right), fill) + "\n";
    };
    rule(" Serving Benchmark Result ", '=');
    row("Successful requests:", s.value("completed", 0.0), 0);
    row("Failed requests:", s.value("failed", 0.0), 0);
    row("Benchmark duration (s):", s.value("duration", 0.0), 2);
    row("Total input tokens:", s.value("total_input_tokens", 0.0), 0);
    row("Total generated tokens:", s.value("total_output_tokens", 0.0), 0);
    row("Request throughput (req/s):", s.value("request_throughput", 0.0), 2);
    row("Output token throughput (tok/s):", s.value("output_throughput", 0.0), 2);
    row("Total token throughput (tok/s):", s.value("total_token_throughput", 0.0), 2);
    const struct {
        const char* key;
        const char* name;
        const char* title;
    } sections[] = {{"ttft", "TTFT", "Time to First Token"},
                    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)"},
                    {"itl", "ITL", "Inter-token Latency"},
                    {"e2el", "E2EL", "End-to-end Latency"}};
    for (const auto& sec : sections) {
        rule(sec.title, '-');
        const std::string k = sec.key, n = sec.name;
        row(("Mean " + n + " (ms):").c_str(), s.value("mean_" + k + "_ms", 0.0), 2);
        row(("Median " + n + " (ms):").c_str(), s.value("median_" + k + "_ms", 0.0), 2);
        for (double p : percentiles) {
            const std::string pn = percentile_name(p);
            row(("P" + pn + " " + n + " (ms):").c_str(), s.value("p" + pn + "_" + k + "_ms", 0.0), 2);
        }
    }
    if (s.contains("decode_steps")) {
        rule("Served decode steps (engine core)", '-');
        row("Decode steps:", s.value("decode_steps", 0.0), 0);
        row("Mean decode step (ms):", s.value("mean_decode_step_ms", 0.0), 3);
        row("Decode output throughput (tok/s):", s.value("decode_output_throughput", 0.0), 1);
        if (s.contains("floor_decode_output_throughput")) {
            row("Floor decode step (ms):", s.value("mean_floor_decode_step_ms", 0.0), 3);
            row("Floor decode throughput (tok/s):", s.value("floor_decode_output_throughput", 0.0), 1);
            row("Floor / served decode step:", s.value("decode_floor_fraction", 0.0), 3);
            row("Copy bandwidth (GB/s):", s.value("copy_bandwidth_bytes_per_s", 0.0) / 1e9, 0);
        } else {
            out += "Floor: the server reported no copy bandwidth\n";
        }
        row("Mean worker wait per decode step (ms):", s.value("mean_decode_worker_wait_ms", 0.0), 3);
        row("Mean schedule + send per step (ms):", s.value("mean_schedule_ms", 0.0), 3);
        row("Mean step message (bytes):", s.value("mean_step_message_bytes", 0.0), 0);
    }
    out += std::string(50, '=') + "\n";
    return out;
}

}  // namespace zmoe::cli
