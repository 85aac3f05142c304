// The prefix cache's cost in the engine core: lookup (hashing a prompt's blocks, finding its cached prefix on each
// rank) and bookkeeping (reference counts, publishing computed blocks, the LRU free queue, evictions) per step, with
// 100 000 cached blocks, next to a typical step time. The engine core plans a step while the previous one runs on
// the GPU (async scheduling), so this host time hides behind the device time unless it exceeds it.
//
//   prefix_cache_bench [--cached-blocks 100000] [--steps 2000] [--step-ms 17.225] [--json OUT]
//
// Method: one scheduler per mode (cache on, cache off) over a pool of cached-blocks + 40 000 blocks of 16 tokens.
// The cache-on pool is first filled with `cached-blocks` published blocks (distinct prompts run to their end). Then
// both run the same multi-turn-like load, one step at a time with fake results (token 7 for every sample): each step
// adds `--arrivals` requests whose 2 000-token prompt starts with one of 64 cached "conversations" (1 792 tokens) and
// ends with 208 new tokens, 128 tokens out, up to 256 running. Measured per step, in the thread's CPU time (robust on
// a shared machine; wall time is reported beside it): add_request of the arrivals, schedule() and update(). The
// difference on - off is what caching adds (off still schedules the same requests; it computes their whole prompts
// instead, so its steps hold more prefill tokens: the difference is an upper bound of the bookkeeping, as the on-mode
// steps do strictly more cache work and no less other work per scheduled token). Also per operation: hashing a block,
// finding a cached block, publishing one.

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "engine_core/block_hash.hpp"
#include "engine_core/kv_block_pool.hpp"
#include "engine_core/scheduler.hpp"

using namespace zmoe;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr int32_t kBlock = 16;
constexpr int32_t kConversations = 64;
constexpr int32_t kSharedTokens = 1792;  // 112 blocks
constexpr int32_t kNewTokens = 208;
constexpr int32_t kOutputTokens = 128;

double us_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

/// This thread's CPU time in microseconds: what the engine core's thread spends, whatever else shares the cores
/// (wall time on a loaded machine counts the time other processes ran).
double thread_cpu_us() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

std::vector<step_result> fake_results(const std::vector<step_request>& steps) {
    std::vector<step_result> out;
    for (size_t r = 0; r < steps.size(); ++r) {
        step_result res;
        res.step_id = steps[r].step_id;
        res.rank = static_cast<int32_t>(r);
        for (const scheduled_seq& s : steps[r].seqs)
            if (s.do_sample) res.tokens.push_back({.request_id = s.request_id, .token_id = 7, .logprobs = {}});
        out.push_back(std::move(res));
    }
    return out;
}

scheduler_config config(int32_t num_blocks, bool caching) {
    return {.max_num_batched_tokens = 8192,
            .max_num_seqs = 256,
            .block_size = kBlock,
            .num_blocks_per_rank = {num_blocks},
            .max_model_len = 1 << 20,
            .async_scheduling = true,
            .enable_prefix_caching = caching,
            .placement = dp_placement::cache_aware,
            .placement_max_imbalance = 4};
}

struct mode_result {
    double mean_step_us = 0;  ///< thread CPU time
    double p50_step_us = 0;
    double p99_step_us = 0;
    double mean_wall_us = 0;  ///< wall time (includes time other processes held the core)
    double prompt_tokens_cached_pct = 0;
    int32_t cached_blocks_at_end = 0;
    uint64_t evicted = 0;
};

