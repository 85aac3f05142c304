#include "cli/bench_serve.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "base/log.hpp"

namespace zmoe::cli {

using clock_type = std::chrono::steady_clock;

namespace {

uint32_t draw_len(std::mt19937_64& rng, uint32_t len, double ratio, uint32_t min_len) {
    const auto lo = static_cast<uint32_t>(std::max<double>(min_len, std::floor(len * (1.0 - ratio))));
    const auto hi = static_cast<uint32_t>(std::max<double>(lo, std::floor(len * (1.0 + ratio))));
    return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
}

double seconds_since(clock_type::time_point t0, clock_type::time_point t) {
    return std::chrono::duration<double>(t - t0).count();
}

}  // namespace

void bench_progress_bar::update(uint32_t done, uint32_t failed, uint32_t in_flight, uint64_t tokens, double elapsed_s,
                                bool force) {
    if (!on_) return;
    const auto now = clock_type::now();
    if (!force && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const int filled = total_ ? static_cast<int>(kWidth * static_cast<double>(done) / total_) : kWidth;
    std::fprintf(stderr, "\r[%s%s] %u/%u  in flight %u  failed %u  %.0f tok/s  %.1f s ",
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), done, total_, in_flight,
                 failed, elapsed_s > 0 ? static_cast<double>(tokens) / elapsed_s : 0.0, elapsed_s);
    std::fflush(stderr);
}

void bench_progress_bar::finish() {
    if (on_) std::fprintf(stderr, "\n");
}

std::vector<double> bench_arrival_times(const serve_bench_params& p, size_t n) {
    // All at zero for an infinite rate, else exponential gaps (a Poisson process), seeded.
    std::vector<double> arrival(n, 0.0);
    if (std::isfinite(p.request_rate)) {
        if (p.request_rate <= 0) throw error(errc::invalid_argument, "bench: --request-rate must be > 0 or inf");
        std::mt19937_64 rng(p.seed ^ 0x9e3779b97f4a7c15ull);
        std::exponential_distribution<double> gap(p.request_rate);
        double t = 0.0;
        for (auto& a : arrival) a = (t += gap(rng));
        const double first = arrival.empty() ? 0.0 : arrival.front();
        for (auto& a : arrival) a -= first;  // the first request goes at once
    }
    return arrival;
}

nlohmann::json scrape_server_metrics(const std::string& endpoint) {
    try {
        zmoe_client client(endpoint);
        return nlohmann::json::parse(client.metrics(std::chrono::seconds(10)));
    } catch (const std::exception& e) {
        ZMOE_LOG(warn, "bench: no metrics from the server (" << e.what() << "): no floor in the result");
        return nlohmann::json::object();
    }
}

std::vector<bench_prompt> make_bench_prompts(const serve_bench_params& p) {
    if (p.vocab_size <= 0) throw error(errc::invalid_argument, "bench: the vocabulary size is unknown");
    const std::set<int32_t> excluded(p.excluded_ids.begin(), p.excluded_ids.end());
    if (static_cast<int64_t>(excluded.size()) >= p.vocab_size)
        throw error(errc::invalid_argument, "bench: no token id left to draw prompts from");
    std::mt19937_64 rng(p.seed);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(p.vocab_size - 1));
    std::vector<bench_prompt> out(p.num_prompts);
    for (auto& prompt : out) {
        const uint32_t in_len = draw_len(rng, p.input_len, p.range_ratio, 1);
        prompt.output_len = draw_len(rng, p.output_len, p.range_ratio, 1);
        prompt.token_ids.reserve(in_len);
        while (prompt.token_ids.size() < in_len) {
            const int32_t t = id(rng);
            if (!excluded.count(t)) prompt.token_ids.push_back(t);
        }
    }
    return out;
}

