#include "base/metrics.hpp"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

TEST(Metrics, CountersGaugesHistogramsToJson) {
    zmoe::metrics_registry m;
    m.counter_add("requests");
    m.counter_add("requests", 2);
    m.gauge_set("kv_blocks_used{rank=\"1\"}", 7);
    for (int i = 1; i <= 100; ++i) m.observe("step_ms", i);
    const auto j = m.to_json();
    EXPECT_EQ(j["counters"]["requests"].get<double>(), 3);
    EXPECT_EQ(j["gauges"]["kv_blocks_used{rank=\"1\"}"].get<double>(), 7);
    const auto& h = j["histograms"]["step_ms"];
    EXPECT_EQ(h["count"].get<uint64_t>(), 100u);
    EXPECT_DOUBLE_EQ(h["sum"].get<double>(), 5050);
    EXPECT_DOUBLE_EQ(h["max"].get<double>(), 100);
    // p50 of 1..100 lies in the (20, 50] bucket, p99 in (50, 100].
    EXPECT_DOUBLE_EQ(h["p50"].get<double>(), 50);
    EXPECT_DOUBLE_EQ(h["p99"].get<double>(), 100);
}

namespace {

/// One parsed exposition: per family its HELP, TYPE and samples (full sample name, labels, value), checked for the
/// text format's rules while parsing.
struct exposition {
    struct sample {
        std::string name;
        std::map<std::string, std::string> labels;
        double value;
    };
    struct family {
        std::string help, type;
        std::vector<sample> samples;
    };
    std::map<std::string, family> families;
};

std::string family_of(const std::string& sample_name, const exposition& e) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string s = suffix;
        if (sample_name.size() > s.size() && sample_name.compare(sample_name.size() - s.size(), s.size(), s) == 0) {
            const auto base = sample_name.substr(0, sample_name.size() - s.size());
            const auto it = e.families.find(base);
            if (it != e.families.end() && it->second.type == "histogram") return base;
        }
    }
    return sample_name;
}

exposition parse_exposition(const std::string& text) {
    exposition e;
    static const std::regex help_re(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$)");
    static const std::regex type_re(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$)");
    static const std::regex sample_re(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$)");
    static const std::regex label_re(R"(([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)\")");
    std::istringstream in(text);
    std::string line, current;
    std::set<std::string> closed;  // families whose samples are over: they must not appear again
    while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_match(line, m, help_re)) {
            EXPECT_FALSE(e.families.count(m[1])) << "second HELP for " << m[1];
            if (!current.empty()) closed.insert(current);
            current = m[1];
            e.families[current].help = m[2];
        } else if (std::regex_match(line, m, type_re)) {
            EXPECT_EQ(m[1], current) << "TYPE without its HELP just before: " << line;
            EXPECT_TRUE(e.families[current].type.empty()) << "second TYPE for " << current;
            e.families[current].type = m[2];
        } else if (std::regex_match(line, m, sample_re)) {
            const auto fam = family_of(m[1], e);
            EXPECT_EQ(fam, current) << "sample outside its family's block: " << line;
            EXPECT_FALSE(closed.count(fam)) << line;
            exposition::sample s{.name = m[1], .labels = {}, .value = 0};
            const std::string labels = m[2];
            for (auto it = std::sregex_iterator(labels.begin(), labels.end(), label_re); it != std::sregex_iterator();
                 ++it)
                s.labels[(*it)[1]] = (*it)[2];
            s.value = m[3] == "+Inf" ? INFINITY : std::stod(m[3]);
            e.families[fam].samples.push_back(std::move(s));
        } else {
            ADD_FAILURE() << "not an exposition line: '" << line << "'";
        }
    }
    for (const auto& [name, f] : e.families) {
        EXPECT_FALSE(f.type.empty()) << name << " has no TYPE";
        EXPECT_FALSE(f.samples.empty()) << name << " has no sample";
        if (f.type == "counter") {
            EXPECT_TRUE(name.size() > 6 && name.substr(name.size() - 6) == "_total") << name;
        }
        EXPECT_EQ(name.find("_ms"), std::string::npos) << name << ": times are exported in seconds";
    }
    return e;
}

/// A snapshot of an engine core, a frontend and a worker with the metric names the actors record.
nlohmann::json actors_snapshot(int scale) {
    zmoe::metrics_registry core, fe, w;
    core.counter_add("steps", 10 * scale);
    core.counter_add("generation_tokens", 40 * scale);
    core.counter_add("requests_finished{reason=\"length\"}", scale);
    core.counter_add("tokens_sampled{rank=\"0\"}", 20 * scale);
    core.counter_add("tokens_sampled{rank=\"1\"}", 20 * scale);
    core.counter_add("expert_tokens{layer=\"0\",expert=\"3\"}", 7);
    core.gauge_set("requests_running", 3);
    core.gauge_set("requests_running{rank=\"0\"}", 1);
    core.gauge_set("requests_running{rank=\"1\"}", 2);
    core.gauge_set("tokens_scheduled_total{rank=\"0\"}", 100 * scale);
    core.gauge_set("kv_blocks_total{rank=\"0\"}", 64);
    core.gauge_set("preemptions", scale);
    core.gauge_set("uptime_s", 12.5 * scale);
    for (int i = 0; i < 10 * scale; ++i) core.observe("step_ms", 0.3 * scale + i);
    core.observe("step_tokens", 64 * scale);
    for (int i = 1; i <= scale * 5; ++i) fe.observe("ttft_ms", 20.0 * i * scale);
    fe.counter_add("generation_tokens", 40 * scale);
    w.observe("step_compute_ms", 4 * scale);
    return {{"engine_core", core.to_json()}, {"frontend", fe.to_json()}, {"worker_0", w.to_json()}};
}

