#include "base/metrics.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace zmoe {

histogram::histogram() {
    for (double decade = 1e-3; decade < 1e7; decade *= 10)
        for (double m : {1.0, 2.0, 5.0}) bounds.push_back(decade * m);
    counts.assign(bounds.size() + 1, 0);
}

void histogram::observe(double v) {
    const size_t i = std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin();
    ++counts[i];
    ++count;
    sum += v;
    max = count == 1 ? v : std::max(max, v);
}

double histogram::quantile(double q) const {
    if (count == 0) return 0.0;
    const double target = q * static_cast<double>(count);
    uint64_t seen = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
        seen += counts[i];
        if (static_cast<double>(seen) >= target && counts[i] > 0)
            return i < bounds.size() ? std::min(bounds[i], max) : max;
    }
    return max;
}

double metrics_registry::counter(const std::string& name) const {
    auto it = counters_.find(name);
    return it == counters_.end() ? 0.0 : it->second;
}

double metrics_registry::gauge(const std::string& name) const {
    auto it = gauges_.find(name);
    return it == gauges_.end() ? 0.0 : it->second;
}

nlohmann::json metrics_registry::to_json() const {
    nlohmann::json out = {{"counters", nlohmann::json::object()},
                          {"gauges", nlohmann::json::object()},
                          {"histograms", nlohmann::json::object()}};
    for (const auto& [k, v] : counters_) out["counters"][k] = v;
    for (const auto& [k, v] : gauges_) out["gauges"][k] = v;
    for (const auto& [k, h] : histograms_) {
        nlohmann::json buckets = nlohmann::json::array();
        uint64_t cumulative = 0;
        for (size_t i = 0; i < h.bounds.size(); ++i) {
            cumulative += h.counts[i];
            if (h.counts[i]) buckets.push_back({h.bounds[i], cumulative});
        }
        out["histograms"][k] = {{"count", h.count},       {"sum", h.sum},           {"max", h.max},
                                {"p50", h.quantile(0.5)}, {"p90", h.quantile(0.9)}, {"p99", h.quantile(0.99)},
                                {"buckets", buckets}};
    }
    return out;
}

namespace {

const nlohmann::json& section_of(const nlohmann::json& m, const char* key) {
    static const nlohmann::json empty = nlohmann::json::object();
    auto it = m.find(key);
    return it == m.end() ? empty : *it;
}

// "name{a=\"b\"}" + actor label -> "zmoe_name{actor=\"x\",a=\"b\"}"
std::string prom_name(const std::string& actor, const std::string& name, const std::string& suffix = "",
                      const std::string& extra_label = "") {
    std::string base = name, labels;
    const auto brace = name.find('{');
    if (brace != std::string::npos) {
        base = name.substr(0, brace);
        labels = name.substr(brace + 1, name.size() - brace - 2);
    }
    for (char& c : base)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
    std::string all = "actor=\"" + actor + "\"";
    if (!labels.empty()) all += "," + labels;
    if (!extra_label.empty()) all += "," + extra_label;
    return "zmoe_" + base + suffix + "{" + all + "}";
}

std::string num(double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.10g", v);
    return buf;
}

}  // namespace

std::string metrics_to_prometheus(const nlohmann::json& actors) {
    std::ostringstream os;
    for (const auto& [actor, m] : actors.items()) {
        if (!m.is_object()) continue;
        for (const auto& [k, v] : section_of(m, "counters").items())
            os << prom_name(actor, k, "_total") << " " << num(v.get<double>()) << "\n";
        for (const auto& [k, v] : section_of(m, "gauges").items())
            os << prom_name(actor, k) << " " << num(v.get<double>()) << "\n";
        for (const auto& [k, h] : section_of(m, "histograms").items()) {
            for (const auto& b : h.at("buckets"))
                os << prom_name(actor, k, "_bucket", "le=\"" + num(b[0].get<double>()) + "\"") << " "
                   << b[1].get<uint64_t>() << "\n";
            os << prom_name(actor, k, "_bucket", "le=\"+Inf\"") << " " << h.at("count").get<uint64_t>() << "\n";
            os << prom_name(actor, k, "_sum") << " " << num(h.at("sum").get<double>()) << "\n";
            os << prom_name(actor, k, "_count") << " " << h.at("count").get<uint64_t>() << "\n";
        }
    }
    return os.str();
}

std::string metrics_to_table(const nlohmann::json& actors) {
    std::ostringstream os;
    char line[512];
    std::snprintf(line, sizeof(line), "%-14s %-52s %s\n", "actor", "metric", "value");
    os << line;
    for (const auto& [actor, m] : actors.items()) {
        if (!m.is_object()) continue;
        for (const char* section : {"counters", "gauges"})
            for (const auto& [k, v] : section_of(m, section).items()) {
                std::snprintf(line, sizeof(line), "%-14s %-52s %s\n", actor.c_str(), k.c_str(),
                              num(v.get<double>()).c_str());
                os << line;
            }
        for (const auto& [k, h] : section_of(m, "histograms").items()) {
            std::snprintf(line, sizeof(line), "%-14s %-52s n=%llu p50=%s p90=%s p99=%s max=%s\n", actor.c_str(),
                          k.c_str(), static_cast<unsigned long long>(h.at("count").get<uint64_t>()),
                          num(h.at("p50").get<double>()).c_str(), num(h.at("p90").get<double>()).c_str(),
                          num(h.at("p99").get<double>()).c_str(), num(h.at("max").get<double>()).c_str());
            os << line;
        }
    }
    return os.str();
}

}  // namespace zmoe
