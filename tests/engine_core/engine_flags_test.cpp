// Every engine flag takes effect in the actor that uses it: each test sets one flag on the command line (parsed as
// `zmoe engine-core` parses it), runs the real engine core and CPU workers in this process (inproc_engine.hpp) on
// a tiny checkpoint, and checks the behaviour the flag controls. Flags only a CUDA worker acts on are checked to
// arrive in the worker's configuration.

#include "cli/engine_flags.hpp"

#include <gtest/gtest.h>

#include <boost/program_options.hpp>
#include <numeric>
#include <thread>

#include "engine_core/engine_core.hpp"
#include "model/model_config.hpp"
#include "tests/engine_core/inproc_engine.hpp"
#include "workers/kv_cache.hpp"

namespace zmoe {
namespace {

namespace po = boost::program_options;

const std::string kModel = std::string(ZMOE_FIXTURES_DIR) + "/models/qwen3_moe";

/// The configuration `zmoe engine-core --model <fixture> <args>` runs with.
engine_config parse(std::vector<std::string> args) {
    engine_config c;
    po::options_description d;
    cli::add_engine_options(d, c);
    args.insert(args.begin(), {"--model", kModel});
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(d).run(), vm);
    po::notify(vm);
    return c;
}

std::vector<int32_t> prompt(int n, int32_t first = 3) {
    std::vector<int32_t> p(n);
    std::iota(p.begin(), p.end(), first);
    return p;
}

double gauge(const nlohmann::json& m, const std::string& name) {
    const auto& g = m["engine_core"]["gauges"];
    return g.contains(name) ? g[name].get<double>() : -1;
}
double counter(const nlohmann::json& m, const std::string& name) {
    const auto& c = m["engine_core"]["counters"];
    return c.contains(name) ? c[name].get<double>() : 0;
}

/// The welcome worker `rank` received.
worker_welcome welcome_of(test::inproc_engine& e, int rank = 0) {
    std::optional<worker_welcome> w;
    test::wait_until([&] { return (w = e.worker(rank).welcome()).has_value(); });
    EXPECT_TRUE(w.has_value());
    return w.value_or(worker_welcome{});
}

TEST(EngineFlags, CommandLineRoundTripsEveryFlag) {
    // serve/generate hand their configuration to the engine-core process as arguments: nothing is lost.
    const engine_config c = parse({"--device",
                                   "cuda",
                                   "--workers",
                                   "4",
                                   "--num-nodes",
                                   "2",
                                   "--max-num-batched-tokens",
                                   "100",
                                   "--max-num-seqs",
                                   "7",
                                   "--block-size",
                                   "8",
                                   "--num-kv-blocks",
                                   "9",
                                   "--max-model-len",
                                   "33",
                                   "--no-async",
                                   "--no-enable-prefix-caching",
                                   "--dp-placement",
                                   "round-robin",
                                   "--dp-placement-max-imbalance",
                                   "2",
                                   "--enable-eplb",
                                   "--eplb-interval",
                                   "5",
                                   "--eplb-window",
                                   "6",
                                   "--num-redundant-experts",
                                   "2",
                                   "--heartbeat-ms",
                                   "300",
                                   "--threads",
                                   "3",
                                   "--kv-cache-mb",
                                   "17",
                                   "--gpu-memory-utilization",
                                   "0.55",
                                   "--load-format",
                                   "dummy",
                                   "--quantization",
                                   "fp8",
                                   "--enforce-eager",
                                   "--allow-long-max-model-len",
                                   "--heartbeat-max-missed",
                                   "7"});
    EXPECT_EQ(c.device, "cuda");
    EXPECT_EQ(c.workers, 4);
    EXPECT_DOUBLE_EQ(c.gpu_memory_utilization, 0.55);
    std::vector<std::string> args = engine_config_args(c);
    engine_config back;
    po::options_description d;
    cli::add_engine_options(d, back);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(d).run(), vm);
    po::notify(vm);
    EXPECT_EQ(back, c);
    EXPECT_NE(back, engine_config{});
}

