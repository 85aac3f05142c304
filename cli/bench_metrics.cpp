#include "cli/bench_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <string_view>

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

int32_t engine_num_ranks(const nlohmann::json& metrics) {
    return static_cast<int32_t>(number(section(metrics, "engine_core", "gauges"), "workers"));
}

nlohmann::ordered_json per_gpu_throughputs(const nlohmann::ordered_json& result, int32_t num_ranks) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    if (num_ranks < 1) return out;
    out["num_gpus"] = num_ranks;
    for (const char* key :
         {"output_throughput", "total_token_throughput", "decode_output_throughput", "floor_decode_output_throughput"})
        if (const auto it = result.find(key); it != result.end() && it->is_number())
            out[std::string(key) + "_per_gpu"] = it->get<double>() / num_ranks;
    return out;
}

nlohmann::ordered_json multi_turn_summary(const std::vector<bench_request_record>& records,
                                          const std::vector<double>& percentiles) {
    int32_t num_turns = 0;
    for (const auto& r : records) num_turns = std::max(num_turns, r.turn + 1);
    std::vector<std::vector<double>> ttft_ms(static_cast<size_t>(num_turns));
    std::vector<double> later_ms;
    nlohmann::json conversations = nlohmann::json::array(), turns = nlohmann::json::array(),
                   sends = nlohmann::json::array(), ends = nlohmann::json::array(),
                   prompt_tokens = nlohmann::json::array(), answers = nlohmann::json::array();
    for (const auto& r : records) {
        conversations.push_back(r.conversation);
        turns.push_back(r.turn);
        sends.push_back(r.sent_s);
        ends.push_back(r.sent_s < 0 ? -1.0 : r.sent_s + r.latency_s);
        prompt_tokens.push_back(r.prompt_tokens);
        answers.push_back(r.answer_len);
        if (!r.success || r.turn < 0) continue;
        ttft_ms[static_cast<size_t>(r.turn)].push_back(r.ttft_s * 1000.0);
        if (r.turn > 0) later_ms.push_back(r.ttft_s * 1000.0);
    }
    nlohmann::ordered_json out;
    out["ttft_by_turn"] = nlohmann::json::array();
    for (int32_t t = 0; t < num_turns; ++t) {
        const auto& v = ttft_ms[static_cast<size_t>(t)];
        nlohmann::ordered_json row;
        row["turn"] = t + 1;
        row["completed"] = v.size();
        row["mean_ttft_ms"] = mean(v);
        row["median_ttft_ms"] = percentile(v, 50.0);
        for (double p : percentiles) row["p" + percentile_name(p) + "_ttft_ms"] = percentile(v, p);
        out["ttft_by_turn"].push_back(std::move(row));
    }
    out["median_ttft_ms_later_turns"] = percentile(later_ms, 50.0);
    out["mean_ttft_ms_later_turns"] = mean(later_ms);
    out["conversation_ids"] = std::move(conversations);
    out["turn_ids"] = std::move(turns);
    out["send_times"] = std::move(sends);
    out["end_times"] = std::move(ends);
    out["prompt_tokens"] = std::move(prompt_tokens);
    out["answer_lens"] = std::move(answers);
    return out;
}

std::optional<double> prometheus_value(const std::string& text, const std::vector<std::string>& names) {
    for (const auto& name : names) {
        bool found = false;
        double sum = 0.0;
        size_t pos = 0;
        while (pos < text.size()) {
            size_t eol = text.find('\n', pos);
            if (eol == std::string::npos) eol = text.size();
            const std::string_view line(text.data() + pos, eol - pos);
            pos = eol + 1;
            if (line.empty() || line[0] == '#' || line.substr(0, name.size()) != name) continue;
            const std::string_view rest = line.substr(name.size());
            size_t value_at = 0;
            if (!rest.empty() && rest[0] == '{') {
                const size_t close = rest.find('}');
                if (close == std::string_view::npos) continue;
                value_at = close + 1;
            }
            if (value_at >= rest.size() || rest[value_at] != ' ') continue;  // another name that starts like it
            try {
                sum += std::stod(std::string(rest.substr(value_at + 1)));
                found = true;
            } catch (const std::exception&) {
            }
        }
        if (found) return sum;
    }
    return std::nullopt;
}

