#include "cli/bench_serve.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "cli/bench_workload.hpp"

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

const char* bench_dataset_name(bench_dataset d) {
    switch (d) {
        case bench_dataset::random:
            return "random";
        case bench_dataset::prefix_repetition:
            return "prefix-repetition";
        case bench_dataset::multi_turn:
            return "multi-turn";
    }
    return "?";
}

bench_token_source::bench_token_source(const serve_bench_params& p, uint64_t seed)
    : rng_(seed), excluded_(p.excluded_ids.begin(), p.excluded_ids.end()) {
    if (p.vocab_size <= 0) throw error(errc::invalid_argument, "bench: the vocabulary size is unknown");
    if (static_cast<int64_t>(excluded_.size()) >= p.vocab_size)
        throw error(errc::invalid_argument, "bench: no token id left to draw prompts from");
    id_ = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(p.vocab_size - 1));
}

std::vector<int32_t> bench_token_source::draw(size_t n) {
    std::vector<int32_t> out;
    out.reserve(n);
    while (out.size() < n) {
        const int32_t t = id_(rng_);
        if (!excluded_.count(t)) out.push_back(t);
    }
    return out;
}

std::vector<bench_prompt> make_bench_prompts(const serve_bench_params& p) {
    switch (p.dataset) {
        case bench_dataset::random: {
            // One generator for lengths and ids, in this order per prompt: the prompts of a seed stay what they were.
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
        case bench_dataset::prefix_repetition: {
            const auto& r = p.prefix_repetition;
            if (r.num_prefixes == 0 || p.num_prompts < r.num_prefixes)
                throw error(errc::invalid_argument, "bench: --num-prompts (" + std::to_string(p.num_prompts) +
                                                        ") must be at least --prefix-repetition-num-prefixes (" +
                                                        std::to_string(r.num_prefixes) + ")");
            bench_token_source ids(p, p.seed);
            std::vector<bench_prompt> out;
            out.reserve(p.num_prompts);
            const uint32_t per_prefix = p.num_prompts / r.num_prefixes, extra = p.num_prompts % r.num_prefixes;
            for (uint32_t k = 0; k < r.num_prefixes; ++k) {
                const std::vector<int32_t> prefix = ids.draw(r.prefix_len);
                for (uint32_t j = 0; j < per_prefix + (k < extra ? 1 : 0); ++j) {
                    bench_prompt prompt{.token_ids = prefix, .output_len = r.output_len};
                    const auto suffix = ids.draw(r.suffix_len);
                    prompt.token_ids.insert(prompt.token_ids.end(), suffix.begin(), suffix.end());
                    out.push_back(std::move(prompt));
                }
            }
            std::mt19937_64 shuffle_rng(p.seed ^ 0x2545f4914f6cdd1dull);
            std::shuffle(out.begin(), out.end(), shuffle_rng);
            return out;
        }
        case bench_dataset::multi_turn:
            throw error(errc::invalid_argument, "bench: the multi-turn prompts depend on the answers (bench_workload)");
    }
    throw error(errc::internal, "bench: unknown dataset");
}

struct rank_load_sampler::impl {
    std::mutex mu;
    std::condition_variable cv;
    bool stopping = false;
    nlohmann::json samples = nlohmann::json::array();
    std::thread thread;
};

namespace {

/// The per-rank values of gauge `name` ({rank="r"} series) in an engine core's gauges, by rank.
std::vector<double> per_rank(const nlohmann::json& gauges, const std::string& name) {
    std::vector<double> out;
    const std::string head = name + "{rank=\"";
    for (const auto& [k, v] : gauges.items()) {
        if (k.rfind(head, 0) != 0 || !v.is_number()) continue;
        size_t used = 0;
        unsigned long r = 0;
        try {
            r = std::stoul(k.substr(head.size()), &used);
        } catch (const std::exception&) {
            continue;
        }
        if (r >= 4096) continue;
        if (out.size() <= r) out.resize(r + 1, 0.0);
        out[r] = v.get<double>();
    }
    return out;
}

}  // namespace

rank_load_sampler::rank_load_sampler(const std::string& endpoint, double interval_s) : impl_(new impl) {
    if (!(interval_s > 0)) return;
    impl_->thread = std::thread([this, endpoint, interval_s] {
        const auto t0 = clock_type::now();
        const auto period = std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(interval_s));
        try {
            zmoe_client client(endpoint);
            std::unique_lock lock(impl_->mu);
            // A read at the end of each interval: the first comes once the run is under way.
            while (!impl_->cv.wait_for(lock, period, [this] { return impl_->stopping; })) {
                lock.unlock();
                nlohmann::json m;
                try {
                    m = nlohmann::json::parse(client.metrics(std::chrono::seconds(5)));
                } catch (const std::exception& e) {
                    ZMOE_LOG(warn, "bench: a per-rank load read failed: " << e.what());
                }
                lock.lock();
                if (m.is_object() && m.contains("engine_core") && m["engine_core"].contains("gauges")) {
                    const auto& g = m["engine_core"]["gauges"];
                    impl_->samples.push_back({{"t", seconds_since(t0, clock_type::now())},
                                              {"running", per_rank(g, "requests_running")},
                                              {"waiting", per_rank(g, "requests_waiting")}});
                }
            }
        } catch (const std::exception& e) {
            ZMOE_LOG(warn, "bench: per-rank load not read: " << e.what());
        }
    });
}