TEST(EngineFlags, Model) {
    test::inproc_engine e(parse({}));
    const auto w = e.wait_serving();
    ASSERT_TRUE(w);
    EXPECT_EQ(w->max_model_len, 512u);  // the fixture's max_position_embeddings, read by the engine core
    EXPECT_EQ(welcome_of(e).config.model, kModel);
    const auto r = e.run(1, prompt(5), 3);
    EXPECT_TRUE(r.finished);
    EXPECT_EQ(r.tokens.size(), 3u);
    engine_config missing = parse({});
    missing.model = kModel + "/no-such-dir";
    try {
        engine_core_actor a(engine_core_options{.worker_endpoint = {}, .frontend_endpoint = {}, .config = missing});
        ADD_FAILURE() << "a missing checkpoint was accepted";
    } catch (const error& ex) {
        EXPECT_EQ(ex.code(), errc::invalid_checkpoint) << ex.what();
    }
}

TEST(EngineFlags, Device) {
    // The engine core refuses a worker whose device is not the run's: it never starts serving.
    engine_config c = parse({"--device", "cuda"});
    test::inproc_engine e(c);  // its workers say hello as cuda workers
    const auto w = e.wait_serving(std::chrono::milliseconds(20000));
    if (w) {
        GTEST_SKIP() << "a CUDA device is visible: the cuda run started";
    }
    // A CPU-only build (or no GPU) fails the run with a clear error instead.
    ASSERT_TRUE(test::wait_until([&] { return !e.client().errors().empty() || e.engine().finished(); }));
    EXPECT_EQ(welcome_of(e).config.device, "cuda");
}

TEST(EngineFlags, Workers) {
    test::inproc_engine e(parse({"--workers", "2"}));
    const auto w = e.wait_serving();
    ASSERT_TRUE(w);
    EXPECT_EQ(w->num_workers, 2u);
    EXPECT_EQ(welcome_of(e, 1).config.workers, 2);
    EXPECT_EQ(welcome_of(e, 1).peer_endpoints.size(), 2u);
    for (uint64_t id = 1; id <= 2; ++id) {  // both at once: one to each rank
        engine_add_request r;
        r.request_id = id;
        r.prompt_token_ids = prompt(4, static_cast<int32_t>(id));
        r.max_tokens = 24;  // long enough that the second arrives while the first still runs on rank 0
        r.ignore_eos = true;
        e.client().add_request(r);
    }
    ASSERT_TRUE(test::wait_until([&] {
        auto a = e.client().request(1), b = e.client().request(2);
        return a && b && a->finished && b->finished;
    }));
    const auto m = e.client().metrics();
    EXPECT_EQ(gauge(m, "workers"), 2);
    EXPECT_TRUE(m.contains("worker_1"));
    // Requests spread over both ranks.
    EXPECT_GT(gauge(m, "tokens_scheduled_total{rank=\"0\"}"), 0);
    EXPECT_GT(gauge(m, "tokens_scheduled_total{rank=\"1\"}"), 0);
}

TEST(EngineFlags, NumNodes) {
    // Threads per worker divide a node's cores among that node's workers.
    EXPECT_EQ(engine_threads_per_worker(parse({"--workers", "4"}), 16), 4);
    EXPECT_EQ(engine_threads_per_worker(parse({"--workers", "4", "--num-nodes", "2"}), 16), 8);
    test::inproc_engine e(parse({"--workers", "2", "--num-nodes", "2"}));
    ASSERT_TRUE(e.wait_serving());
    EXPECT_EQ(welcome_of(e, 1).config.num_nodes, 2);
}

TEST(EngineFlags, MaxNumBatchedTokens) {
    auto steps_for_prefill = [](const std::string& budget) {
        test::inproc_engine e(parse({"--max-num-batched-tokens", budget}));
        EXPECT_TRUE(e.wait_serving());
        e.run(1, prompt(40), 1);
        const auto m = e.client().metrics();
        EXPECT_LE(m["engine_core"]["histograms"]["step_tokens"]["max"].get<double>(), std::stod(budget));
        return counter(m, "steps");
    };
    EXPECT_EQ(steps_for_prefill("2048"), 1);  // the whole prompt in one step
    EXPECT_EQ(steps_for_prefill("8"), 5);     // chunked prefill: 40 tokens in chunks of 8
}