namespace {

/// The value of a prefix-cache counter in one metrics snapshot ({actor: {"counters", "gauges"}}): the engine
/// core's (else any actor's) unlabelled series named base + "_total" or base; else the sum of its rank-labelled
/// series. nullopt when there is none.
std::optional<double> json_counter(const nlohmann::json& m, const std::string& base) {
    if (!m.is_object()) return std::nullopt;
    std::vector<std::string> actors = {"engine_core"};
    for (const auto& [k, v] : m.items())
        if (k != "engine_core") actors.push_back(k);
    for (const auto& actor : actors) {
        for (const char* kind : {"counters", "gauges"}) {
            const auto& sec = section(m, actor.c_str(), kind);
            for (const auto& name : {base + "_total", base}) {
                const auto it = sec.find(name);
                if (it != sec.end() && it->is_number()) return it->get<double>();
            }
            bool found = false;
            double sum = 0;
            for (const auto& [k, v] : sec.items()) {
                if (!v.is_number()) continue;
                if (k.rfind(base + "_total{rank=", 0) == 0 || k.rfind(base + "{rank=", 0) == 0) {
                    sum += v.get<double>();
                    found = true;
                }
            }
            if (found) return sum;
        }
    }
    return std::nullopt;
}

/// Each rank's value of a prefix-cache counter (its rank-labelled series), by rank label.
std::map<std::string, double> json_counter_per_rank(const nlohmann::json& m, const std::string& base) {
    std::map<std::string, double> out;
    for (const char* kind : {"counters", "gauges"})
        for (const auto& [k, v] : section(m, "engine_core", kind).items()) {
            if (!v.is_number()) continue;
            for (const auto& head : {base + "_total{rank=\"", base + "{rank=\""})
                if (k.rfind(head, 0) == 0)
                    out[k.substr(head.size(), k.find('"', head.size()) - head.size())] += v.get<double>();
        }
    return out;
}

nlohmann::json nullable(std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

}  // namespace

nlohmann::ordered_json prefix_cache_summary(const nlohmann::json& before, const nlohmann::json& after,
                                            const std::string& prom_before, const std::string& prom_after,
                                            const std::vector<bench_request_record>& records) {
    std::optional<double> queries, hits;
    const auto q1 = json_counter(after, "prefix_cache_queries"), h1 = json_counter(after, "prefix_cache_hits");
    if (q1 && h1) {
        queries = *q1 - json_counter(before, "prefix_cache_queries").value_or(0.0);
        hits = *h1 - json_counter(before, "prefix_cache_hits").value_or(0.0);
    } else {
        const std::vector<std::string> qn = {"vllm:prefix_cache_queries_total", "zmoe_prefix_cache_queries_total",
                                             "zmoe_prefix_cache_queries_total_total"};
        const std::vector<std::string> hn = {"vllm:prefix_cache_hits_total", "zmoe_prefix_cache_hits_total",
                                             "zmoe_prefix_cache_hits_total_total"};
        const auto pq = prometheus_value(prom_after, qn), ph = prometheus_value(prom_after, hn);
        if (pq && ph) {
            queries = *pq - prometheus_value(prom_before, qn).value_or(0.0);
            hits = *ph - prometheus_value(prom_before, hn).value_or(0.0);
        }
    }
    nlohmann::ordered_json out;
    out["prefix_cache_queries"] = nullable(queries);
    out["prefix_cache_hits"] = nullable(hits);
    out["prefix_cache_hit_rate"] =
        queries && hits && *queries > 0 ? nlohmann::json(*hits / *queries) : nlohmann::json();
    const auto rq1 = json_counter_per_rank(after, "prefix_cache_queries");
    const auto rh1 = json_counter_per_rank(after, "prefix_cache_hits");
    if (!rq1.empty()) {
        const auto rq0 = json_counter_per_rank(before, "prefix_cache_queries");
        const auto rh0 = json_counter_per_rank(before, "prefix_cache_hits");
        auto at = [](const std::map<std::string, double>& m, const std::string& k) {
            const auto it = m.find(k);
            return it == m.end() ? 0.0 : it->second;
        };
        nlohmann::json ranks = nlohmann::json::array();
        for (const auto& [rank, q] : rq1) {
            const double dq = q - at(rq0, rank), dh = at(rh1, rank) - at(rh0, rank);
            ranks.push_back({{"rank", rank},
                             {"queries", dq},
                             {"hits", dh},
                             {"hit_rate", dq > 0 ? nlohmann::json(dh / dq) : nlohmann::json()}});
        }
        out["prefix_cache_per_rank"] = std::move(ranks);
    }
    bool any = false;
    double cached = 0, prompt = 0;
    for (const auto& r : records) {
        if (!r.success || r.cached_tokens < 0) continue;
        any = true;
        cached += static_cast<double>(r.cached_tokens);
        prompt += r.prompt_tokens ? r.prompt_tokens : r.input_len;
    }
    out["request_cached_tokens"] = any ? nlohmann::json(cached) : nlohmann::json();
    out["request_cached_token_rate"] = any && prompt > 0 ? nlohmann::json(cached / prompt) : nlohmann::json();
    if (any) {
        nlohmann::json per = nlohmann::json::array();
        for (const auto& r : records) per.push_back(r.cached_tokens);
        out["cached_tokens"] = std::move(per);
    }
    return out;
}

nlohmann::ordered_json rank_load_summary(const nlohmann::json& samples) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    if (!samples.is_array() || samples.empty()) return out;
    size_t num_ranks = 0;
    for (const auto& s : samples) num_ranks = std::max({num_ranks, s["running"].size(), s["waiting"].size()});
    if (num_ranks == 0) return out;
    std::vector<double> run_sum(num_ranks), wait_sum(num_ranks), wait_max(num_ranks);
    std::vector<uint64_t> idle(num_ranks), idle_while_waiting(num_ranks);
    uint64_t bad_samples = 0;
    auto at = [](const nlohmann::json& a, size_t r) { return r < a.size() ? a[r].get<double>() : 0.0; };
    for (const auto& s : samples) {
        double total_waiting = 0;
        for (size_t r = 0; r < num_ranks; ++r) total_waiting += at(s["waiting"], r);
        bool bad = false;
        for (size_t r = 0; r < num_ranks; ++r) {
            const double running = at(s["running"], r), waiting = at(s["waiting"], r);
            run_sum[r] += running;
            wait_sum[r] += waiting;
            wait_max[r] = std::max(wait_max[r], waiting);
            if (running == 0) {
                ++idle[r];
                if (waiting == 0 && total_waiting > 0) {
                    ++idle_while_waiting[r];
                    bad = true;
                }
            }
        }
        if (bad) ++bad_samples;
    }
    const double n = static_cast<double>(samples.size());
    out["rank_samples"] = samples.size();
    out["ranks"] = nlohmann::json::array();
    for (size_t r = 0; r < num_ranks; ++r)
        out["ranks"].push_back({{"rank", r},
                                {"mean_running", run_sum[r] / n},
                                {"mean_waiting", wait_sum[r] / n},
                                {"max_waiting", wait_max[r]},
                                {"idle_samples", idle[r]},
                                {"idle_while_others_wait_samples", idle_while_waiting[r]}});
    out["idle_while_others_wait_fraction"] = static_cast<double>(bad_samples) / n;
    return out;
}

