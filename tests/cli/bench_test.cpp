// `zmoe bench serve` and `zmoe bench sweep` end to end against `zmoe serve` on the demo model (CPU, loopback):
// their JSON is parsed and checked for the contract's keys and for values that agree with each other. Nothing
// here asserts a time.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "base/metrics.hpp"
#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;
using namespace std::chrono_literals;

namespace {

/// A demo checkpoint (zmoe make-demo) served on a free loopback port; stopped and removed at destruction.
struct demo_server {
    temp_dir dir;
    int port = free_port();
    zmoe::child_process proc;
    std::string model() const { return dir / "demo"; }
    std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port); }

    demo_server() {
        const std::string tokenizer = std::string(ZMOE_SOURCE_DIR) + "/third_party/tokenizers/qwen3";
        if (run_zmoe({"make-demo", "--out", model(), "--tokenizer", tokenizer}) != 0) {
            ADD_FAILURE() << "make-demo failed";
            return;
        }
        proc = zmoe::child_process::spawn(
            {kZmoe, "serve", "--model", model(), "--port", std::to_string(port), "--threads", "1"});
    }
    ~demo_server() {
        if (proc.running()) {
            proc.kill(SIGTERM);
            if (!proc.wait_for(30s)) {
                proc.kill(SIGKILL);
                proc.wait();
            }
        }
    }
};

double num(const nlohmann::json& j, const std::string& key) {
    EXPECT_TRUE(j.contains(key)) << key;
    return j.contains(key) ? j[key].get<double>() : 0.0;
}

/// Checks one result object against the run it describes: n requests of in_len prompt tokens and out_len output
/// tokens, none failed.
void check_result(const nlohmann::json& r, size_t n, int in_len, int out_len) {
    EXPECT_EQ(r["completed"].get<size_t>(), n);
    EXPECT_EQ(r["failed"].get<size_t>(), 0u);
    EXPECT_EQ(r["total_input_tokens"].get<size_t>(), n * in_len);
    EXPECT_EQ(r["total_output_tokens"].get<size_t>(), n * out_len);
    ASSERT_EQ(r["input_lens"].size(), n);
    ASSERT_EQ(r["output_lens"].size(), n);
    ASSERT_EQ(r["ttfts"].size(), n);
    ASSERT_EQ(r["itls"].size(), n);
    for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(r["input_lens"][i].get<int>(), in_len);
        EXPECT_EQ(r["output_lens"][i].get<int>(), out_len);
        EXPECT_EQ(r["errors"][i].get<std::string>(), "");
        // One ITL per delta after the first: at least one delta, at most one per token.
        EXPECT_LE(r["itls"][i].size(), static_cast<size_t>(out_len - 1));
    }
    const double duration = num(r, "duration");
    ASSERT_GT(duration, 0.0);
    EXPECT_NEAR(num(r, "request_throughput") * duration, static_cast<double>(n), 1e-6 * n);
    EXPECT_NEAR(num(r, "output_throughput") * duration, static_cast<double>(n * out_len), 1e-6 * n * out_len);
    EXPECT_NEAR(num(r, "total_token_throughput") * duration, static_cast<double>(n * (in_len + out_len)),
                1e-6 * n * (in_len + out_len));
    for (const std::string m : {"ttft", "tpot", "itl", "e2el"}) {
        const double mean = num(r, "mean_" + m + "_ms"), median = num(r, "median_" + m + "_ms");
        const double p90 = num(r, "p90_" + m + "_ms"), p99 = num(r, "p99_" + m + "_ms");
        EXPECT_GT(mean, 0.0) << m;
        EXPECT_GE(num(r, "std_" + m + "_ms"), 0.0) << m;
        EXPECT_LE(median, p90) << m;
        EXPECT_LE(p90, p99) << m;
    }
    // Every request's first token comes before its end, so the mean TTFT is below the mean latency, and the
    // mean latency is TTFT plus (out_len - 1) TPOTs on average.
    EXPECT_LT(num(r, "mean_ttft_ms"), num(r, "mean_e2el_ms"));
    EXPECT_NEAR(num(r, "mean_e2el_ms"), num(r, "mean_ttft_ms") + (out_len - 1) * num(r, "mean_tpot_ms"),
                1e-6 * num(r, "mean_e2el_ms"));
    EXPECT_LE(num(r, "mean_e2el_ms"), duration * 1000.0);
}