const exposition::sample* find_sample(const exposition& e, const std::string& family, const std::string& name,
                                      const std::map<std::string, std::string>& labels) {
    const auto it = e.families.find(family);
    if (it == e.families.end()) return nullptr;
    for (const auto& s : it->second.samples) {
        bool all = s.name == name;
        for (const auto& [k, v] : labels) all = all && s.labels.count(k) && s.labels.at(k) == v;
        if (all) return &s;
    }
    return nullptr;
}

}  // namespace

TEST(Metrics, PrometheusHasHelpTypeSecondsAndTotals) {
    const auto e = parse_exposition(zmoe::metrics_to_prometheus(actors_snapshot(1)));
    // Counters end in _total; monotone gauges of the engine are exported as counters.
    EXPECT_EQ(e.families.at("zmoe_steps_total").type, "counter");
    EXPECT_EQ(e.families.at("zmoe_preemptions_total").type, "counter");
    EXPECT_EQ(e.families.at("zmoe_requests_running").type, "gauge");
    const auto* fin = find_sample(e, "zmoe_requests_finished_total", "zmoe_requests_finished_total",
                                  {{"actor", "engine_core"}, {"reason", "length"}});
    ASSERT_TRUE(fin);
    EXPECT_EQ(fin->value, 1);
    // Seconds: ttft_ms observed at 20..100 ms -> a sum of 0.3 s, bounds in seconds.
    const auto* sum = find_sample(e, "zmoe_ttft_seconds", "zmoe_ttft_seconds_sum", {{"actor", "frontend"}});
    ASSERT_TRUE(sum);
    EXPECT_NEAR(sum->value, 0.3, 1e-12);
    const auto* le = find_sample(e, "zmoe_ttft_seconds", "zmoe_ttft_seconds_bucket", {{"le", "0.05"}});
    ASSERT_TRUE(le);
    EXPECT_EQ(le->value, 2);  // 20 and 40 ms
    const auto* up = find_sample(e, "zmoe_uptime_seconds", "zmoe_uptime_seconds", {{"actor", "engine_core"}});
    ASSERT_TRUE(up);
    EXPECT_EQ(up->value, 12.5);
    // Totals and per-rank series under distinct names.
    EXPECT_EQ(e.families.at("zmoe_requests_running").samples.size(), 1u);
    EXPECT_EQ(e.families.at("zmoe_requests_running_per_rank").samples.size(), 2u);
    EXPECT_TRUE(e.families.count("zmoe_tokens_sampled_per_rank_total"));
    EXPECT_EQ(e.families.at("zmoe_tokens_scheduled_per_rank_total").type, "counter");
    EXPECT_EQ(e.families.at("zmoe_kv_blocks_total_per_rank").type, "gauge");
    for (const auto& [name, f] : e.families)
        for (const auto& s : f.samples) {
            EXPECT_EQ(s.labels.count("rank") == 1, name.find("_per_rank") != std::string::npos) << s.name;
            EXPECT_TRUE(s.labels.count("actor")) << s.name;
        }
    // The same family from two actors: one HELP/TYPE, two samples.
    EXPECT_EQ(e.families.at("zmoe_generation_tokens_total").samples.size(), 2u);
    // Per-expert series only when asked for.
    EXPECT_FALSE(e.families.count("zmoe_expert_tokens_total"));
    const auto with = parse_exposition(zmoe::metrics_to_prometheus(actors_snapshot(1), {.per_expert = true}));
    ASSERT_TRUE(with.families.count("zmoe_expert_tokens_total"));
    EXPECT_EQ(with.families.at("zmoe_expert_tokens_total").samples.front().labels.at("expert"), "3");
}

TEST(Metrics, PrometheusBucketsAreFixedAcrossScrapes) {
    // Two scrapes whose observations fall in different ranges must expose the same bucket bounds.
    const auto a = parse_exposition(zmoe::metrics_to_prometheus(actors_snapshot(1)));
    const auto b = parse_exposition(zmoe::metrics_to_prometheus(actors_snapshot(7)));
    std::set<std::string> a_names, b_names;
    for (const auto& [name, f] : a.families) a_names.insert(name);
    for (const auto& [name, f] : b.families) b_names.insert(name);
    EXPECT_EQ(a_names, b_names);
    int histograms = 0;
    for (const auto& [name, f] : a.families) {
        if (f.type != "histogram") continue;
        ++histograms;
        auto bounds_of = [&](const exposition::family& fam) {
            std::vector<std::string> les;
            double last = -1, last_count = 0, count = -1;
            for (const auto& s : fam.samples) {
                if (s.name == name + "_count") count = s.value;
                if (s.name != name + "_bucket") continue;
                les.push_back(s.labels.at("le"));
                const double le = les.back() == "+Inf" ? INFINITY : std::stod(les.back());
                EXPECT_GT(le, last) << name << ": bounds ascending";
                EXPECT_GE(s.value, last_count) << name << ": cumulative";
                last = le;
                last_count = s.value;
            }
            EXPECT_EQ(les.back(), "+Inf") << name;
            EXPECT_EQ(last_count, count) << name << ": +Inf bucket = count";
            return les;
        };
        EXPECT_EQ(bounds_of(f), bounds_of(b.families.at(name))) << name;
    }
    EXPECT_EQ(histograms, 4);  // step, step_tokens, ttft, step_compute
}

TEST(Metrics, TableListsEveryMetric) {
    const auto table = zmoe::metrics_to_table(actors_snapshot(1));
    EXPECT_NE(table.find("generation_tokens"), std::string::npos);
    EXPECT_NE(table.find("ttft_ms"), std::string::npos);
}