TEST(EngineFlags, MaxNumSeqs) {
    test::inproc_engine e(parse({"--max-num-seqs", "1"}));
    const auto w = e.wait_serving();
    ASSERT_TRUE(w);
    EXPECT_EQ(w->max_num_seqs, 1u);
    for (uint64_t id = 1; id <= 2; ++id) {
        engine_add_request r;
        r.request_id = id;
        r.prompt_token_ids = prompt(3, static_cast<int32_t>(id));
        r.max_tokens = 4;
        r.ignore_eos = true;
        e.client().add_request(r);
    }
    ASSERT_TRUE(test::wait_until([&] {
        auto a = e.client().request(1), b = e.client().request(2);
        return a && b && a->finished && b->finished;
    }));
    // One running sequence at a time: no step produced tokens for both requests.
    for (const auto& o : e.client().outputs()) EXPECT_EQ(o.outputs.size(), 1u) << "step " << o.step_id;
}

TEST(EngineFlags, BlockSizeAndKvCacheMb) {
    const model_config model = model_config::load(kModel);
    auto blocks = [&](const std::vector<std::string>& args) {
        test::inproc_engine e(parse(args));
        const auto w = e.wait_serving();
        EXPECT_TRUE(w);
        return w ? w->num_kv_blocks : 0;
    };
    EXPECT_EQ(blocks({"--kv-cache-mb", "1"}), static_cast<uint64_t>(kv_cache::blocks_for_budget(model, 16, 1 << 20)));
    EXPECT_EQ(blocks({"--kv-cache-mb", "2"}), static_cast<uint64_t>(kv_cache::blocks_for_budget(model, 16, 2 << 20)));
    EXPECT_EQ(blocks({"--kv-cache-mb", "1", "--block-size", "4"}),
              static_cast<uint64_t>(kv_cache::blocks_for_budget(model, 4, 1 << 20)));
    EXPECT_GE(blocks({"--kv-cache-mb", "1", "--block-size", "4"}), 4 * blocks({"--kv-cache-mb", "1"}));
}

TEST(EngineFlags, NumKvBlocks) {
    test::inproc_engine e(parse({"--num-kv-blocks", "7", "--block-size", "4"}));
    const auto w = e.wait_serving();
    ASSERT_TRUE(w);
    EXPECT_EQ(w->num_kv_blocks, 7u);
    EXPECT_EQ(w->block_size, 4u);
    // 7 blocks of 4 tokens: a 22-token request fits, a 40-token one can never be scheduled and is refused.
    EXPECT_TRUE(e.run(1, prompt(20), 2).finished);
    const auto m = e.client().metrics();
    EXPECT_EQ(gauge(m, "kv_blocks_total{rank=\"0\"}"), 7);
    const auto refused = e.run(2, prompt(40), 2);
    EXPECT_TRUE(refused.finished);
    EXPECT_EQ(refused.reason, finish_reason::error);
}

TEST(EngineFlags, MaxModelLen) {
    test::inproc_engine e(parse({"--max-model-len", "16"}));
    const auto w = e.wait_serving();
    ASSERT_TRUE(w);
    EXPECT_EQ(w->max_model_len, 16u);
    const auto too_long = e.run(1, prompt(20), 2);
    EXPECT_EQ(too_long.reason, finish_reason::error);
    EXPECT_EQ(too_long.code, errc::invalid_argument) << too_long.message;
    EXPECT_TRUE(e.run(2, prompt(10), 2).finished);
}