mode_result run_mode(bool caching, int32_t cached_blocks, int32_t steps, int32_t arrivals, uint32_t seed) {
    const int32_t num_blocks = cached_blocks + 40000;
    scheduler s(config(num_blocks, caching));
    std::mt19937 rng(seed);
    auto random_tokens = [&](int32_t n) {
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (auto& x : t) x = static_cast<int32_t>(rng() % 150000);
        return t;
    };
    std::vector<std::vector<int32_t>> conversations;
    for (int32_t c = 0; c < kConversations; ++c) conversations.push_back(random_tokens(kSharedTokens));
    uint64_t next_id = 1;
    std::vector<std::vector<step_request>> in_flight;
    auto pump = [&]() {
        while (s.can_schedule() && s.has_pending_work()) in_flight.push_back(s.schedule());
        if (!in_flight.empty()) {
            s.update(fake_results(in_flight.front()));
            in_flight.erase(in_flight.begin());
        }
    };
    // Fill: distinct prompts of 256 tokens (16 blocks each) run to their end; with caching their blocks stay cached.
    // The conversations' shared prefixes are cached too (they are what arrivals hit).
    if (caching) {
        for (const auto& c : conversations) {
            new_request r;
            r.id = next_id++;
            r.prompt = c;
            r.prompt.push_back(1);
            r.max_tokens = 1;
            s.add_request(std::move(r));
        }
        while (s.stats().num_blocks_cached[0] < cached_blocks) {
            while (s.num_unfinished() < 256) {
                new_request r;
                r.id = next_id++;
                r.prompt = random_tokens(16 * kBlock + 1);
                r.max_tokens = 1;
                s.add_request(std::move(r));
            }
            pump();
        }
        while (s.num_unfinished() > 0 || s.num_in_flight() > 0) pump();
    }
    std::vector<double> times, walls;
    uint64_t queries0 = 0, hits0 = 0;
    {
        const auto st = s.stats();
        queries0 = st.prefix_cache_queries[0];
        hits0 = st.prefix_cache_hits[0];
    }
    // Pre-build the arrivals so that their token generation is not timed.
    std::vector<new_request> pending;
    auto make_arrival = [&]() {
        new_request r;
        r.id = next_id++;
        r.prompt = conversations[rng() % kConversations];
        const auto tail = random_tokens(kNewTokens);
        r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
        r.max_tokens = kOutputTokens;
        r.ignore_eos = true;
        return r;
    };
    for (int32_t i = 0; i < steps; ++i) {
        std::vector<new_request> batch;
        if (s.num_unfinished() < 256)
            for (int32_t a = 0; a < arrivals; ++a) batch.push_back(make_arrival());
        const auto t0 = clock_type::now();
        const double c0 = thread_cpu_us();
        for (auto& r : batch) s.add_request(std::move(r));
        pump();
        times.push_back(thread_cpu_us() - c0);
        walls.push_back(us_since(t0));
    }
    mode_result m;
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0;
    for (double t : times) sum += t;
    m.mean_step_us = sum / static_cast<double>(times.size());
    double wall = 0;
    for (double t : walls) wall += t;
    m.mean_wall_us = wall / static_cast<double>(walls.size());
    m.p50_step_us = sorted[sorted.size() / 2];
    m.p99_step_us = sorted[sorted.size() * 99 / 100];
    const auto st = s.stats();
    const double q = static_cast<double>(st.prefix_cache_queries[0] - queries0);
    m.prompt_tokens_cached_pct = q > 0 ? 100.0 * static_cast<double>(st.prefix_cache_hits[0] - hits0) / q : 0.0;
    m.cached_blocks_at_end = st.num_blocks_cached[0];
    m.evicted = st.num_blocks_evicted[0];
    return m;
}

/// ns (thread CPU time) per operation of the cache's primitives on a pool holding `cached_blocks` published blocks.
nlohmann::json primitives(int32_t cached_blocks) {
    const block_hasher hasher = block_hasher::random();
    kv_block_pool pool(cached_blocks, kBlock);
    std::vector<int32_t> ids = pool.block_alloc(cached_blocks).value();
    std::vector<int32_t> tokens(kBlock);
    std::iota(tokens.begin(), tokens.end(), 0);
    std::vector<block_hash> hashes(static_cast<size_t>(cached_blocks));
    double t0 = thread_cpu_us();
    block_hash parent{};
    for (int32_t i = 0; i < cached_blocks; ++i) {
        tokens[0] = i;
        parent = hasher.next(parent, tokens);
        hashes[static_cast<size_t>(i)] = parent;
    }
    const double hash_ns = 1000.0 * (thread_cpu_us() - t0) / cached_blocks;
    t0 = thread_cpu_us();
    for (int32_t i = 0; i < cached_blocks; ++i)
        pool.block_publish(ids[static_cast<size_t>(i)], hashes[static_cast<size_t>(i)]);
    const double publish_ns = 1000.0 * (thread_cpu_us() - t0) / cached_blocks;
    pool.block_free(ids);
    std::mt19937 rng(5);
    std::vector<int32_t> order(static_cast<size_t>(cached_blocks));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    t0 = thread_cpu_us();
    int64_t found = 0;
    for (int32_t i : order) found += pool.block_find(hashes[static_cast<size_t>(i)]) >= 0;
    const double find_ns = 1000.0 * (thread_cpu_us() - t0) / cached_blocks;
    // Share and release a random cached block (a hit's bookkeeping: out of the free queue and back to its tail).
    t0 = thread_cpu_us();
    for (int32_t i : order) {
        const int32_t id = pool.block_find(hashes[static_cast<size_t>(i)]);
        pool.block_share(std::span<const int32_t>(&id, 1));
        pool.block_free(std::span<const int32_t>(&id, 1));
    }
    const double share_ns = 1000.0 * (thread_cpu_us() - t0) / cached_blocks;
    // Allocation that evicts: every block is cached and free.
    t0 = thread_cpu_us();
    std::vector<int32_t> got;
    pool.block_alloc_into(cached_blocks, got);
    const double evict_ns = 1000.0 * (thread_cpu_us() - t0) / cached_blocks;
    if (found != cached_blocks || pool.num_cached() != 0) std::cerr << "primitives: unexpected pool state\n";
    return {{"hash_ns_per_block", hash_ns},
            {"publish_ns_per_block", publish_ns},
            {"find_ns_per_block", find_ns},
            {"share_and_release_ns_per_block", share_ns},
            {"evicting_alloc_ns_per_block", evict_ns}};
}

}  // namespace