/// The server's metrics as Prometheus text, as `zmoe ctl metrics --prometheus` prints them.
std::string scrape(const std::string& endpoint) {
    zmoe::zmoe_client c(endpoint);
    const auto all = nlohmann::json::parse(c.metrics(5s));
    nlohmann::json actors = nlohmann::json::object();
    for (const auto& [k, v] : all.items())
        if (v.is_object() && v.contains("counters")) actors[k] = v;
    return zmoe::metrics_to_prometheus(actors);
}

/// Every family announced by HELP then TYPE; returns each histogram series' bucket bounds, in order.
std::map<std::string, std::vector<std::string>> check_exposition(const std::string& text) {
    std::map<std::string, std::vector<std::string>> buckets;
    std::istringstream in(text);
    std::string line, help_of, type_of;
    while (std::getline(in, line)) {
        if (line.rfind("# HELP ", 0) == 0) {
            help_of = line.substr(7, line.find(' ', 7) - 7);
        } else if (line.rfind("# TYPE ", 0) == 0) {
            type_of = line.substr(7, line.find(' ', 7) - 7);
            EXPECT_EQ(type_of, help_of) << line;
        } else {
            const auto name = line.substr(0, line.find('{'));
            EXPECT_EQ(name.rfind(type_of, 0), 0u) << "sample outside its family: " << line;
            if (name.size() > 7 && name.substr(name.size() - 7) == "_bucket") {
                const auto series = line.substr(0, line.find(",le="));
                const auto le = line.find("le=\"");
                buckets[series].push_back(line.substr(le + 4, line.find('"', le + 4) - le - 4));
            }
        }
    }
    return buckets;
}