TEST(EngineFlags, AllowLongMaxModelLen) {
    // Above the model's max_position_embeddings (512): refused at start-up, with the way out in the message ...
    {
        test::inproc_engine e(parse({"--max-model-len", "1000"}));
        EXPECT_FALSE(e.wait_serving());
        ASSERT_TRUE(test::wait_until([&] { return !e.client().errors().empty(); }));
        const std::string why = e.client().errors().front().message;
        EXPECT_NE(why.find("--allow-long-max-model-len"), std::string::npos) << why;
    }
    // ... and served with the flag: requests past the model's positions fit.
    test::inproc_engine e(parse({"--max-model-len", "1000", "--allow-long-max-model-len"}));
    const auto w = e.wait_serving();
    ASSERT_TRUE(w);
    EXPECT_EQ(w->max_model_len, 1000u);
    EXPECT_TRUE(welcome_of(e).config.allow_long_max_model_len);
    std::vector<int32_t> longer(520);
    for (size_t i = 0; i < longer.size(); ++i) longer[i] = 3 + static_cast<int32_t>(i % 400);  // ids in the vocabulary
    EXPECT_EQ(e.run(1, longer, 2).tokens.size(), 2u);
}

TEST(EngineFlags, NoAsync) {
    // A request stopped by a token the engine core only sees on arrival: with async scheduling the next step was
    // already computed for it (its token is discarded); synchronous scheduling computes nothing past the stop.
    const std::vector<int32_t> p = prompt(6);
    std::vector<int32_t> greedy;
    {
        test::inproc_engine e(parse({}));
        ASSERT_TRUE(e.wait_serving());
        greedy = e.run(1, p, 4).tokens;
        ASSERT_EQ(greedy.size(), 4u);
    }
    auto discarded = [&](const std::vector<std::string>& args) {
        test::inproc_engine e(parse(args));
        EXPECT_TRUE(e.wait_serving());
        engine_add_request r;
        r.request_id = 1;
        r.prompt_token_ids = p;
        r.max_tokens = 16;
        r.ignore_eos = true;
        r.stop_token_ids = {greedy[1]};
        e.client().add_request(r);
        EXPECT_TRUE(test::wait_until([&] {
            auto s = e.client().request(1);
            return s && s->finished;
        }));
        EXPECT_EQ(e.client().request(1)->reason, finish_reason::stop);
        // Let the last in-flight step come back before reading the count.
        test::wait_until([&] { return gauge(e.client().metrics(), "steps_in_flight") == 0; });
        return gauge(e.client().metrics(), "discarded_tokens");
    };
    EXPECT_GT(discarded({}), 0);
    EXPECT_EQ(discarded({"--no-async"}), 0);
}

TEST(EngineFlags, NoEnablePrefixCaching) {
    // The same 40-token prompt twice, one after the other: the second finds 32 tokens (2 blocks of 16) cached, and
    // produces the same tokens; with the flag nothing is looked up or found.
    for (const bool off : {false, true}) {
        test::inproc_engine e(
            parse(off ? std::vector<std::string>{"--no-enable-prefix-caching"} : std::vector<std::string>{}));
        ASSERT_TRUE(e.wait_serving());
        const auto first = e.run(1, prompt(40), 4);
        const auto second = e.run(2, prompt(40), 4);
        EXPECT_EQ(second.tokens, first.tokens);
        const auto m = e.client().metrics();
        EXPECT_EQ(counter(m, "prefix_cache_queries"), off ? 0 : 80);
        EXPECT_EQ(counter(m, "prefix_cache_hits"), off ? 0 : 32);
        EXPECT_DOUBLE_EQ(gauge(m, "prefix_cache_hit_rate"), off ? -1 : 32.0 / 80.0);  // -1: absent
        EXPECT_EQ(second.num_cached_tokens, off ? 0u : 32u);
    }
}