std::string workload_summary_table(const nlohmann::ordered_json& s, const std::vector<double>& percentiles) {
    std::string out;
    char line[256];
    auto row = [&](const char* label, const std::string& v) {
        std::snprintf(line, sizeof(line), "%-40s%s\n", label, v.c_str());
        out += line;
    };
    auto fixed = [](double v, int decimals) {
        char b[64];
        std::snprintf(b, sizeof(b), "%.*f", decimals, v);
        return std::string(b);
    };
    auto or_na = [&](const char* key, int decimals, double scale) {
        const auto it = s.find(key);
        return it == s.end() || !it->is_number() ? std::string("n/a") : fixed(it->get<double>() * scale, decimals);
    };
    if (s.contains("ttft_by_turn")) {
        out += "------------------ TTFT per turn -----------------\n";
        std::string head = "turn  completed    mean ms  median ms";
        for (double p : percentiles) {
            std::snprintf(line, sizeof(line), " %10s", ("p" + percentile_name(p) + " ms").c_str());
            head += line;
        }
        out += head + "\n";
        for (const auto& t : s["ttft_by_turn"]) {
            std::snprintf(line, sizeof(line), "%4d %10llu %10.2f %10.2f", t["turn"].get<int>(),
                          static_cast<unsigned long long>(t["completed"].get<uint64_t>()),
                          t["mean_ttft_ms"].get<double>(), t["median_ttft_ms"].get<double>());
            std::string r = line;
            for (double p : percentiles) {
                std::snprintf(line, sizeof(line), " %10.2f", t.value("p" + percentile_name(p) + "_ttft_ms", 0.0));
                r += line;
            }
            out += r + "\n";
        }
        row("Median TTFT, turns 2+ (ms):", or_na("median_ttft_ms_later_turns", 2, 1.0));
        row("Mean TTFT, turns 2+ (ms):", or_na("mean_ttft_ms_later_turns", 2, 1.0));
    }
    if (s.contains("prefix_cache_hit_rate")) {
        out += "------------------ Prefix cache ------------------\n";
        row("Prefix cache queries (tokens):", or_na("prefix_cache_queries", 0, 1.0));
        row("Prefix cache hits (tokens):", or_na("prefix_cache_hits", 0, 1.0));
        row("Prefix cache hit rate (%):", or_na("prefix_cache_hit_rate", 2, 100.0));
        row("Cached prompt tokens (per request):", or_na("request_cached_tokens", 0, 1.0));
        row("Cached / prompt tokens (%):", or_na("request_cached_token_rate", 2, 100.0));
        if (s.contains("prefix_cache_per_rank"))
            for (const auto& r : s["prefix_cache_per_rank"]) {
                const std::string label = "Rank " + r["rank"].get<std::string>() + " hit rate (%):";
                row(label.c_str(), r["hit_rate"].is_number() ? fixed(r["hit_rate"].get<double>() * 100, 2) : "n/a");
            }
    }
    if (s.contains("ranks")) {
        out += "-------------- Per-rank load (sampled) -----------\n";
        out += "rank  mean running  mean waiting  max waiting  idle reads  idle while others wait\n";
        for (const auto& r : s["ranks"]) {
            std::snprintf(line, sizeof(line), "%4llu %13.2f %13.2f %12.0f %11llu %23llu\n",
                          static_cast<unsigned long long>(r["rank"].get<uint64_t>()), r["mean_running"].get<double>(),
                          r["mean_waiting"].get<double>(), r["max_waiting"].get<double>(),
                          static_cast<unsigned long long>(r["idle_samples"].get<uint64_t>()),
                          static_cast<unsigned long long>(r["idle_while_others_wait_samples"].get<uint64_t>()));
            out += line;
        }
        row("Reads with an idle rank, others waiting:", or_na("idle_while_others_wait_fraction", 3, 1.0));
    }
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
    if (s.contains("num_gpus")) {
        row("Workers (GPUs or CPU ranks):", s.value("num_gpus", 0.0), 0);
        row("Output token throughput per GPU (tok/s):", s.value("output_throughput_per_gpu", 0.0), 2);
    }
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
        if (s.contains("decode_output_throughput_per_gpu"))
            row("Decode throughput per GPU (tok/s):", s.value("decode_output_throughput_per_gpu", 0.0), 1);
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