serve_bench_run run_serve_bench(const serve_bench_params& p, double ready_timeout_s) {
    const auto prompts = make_bench_prompts(p);
    zmoe_client client(p.endpoint);
    {
        const auto deadline = clock_type::now() + std::chrono::duration<double>(ready_timeout_s);
        std::string last = "no answer";
        for (;;) {
            try {
                const auto h = client.health(std::chrono::milliseconds(500));
                if (h.status == "ok") break;
                last = "status " + h.status + (h.detail.empty() ? "" : " (" + h.detail + ")");
            } catch (const error& e) {
                last = e.what();
            }
            if (clock_type::now() >= deadline)
                throw error(errc::peer_dead, "bench: the server at " + p.endpoint + " is not ready: " + last);
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }

    serve_bench_run run;
    run.metrics_before = scrape_server_metrics(p.endpoint);

    const std::vector<double> arrival = bench_arrival_times(p, prompts.size());

    run.records.resize(prompts.size());
    std::vector<clock_type::time_point> sent(prompts.size()), last_token(prompts.size());
    std::vector<bool> got_token(prompts.size(), false);
    std::map<std::string, size_t> live;  // client request id -> prompt index
    const uint32_t cap = p.max_concurrency ? p.max_concurrency : static_cast<uint32_t>(prompts.size());
    size_t next = 0;
    uint32_t done = 0, failed = 0;
    uint64_t tokens = 0;
    bench_progress_bar bar(p.progress, static_cast<uint32_t>(prompts.size()));
    const auto t0 = clock_type::now();
    auto last_event = t0;
    auto finish = [&](size_t i, clock_type::time_point at) {
        run.records[i].latency_s = seconds_since(sent[i], at);
        ++done;
    };

    while (done < prompts.size()) {
        auto now = clock_type::now();
        while (next < prompts.size() && live.size() < cap && seconds_since(t0, now) >= arrival[next]) {
            const std::string id = "b" + std::to_string(next);
            zmoe::client_generate g;
            g.client_request_id = id;
            g.prompt = prompts[next].token_ids;
            g.max_tokens = prompts[next].output_len;
            g.temperature = p.temperature;
            g.ignore_eos = true;
            g.stream = true;
            g.structured = p.structured;
            run.records[next].input_len = static_cast<uint32_t>(prompts[next].token_ids.size());
            run.records[next].output_len = prompts[next].output_len;
            sent[next] = clock_type::now();
            client.generate(std::move(g));
            live[id] = next;
            ++next;
            now = clock_type::now();
        }
        if (live.empty() && next == prompts.size()) break;
        if (live.empty()) last_event = now;  // idle while waiting for the next arrival is not a stall
        // Wait for an event, but no longer than until the next arrival may be sent.
        auto wait = std::chrono::milliseconds(100);
        if (next < prompts.size() && live.size() < cap) {
            const double until = arrival[next] - seconds_since(t0, now);
            wait = std::min(wait, std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, until) * 1000.0)));
        }
        auto ev = client.next_any(wait);
        now = clock_type::now();
        if (!ev) {
            if (!live.empty() && seconds_since(last_event, now) > p.timeout_s) {
                for (const auto& [id, i] : live) {
                    client.abort(id);
                    run.records[i].error = "no event within the timeout";
                    finish(i, now);
                    ++failed;
                }
                live.clear();
                for (; next < prompts.size(); ++next) {
                    run.records[next].input_len = static_cast<uint32_t>(prompts[next].token_ids.size());
                    run.records[next].output_len = prompts[next].output_len;
                    run.records[next].error = "not sent: the server stalled";
                    ++done;
                    ++failed;
                }
            }
            bar.update(done - failed, failed, static_cast<uint32_t>(live.size()), tokens, seconds_since(t0, now),
                       false);
            continue;
        }
        last_event = now;
        const std::string& id =
            std::visit([](const auto& m) -> const std::string& { return m.client_request_id; }, *ev);
        const auto it = live.find(id);
        if (it == live.end()) continue;  // an error not tied to one of our requests, or a late event
        const size_t i = it->second;
        auto& rec = run.records[i];
        if (const auto* err = std::get_if<client_error>(&*ev)) {
            rec.error = std::string(errc_name(err->code)) + ": " + err->message;
            finish(i, now);
            ++failed;
            live.erase(it);
        } else {
            const auto& d = std::get<client_delta>(*ev);
            if (!d.token_ids.empty()) {
                if (!got_token[i]) {
                    rec.ttft_s = seconds_since(sent[i], now);
                    got_token[i] = true;
                } else {
                    rec.itl_s.push_back(seconds_since(last_token[i], now));
                }
                last_token[i] = now;
                rec.output_tokens += static_cast<uint32_t>(d.token_ids.size());
                tokens += d.token_ids.size();
            }
            rec.prompt_tokens = d.prompt_tokens;
            if (d.finished) {
                finish(i, now);
                live.erase(it);
                if (d.reason == finish_reason::abort || d.reason == finish_reason::error) {
                    rec.error = "finished with ";
                    rec.error += finish_reason_name(d.reason);
                    ++failed;
                } else if (rec.output_tokens != rec.output_len) {
                    rec.error = "asked for " + std::to_string(rec.output_len) + " tokens, got " +
                                std::to_string(rec.output_tokens);
                    ++failed;
                } else {
                    rec.success = true;
                }
            }
        }
        bar.update(done - failed, failed, static_cast<uint32_t>(live.size()), tokens, seconds_since(t0, now),
                   done == prompts.size());
    }
    run.duration_s = seconds_since(t0, clock_type::now());
    bar.finish();
    run.metrics_after = scrape_server_metrics(p.endpoint);
    return run;
}

}  // namespace zmoe::cli