TEST(EngineFlags, DpPlacementAndMaxImbalance) {
    // Two ranks. Request 1 (a 49-token prompt) runs alone on rank 0 and leaves 3 blocks cached there; request 2, long
    // and unrelated, goes to rank 0 too (both ranks idle: the lower one), except under round-robin (rank 1); request
    // 3 shares request 1's 48-token prefix.
    struct outcome {
        double on_rank0;
        double decision;
        uint32_t cached;
    };
    auto run = [&](const std::vector<std::string>& flags, const std::string& decision) {
        std::vector<std::string> args = {"--workers", "2"};
        args.insert(args.end(), flags.begin(), flags.end());
        test::inproc_engine e(parse(args));
        EXPECT_TRUE(e.wait_serving());
        e.run(1, prompt(49), 2);
        engine_add_request busy;
        busy.request_id = 2;
        busy.prompt_token_ids = prompt(5, 200);
        busy.max_tokens = 100;
        busy.ignore_eos = true;
        e.client().add_request(busy);
        const auto third = e.run(3, prompt(50), 2);
        EXPECT_TRUE(test::wait_until([&] {
            auto r = e.client().request(2);
            return r && r->finished;
        }));
        const auto m = e.client().metrics();
        return outcome{counter(m, "requests_placed{rank=\"0\"}"),
                       counter(m, "dp_placements{decision=\"" + decision + "\"}"), third.num_cached_tokens};
    };
    // Cache-aware (the default): request 3 follows its prefix to rank 0, one request above rank 1, within the bound.
    const outcome aware = run({}, "cache_hit");
    EXPECT_EQ(aware.on_rank0, 3);
    EXPECT_EQ(aware.decision, 1);
    EXPECT_EQ(aware.cached, 48u);
    // A bound of 0: rank 0 is too loaded, request 3 goes to rank 1 and computes its whole prompt.
    const outcome bounded = run({"--dp-placement-max-imbalance", "0"}, "overloaded");
    EXPECT_EQ(bounded.on_rank0, 2);
    EXPECT_EQ(bounded.decision, 1);
    EXPECT_EQ(bounded.cached, 0u);
    const outcome least = run({"--dp-placement", "least-loaded"}, "least_loaded");
    EXPECT_EQ(least.on_rank0, 2);
    EXPECT_EQ(least.decision, 3);
    // Round-robin: ranks 0, 1, 0 whatever the cache holds.
    const outcome rr = run({"--dp-placement", "round-robin"}, "round_robin");
    EXPECT_EQ(rr.on_rank0, 2);
    EXPECT_EQ(rr.decision, 3);
    EXPECT_EQ(rr.cached, 48u);
}

TEST(EngineFlags, EnableEplbAndEplbInterval) {
    auto evaluations = [](const std::vector<std::string>& args) {
        test::inproc_engine e(parse(args));
        EXPECT_TRUE(e.wait_serving());
        e.run(1, prompt(8), 12);
        const auto m = e.client().metrics();
        return gauge(m, "eplb_balancedness_current") >= 0;  // set by every EPLB evaluation
    };
    EXPECT_FALSE(evaluations({"--eplb-interval", "2"}));
    EXPECT_TRUE(evaluations({"--enable-eplb", "--eplb-interval", "2"}));
    EXPECT_FALSE(evaluations({"--enable-eplb", "--eplb-interval", "1000"}));
}

TEST(EngineFlags, EplbWindow) {
    auto window_steps = [](const std::vector<std::string>& args) {
        test::inproc_engine e(parse(args));
        EXPECT_TRUE(e.wait_serving());
        e.run(1, prompt(4), 10);
        return gauge(e.client().metrics(), "eplb_load_window_steps");
    };
    EXPECT_EQ(window_steps({"--eplb-window", "3"}), 3);
    EXPECT_GE(window_steps({}), 10);
}