TEST(Bench, ServeAndSweepAgainstTheDemoModel) {
    demo_server s;
    ASSERT_TRUE(s.proc.running());
    constexpr int kPrompts = 5, kIn = 12, kOut = 6;
    const std::string json = s.dir / "serve.json";
    ASSERT_EQ(run_zmoe({"bench", "serve", "--endpoint", s.endpoint(), "--model", s.model(), "--num-prompts",
                        std::to_string(kPrompts), "--random-input-len", std::to_string(kIn), "--random-output-len",
                        std::to_string(kOut), "--max-concurrency", "3", "--seed", "7", "--json", json}),
              0);
    const auto r = read_json(json);
    check_result(r, kPrompts, kIn, kOut);
    EXPECT_EQ(r["num_prompts"].get<int>(), kPrompts);
    EXPECT_EQ(r["max_concurrency"].get<int>(), 3);
    EXPECT_EQ(r["request_rate"].get<std::string>(), "inf");
    EXPECT_EQ(r["backend"].get<std::string>(), "zmoe");
    // The engine core's served decode steps beside their memory floor (the CPU worker reports its memcpy
    // bandwidth): present, positive and consistent with each other.
    const double decode_steps = num(r, "decode_steps"), decode_tokens = num(r, "decode_tokens");
    EXPECT_GT(decode_steps, 0.0);
    EXPECT_GE(decode_tokens, decode_steps);
    EXPECT_LE(decode_tokens, static_cast<double>(kPrompts * kOut));
    EXPECT_GT(num(r, "decode_output_throughput"), 0.0);
    EXPECT_NEAR(num(r, "decode_output_throughput") * num(r, "mean_decode_step_ms") * decode_steps / 1000.0,
                decode_tokens, 1e-6 * decode_tokens);
    EXPECT_GT(num(r, "copy_bandwidth_bytes_per_s"), 0.0);
    EXPECT_GT(num(r, "floor_decode_output_throughput"), 0.0);
    EXPECT_NEAR(num(r, "decode_floor_fraction"), num(r, "mean_floor_decode_step_ms") / num(r, "mean_decode_step_ms"),
                1e-9);
    EXPECT_GT(num(r, "mean_step_message_bytes"), 0.0);
    const auto first_scrape = scrape(s.endpoint());
    const auto first_buckets = check_exposition(first_scrape);
    EXPECT_NE(first_scrape.find("zmoe_ttft_seconds_bucket{"), std::string::npos) << first_scrape;

    // Poisson arrivals and a range of lengths: the lengths vary, and the totals still add up.
    const std::string rated = s.dir / "rated.json";
    ASSERT_EQ(run_zmoe({"bench", "serve", "--endpoint", s.endpoint(), "--model", s.model(), "--num-prompts", "4",
                        "--random-input-len", "10", "--random-output-len", "4", "--random-range-ratio", "0.5",
                        "--request-rate", "50", "--json", rated}),
              0);
    const auto q = read_json(rated);
    EXPECT_EQ(q["completed"].get<int>(), 4);
    size_t in_sum = 0, out_sum = 0;
    for (const auto& v : q["input_lens"]) {
        EXPECT_GE(v.get<int>(), 5);
        EXPECT_LE(v.get<int>(), 15);
        in_sum += v.get<size_t>();
    }
    for (const auto& v : q["output_lens"]) {
        EXPECT_GE(v.get<int>(), 2);
        EXPECT_LE(v.get<int>(), 6);
        out_sum += v.get<size_t>();
    }
    EXPECT_EQ(q["total_input_tokens"].get<size_t>(), in_sum);
    EXPECT_EQ(q["total_output_tokens"].get<size_t>(), out_sum);
    EXPECT_DOUBLE_EQ(q["request_rate"].get<double>(), 50.0);
    // The served metrics: HELP and TYPE for every family, the same bucket bounds before and after more traffic.
    const auto second_buckets = check_exposition(scrape(s.endpoint()));
    EXPECT_FALSE(first_buckets.empty());
    for (const auto& [series, les] : first_buckets) {
        ASSERT_TRUE(second_buckets.count(series)) << series;
        EXPECT_EQ(second_buckets.at(series), les) << series;
    }

    const std::string sweep = s.dir / "sweep.json", png = s.dir / "sweep.png";
    ASSERT_EQ(run_zmoe({"bench", "sweep", "--endpoint", s.endpoint(), "--model", s.model(), "--num-prompts", "3",
                        "--random-input-len", "8", "--random-output-len", "4", "--concurrency", "1,3", "--json", sweep,
                        "--plot", png}),
              0);
    const auto w = read_json(sweep);
    ASSERT_EQ(w["results"].size(), 2u);
    EXPECT_EQ(w["results"][0]["max_concurrency"].get<int>(), 1);
    EXPECT_EQ(w["results"][1]["max_concurrency"].get<int>(), 3);
    for (const auto& res : w["results"]) check_result(res, 3, 8, 4);
    std::ifstream in(png, std::ios::binary);
    std::string head(8, '\0');
    in.read(head.data(), 8);
    EXPECT_EQ(head, std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST(Bench, BadOptionsAreRefusedBeforeSending) {
    // No server needed: the options are checked first.
    EXPECT_NE(run_zmoe({"bench", "serve", "--endpoint", "tcp://127.0.0.1:1", "--num-prompts", "1"}), 0);  // no vocab
    EXPECT_NE(run_zmoe({"bench", "serve", "--vocab-size", "100", "--request-rate", "-1"}), 0);
    EXPECT_NE(run_zmoe({"bench", "sweep", "--vocab-size", "100", "--concurrency", "1,x"}), 0);
    EXPECT_NE(run_zmoe({"bench", "nope"}), 0);
    EXPECT_EQ(run_zmoe({"bench", "--help"}), 0);
}

}  // namespace