int main(int argc, char** argv) {
    namespace po = boost::program_options;
    int32_t cached_blocks = 100000;
    int32_t steps = 2000;
    int32_t arrivals = 4;
    double step_ms = 17.225;
    std::string json_out;
    po::options_description desc("prefix_cache_bench");
    desc.add_options()("help", "this help")("cached-blocks", po::value(&cached_blocks), "cached blocks before timing")(
        "steps", po::value(&steps), "timed steps per mode")("arrivals", po::value(&arrivals),
                                                            "new requests per step while under 256 running")(
        "step-ms", po::value(&step_ms),
        "the step time to compare with (default: Qwen3-30B-A3B decode at batch 64 on one H200, docs/benchmarks.md)")(
        "json", po::value(&json_out), "write the results here");
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, desc), vm);
        po::notify(vm);
    } catch (const std::exception& e) {
        std::cerr << e.what() << "\n" << desc;
        return 2;
    }
    if (vm.count("help")) {
        std::cout << desc;
        return 0;
    }
    const nlohmann::json prim = primitives(cached_blocks);
    const mode_result on = run_mode(true, cached_blocks, steps, arrivals, 1);
    const mode_result off = run_mode(false, cached_blocks, steps, arrivals, 1);
    const double overhead_us = on.mean_step_us - off.mean_step_us;
    std::printf("prefix cache, %d cached blocks of %d tokens, %d steps, %d arrivals per step\n", cached_blocks, kBlock,
                steps, arrivals);
    std::printf("per step, engine-core thread CPU time (wall time beside it):\n");
    std::printf("%-10s %12s %12s %12s %12s %14s %12s\n", "mode", "mean us", "p50 us", "p99 us", "wall us",
                "prompt cached", "% of step");
    for (const auto& [name, m] : {std::pair<const char*, const mode_result&>{"cache on", on}, {"cache off", off}}) {
        std::printf("%-10s %12.1f %12.1f %12.1f %12.1f %13.1f%% %11.3f%%\n", name, m.mean_step_us, m.p50_step_us,
                    m.p99_step_us, m.mean_wall_us, m.prompt_tokens_cached_pct,
                    100.0 * m.mean_step_us / (step_ms * 1000.0));
    }
    std::printf("caching adds %.1f us per step = %.3f%% of a %.3f ms step\n", overhead_us,
                100.0 * overhead_us / (step_ms * 1000.0), step_ms);
    std::printf(
        "per block: hash %.0f ns, publish %.0f ns, find %.0f ns, share+release %.0f ns, evicting alloc %.0f ns\n",
        prim["hash_ns_per_block"].get<double>(), prim["publish_ns_per_block"].get<double>(),
        prim["find_ns_per_block"].get<double>(), prim["share_and_release_ns_per_block"].get<double>(),
        prim["evicting_alloc_ns_per_block"].get<double>());
    auto mode_json = [](const mode_result& m) {
        return nlohmann::json{{"mean_step_cpu_us", m.mean_step_us},
                              {"mean_step_wall_us", m.mean_wall_us},
                              {"p50_step_cpu_us", m.p50_step_us},
                              {"p99_step_cpu_us", m.p99_step_us},
                              {"prompt_tokens_cached_pct", m.prompt_tokens_cached_pct},
                              {"cached_blocks_at_end", m.cached_blocks_at_end},
                              {"blocks_evicted", m.evicted}};
    };
    const nlohmann::json out = {{"cached_blocks", cached_blocks},
                                {"block_size", kBlock},
                                {"steps", steps},
                                {"arrivals_per_step", arrivals},
                                {"step_ms_compared", step_ms},
                                {"cache_on", mode_json(on)},
                                {"cache_off", mode_json(off)},
                                {"overhead_us_per_step", overhead_us},
                                {"overhead_pct_of_step", 100.0 * overhead_us / (step_ms * 1000.0)},
                                {"cache_on_pct_of_step", 100.0 * on.mean_step_us / (step_ms * 1000.0)},
                                {"primitives", prim}};
    if (!json_out.empty()) {
        std::ofstream f(json_out);
        f << out.dump(2) << "\n";
        if (!f) {
            std::cerr << "cannot write " << json_out << "\n";
            return 1;
        }
    }
    return 0;
}