TEST(EngineFlags, NumRedundantExperts) {
    test::inproc_engine e(parse({"--workers", "2", "--num-redundant-experts", "2"}));
    ASSERT_TRUE(e.wait_serving());
    // The engine core decides the placement (8 experts + 2 replicas per layer) and every worker gets it.
    const auto m = e.client().metrics();
    const auto placement = m["eplb_placement"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(placement.size(), 2u);
    EXPECT_EQ(placement[0].size(), 10u);
    for (int r = 0; r < 2; ++r) EXPECT_EQ(welcome_of(e, r).expert_placement, placement) << "rank " << r;
    EXPECT_EQ(e.run(1, prompt(6), 4).tokens.size(), 4u);
}

/// Runs `concurrent` requests of prompt_len tokens and max_tokens new ones together; (steps run as two
/// micro-batches, steps).
std::pair<double, double> dbo_steps(const std::vector<std::string>& args, int prompt_len, int concurrent = 1,
                                    uint32_t max_tokens = 6) {
    test::inproc_engine e(parse(args));
    EXPECT_TRUE(e.wait_serving());
    for (int id = 1; id <= concurrent; ++id) {
        engine_add_request r;
        r.request_id = static_cast<uint64_t>(id);
        r.prompt_token_ids = prompt(prompt_len, id);
        r.max_tokens = max_tokens;
        r.ignore_eos = true;
        e.client().add_request(r);
    }
    EXPECT_TRUE(test::wait_until([&] {
        for (int id = 1; id <= concurrent; ++id) {
            auto s = e.client().request(static_cast<uint64_t>(id));
            if (!s || !s->finished) return false;
        }
        return true;
    }));
    const auto m = e.client().metrics();
    return {counter(m, "dbo_steps"), counter(m, "steps")};
}

TEST(EngineFlags, EnableDbo) {
    const std::vector<std::string> thresholds = {
        "--workers", "2", "--dbo-decode-token-threshold", "1", "--dbo-prefill-token-threshold", "1"};
    EXPECT_EQ(dbo_steps(thresholds, 8).first, 0);
    std::vector<std::string> on = thresholds;
    on.push_back("--enable-dbo");
    const auto [split, steps] = dbo_steps(on, 8);
    EXPECT_GT(steps, 0);
    EXPECT_EQ(split, steps);  // thresholds of 1: every step runs as two micro-batches
}

TEST(EngineFlags, DboPrefillTokenThreshold) {
    // Only the prompt's step can reach a prefill threshold of 10; decode steps (1 token) never reach 1000.
    const std::vector<std::string> args = {"--enable-dbo", "--dbo-decode-token-threshold", "1000",
                                           "--dbo-prefill-token-threshold", "10"};
    EXPECT_EQ(dbo_steps(args, 12).first, 1);
    EXPECT_EQ(dbo_steps(args, 8).first, 0);
}

TEST(EngineFlags, DboDecodeTokenThreshold) {
    // Two requests decoding together on one rank: decode steps of 2 tokens split at threshold 2, never at 3. Long
    // enough (48 tokens) that the second request arrives while the first still decodes.
    auto args = [](const std::string& threshold) {
        return std::vector<std::string>{"--enable-dbo", "--dbo-prefill-token-threshold",
                                        "100000",       "--dbo-decode-token-threshold",
                                        threshold,      "--no-async"};
    };
    EXPECT_GT(dbo_steps(args("2"), 4, 2, 48).first, 0);
    EXPECT_EQ(dbo_steps(args("3"), 4, 2, 48).first, 0);
}

TEST(EngineFlags, HeartbeatMs) {
    test::inproc_engine e(parse({"--heartbeat-ms", "250"}));
    const auto w = e.wait_serving();
    ASSERT_TRUE(w);
    EXPECT_EQ(w->heartbeat_interval_ms, 250u);
    EXPECT_EQ(welcome_of(e).config.heartbeat_ms, 250);
}

TEST(EngineFlags, HeartbeatMaxMissed) {
    // The engine core's own tolerance, and every worker's configuration (serve passes it to the worker and
    // frontend processes on their command lines; tests/cli/reliability_test.cpp stalls a worker against it).
    test::inproc_engine e(parse({"--heartbeat-max-missed", "7"}));
    ASSERT_TRUE(e.wait_serving());
    EXPECT_EQ(e.engine().options().heartbeat_max_missed, 7);
    EXPECT_EQ(welcome_of(e).config.heartbeat_max_missed, 7);
    EXPECT_EQ(parse({}).heartbeat_max_missed, 3);
}

TEST(EngineFlags, ThreadsAndGpuMemoryUtilization) {
    // --threads sizes the CPU kernel pool; --gpu-memory-utilization the CUDA worker's KV budget: both reach the
    // worker's configuration, which its executor reads (workers/step_executor.cpp, workers/cuda/).
    EXPECT_EQ(engine_threads_per_worker(parse({"--threads", "3"}), 64), 3);
    EXPECT_EQ(engine_threads_per_worker(parse({"--workers", "2"}), 64), 32);
    test::inproc_engine e(parse({"--threads", "1", "--gpu-memory-utilization", "0.4"}));
    ASSERT_TRUE(e.wait_serving());
    const worker_welcome w = welcome_of(e);
    EXPECT_EQ(w.config.threads, 1);
    EXPECT_DOUBLE_EQ(w.config.gpu_memory_utilization, 0.4);
    EXPECT_TRUE(e.run(1, prompt(4), 2).finished);
}

TEST(EngineFlags, LoadFormat) {
    // The worker reads it: the CPU backend generates dummy weights from config.json and serves with them.
    test::inproc_engine e(parse({"--load-format", "dummy"}));
    ASSERT_TRUE(e.wait_serving());
    EXPECT_EQ(welcome_of(e).config.load_format, "dummy");
    EXPECT_TRUE(e.run(1, prompt(4), 2).finished);
}

TEST(EngineFlags, Quantization) {
    // The worker reads it: the CPU backend quantizes the BF16 fixture to block-scaled FP8 at load and serves with it.
    EXPECT_EQ(parse({}).quantization, "");
    {  // the default (empty: the checkpoint's own format) survives the engine-core command line too
        std::vector<std::string> args = engine_config_args(parse({}));
        engine_config back;
        po::options_description d;
        cli::add_engine_options(d, back);
        po::variables_map vm;
        po::store(po::command_line_parser(args).options(d).run(), vm);
        po::notify(vm);
        EXPECT_EQ(back, parse({}));
    }
    test::inproc_engine e(parse({"--quantization", "fp8"}));
    ASSERT_TRUE(e.wait_serving());
    EXPECT_EQ(welcome_of(e).config.quantization, "fp8");
    EXPECT_TRUE(e.run(1, prompt(4), 2).finished);
}

TEST(EngineFlags, EpTransport) {
    // CUDA only (the MoE exchange between GPUs): the value reaches the worker's configuration, which the CUDA
    // executor reads; a value other than auto or nccl is refused, naming it, before the engine serves.
    EXPECT_EQ(parse({}).ep_transport, "auto");
    EXPECT_EQ(ep_transport_mode_of("auto"), ep_transport_mode::automatic);
    EXPECT_EQ(ep_transport_mode_of("nccl"), ep_transport_mode::nccl);
    {
        test::inproc_engine e(parse({"--workers", "2", "--ep-transport", "nccl"}));
        ASSERT_TRUE(e.wait_serving());
        EXPECT_EQ(welcome_of(e, 1).config.ep_transport, "nccl");
        EXPECT_TRUE(e.run(1, prompt(4), 2).finished);
    }
    try {
        ep_transport_mode_of("p2p");
        ADD_FAILURE() << "--ep-transport p2p accepted";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("'p2p'"), std::string::npos) << e.what();
    }
    struct no_sink final : engine_core_sink {
        size_t send_step(int32_t, const step_request&) override { return 0; }
        void send_expert_move(const worker_expert_move&) override {}
        void send_outputs(const engine_outputs&) override {}
    } sink;
    EXPECT_THROW(engine_core(parse({"--ep-transport", "p2p"}), model_config::load(kModel), sink), error);
}

TEST(EngineFlags, EnforceEager) {
    // CUDA only (no decode graphs): the value reaches the worker's configuration, which the CUDA executor reads.
    test::inproc_engine e(parse({"--enforce-eager"}));
    ASSERT_TRUE(e.wait_serving());
    EXPECT_TRUE(welcome_of(e).config.enforce_eager);
    EXPECT_FALSE(parse({}).enforce_eager);
}

}  // namespace
}  // namespace zmoe