rank_load_sampler::~rank_load_sampler() { stop(); }

nlohmann::json rank_load_sampler::stop() {
    if (!impl_) return nlohmann::json::array();
    {
        std::lock_guard lock(impl_->mu);
        impl_->stopping = true;
    }
    impl_->cv.notify_all();
    if (impl_->thread.joinable()) impl_->thread.join();
    std::lock_guard lock(impl_->mu);
    return impl_->samples;
}

serve_bench_run run_serve_bench(const serve_bench_params& p, double ready_timeout_s) {
    bench_workload work(p);
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

    const size_t n = work.size();
    run.records.resize(n);
    for (size_t i = 0; i < n; ++i) {
        run.records[i].conversation = work.conversation(i);
        run.records[i].turn = work.turn(i);
        run.records[i].output_len = work.prompt(i).output_len;
    }
    std::vector<clock_type::time_point> sent(n), last_token(n);
    std::vector<bool> got_token(n, false);
    std::vector<std::vector<int32_t>> answers(n);  // multi-turn: what the next turn carries
    const bool keep_answers = p.dataset == bench_dataset::multi_turn;
    std::map<std::string, size_t> live;  // client request id -> request index
    const uint32_t cap = p.max_concurrency ? p.max_concurrency : static_cast<uint32_t>(n);
    uint32_t done = 0, failed = 0;
    uint64_t tokens = 0;
    bench_progress_bar bar(p.progress, static_cast<uint32_t>(n));
    rank_load_sampler sampler(p.endpoint, p.rank_sample_interval_s);
    const auto t0 = clock_type::now();
    auto last_event = t0;
    auto give_up = [&](const std::vector<size_t>& indices, const std::string& why) {
        for (const size_t j : indices) {
            run.records[j].input_len = static_cast<uint32_t>(work.prompt(j).token_ids.size());
            run.records[j].error = why;
            ++done;
            ++failed;
        }
    };
    auto finish = [&](size_t i, clock_type::time_point at, bool success) {
        run.records[i].latency_s = seconds_since(sent[i], at);
        run.records[i].success = success;
        ++done;
        if (!success) ++failed;
        if (keep_answers && success) run.records[i].answer_len = static_cast<uint32_t>(answers[i].size());
        give_up(work.finish(i, success, answers[i]), "not sent: an earlier turn of its conversation failed");
        answers[i] = {};
    };

    while (done < n) {
        auto now = clock_type::now();
        while (live.size() < cap) {
            const auto next = work.pop_ready(seconds_since(t0, now));
            if (!next) break;
            const size_t i = *next;
            const std::string id = "b" + std::to_string(i);
            zmoe::client_generate g;
            g.client_request_id = id;
            g.prompt = work.prompt(i).token_ids;
            g.max_tokens = work.prompt(i).output_len;
            g.temperature = p.temperature;
            g.ignore_eos = true;
            g.stream = true;
            g.structured = p.structured;
            run.records[i].input_len = static_cast<uint32_t>(work.prompt(i).token_ids.size());
            sent[i] = clock_type::now();
            run.records[i].sent_s = seconds_since(t0, sent[i]);
            client.generate(std::move(g));
            live[id] = i;
            now = clock_type::now();
        }
        if (live.empty() && !work.has_unsent()) break;
        if (live.empty()) last_event = now;  // idle while waiting for the next arrival is not a stall
        // Wait for an event, but no longer than until the next arrival may be sent.
        auto wait = std::chrono::milliseconds(100);
        if (live.size() < cap) {
            const double until = work.next_arrival_s() - seconds_since(t0, now);
            if (until < 0.1)
                wait = std::min(wait, std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, until) * 1000.0)));
        }
        auto ev = client.next_any(wait);
        now = clock_type::now();
        if (!ev) {
            if (!live.empty() && seconds_since(last_event, now) > p.timeout_s) {
                for (const auto& [id, i] : live) {
                    client.abort(id);
                    run.records[i].error = "no event within the timeout";
                    finish(i, now, false);
                }
                live.clear();
                give_up(work.give_up_unsent(), "not sent: the server stalled");
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
            live.erase(it);
            finish(i, now, false);
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
                if (keep_answers) answers[i].insert(answers[i].end(), d.token_ids.begin(), d.token_ids.end());
            }
            rec.prompt_tokens = d.prompt_tokens;
            rec.cached_tokens = static_cast<int64_t>(d.cached_tokens);
            if (d.finished) {
                live.erase(it);
                if (d.reason == finish_reason::abort || d.reason == finish_reason::error) {
                    rec.error = "finished with ";
                    rec.error += finish_reason_name(d.reason);
                } else if (rec.output_tokens != rec.output_len) {
                    rec.error = "asked for " + std::to_string(rec.output_len) + " tokens, got " +
                                std::to_string(rec.output_tokens);
                }
                finish(i, now, rec.error.empty());
            }
        }
        bar.update(done - failed, failed, static_cast<uint32_t>(live.size()), tokens, seconds_since(t0, now),
                   done == n);
    }
    run.duration_s = seconds_since(t0, clock_type::now());
    run.rank_samples = sampler.stop();
    bar.finish();
    run.metrics_after = scrape_server_metrics(p.endpoint);
    return run;
}

}  // namespace zmoe::cli
