// `zmoe bench ep`: expert parallelism on CUDA, offline (no actors; one thread and one GPU per rank, NCCL between
// them). Prints tables and writes JSON with:
// - the MoE exchange alone at --exchange-tokens per rank (measure_ep_exchange): the fixed-capacity path's dispatch +
//   combine per layer replayed as a CUDA graph, each half eagerly, and the exact (host-planned) path's halves;
// - decode step times at --batch sequences per GPU on 1 GPU and on --workers GPUs, with dual-batch overlap off and
//   forced on, and the same steps with the exchange's transfers replaced by local copies (the exchange skipped):
//   output tok/s per GPU, scaling over 1 GPU, and the share of the exchange time DBO hides,
//   (off - on) / (off - skipped).
//
//   zmoe bench ep --model DIR --load-format dummy [--workers 2] [--batch 256] [--context 128] [--json OUT]

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "cli/cmd_bench.hpp"
#include "cli/options.hpp"
#include "messages/expert_placement.hpp"
#include "workers/ep_exchange_timing.hpp"
#include "workers/step_executor.hpp"

namespace {

namespace po = boost::program_options;
using zmoe::model_config;

struct options {
    std::string model;
    std::string load_format = "dummy";
    int workers = 2;
    int batch = 256;
    int context = 128;
    int steps = 16;
    int warmup = 3;
    int block_size = 16;
    int max_num_batched_tokens = 4096;
    int exchange_tokens = 128;
    double capacity_factor = 0;
    bool skip_single = false;
    bool exchange_only = false;
    std::string json;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

struct phase {
    int world = 1;
    bool dual = false;
    bool skipped = false;  ///< the exchange's transfers replaced by local copies
    std::vector<double> ms{};
};

/// `world` ranks (threads), each with --batch sequences of --context tokens: prefill, then for each entry of
/// `duals` warmup + steps decode steps with step_request::dual_batch set to it. Step times are rank 0's.
std::vector<phase> run_world(const options& o, const model_config& cfg, int world, bool skipped,
                             const std::vector<bool>& duals) {
    zmoe::engine_config run;
    run.model = o.model;
    run.device = "cuda";
    run.workers = world;
    run.block_size = o.block_size;
    run.max_num_seqs = o.batch;
    run.max_num_batched_tokens = std::max(o.max_num_batched_tokens, o.batch);
    const int32_t len = o.context + static_cast<int32_t>(duals.size()) * (o.warmup + o.steps) + 2;
    run.max_model_len = len;
    run.load_format = o.load_format;
    const int64_t blocks_per_seq = (len + o.block_size - 1) / o.block_size;
    run.num_kv_blocks = blocks_per_seq * o.batch;
    const auto placement = zmoe::expert_placement::initial(cfg.num_moe_layers(), cfg.num_experts, 0, world);
    const std::string id = world > 1 ? zmoe::make_collective_id("cuda") : std::string();
    std::vector<phase> phases;
    for (bool d : duals) phases.push_back({.world = world, .dual = d, .skipped = skipped});
    std::vector<std::string> errors(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
            try {
                zmoe::executor_options eo;
                eo.config = run;
                eo.model = cfg;
                eo.rank = r;
                eo.collective_id = id;
                eo.ep_capacity_factor = o.capacity_factor;
                eo.ep_skip_transfers = skipped;
                auto ex = zmoe::make_step_executor(eo, placement);
                std::mt19937 rng(1234 + r);
                std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cfg.vocab_size - 1));
                std::vector<zmoe::scheduled_seq> seqs(o.batch);
                for (int32_t i = 0; i < o.batch; ++i) {
                    seqs[i].request_id = static_cast<uint64_t>(i + 1);
                    seqs[i].block_table.resize(blocks_per_seq);
                    std::iota(seqs[i].block_table.begin(), seqs[i].block_table.end(),
                              static_cast<int32_t>(i * blocks_per_seq));
                }
                uint64_t step_id = 0;
                const int32_t chunk = std::max(1, run.max_num_batched_tokens / o.batch);
                for (int32_t pos = 0; pos < o.context; pos += chunk) {
                    const int32_t n = std::min(chunk, o.context - pos);
                    zmoe::step_request q;
                    q.step_id = step_id++;
                    for (const auto& s : seqs) {
                        zmoe::scheduled_seq x = s;
                        x.start_pos = pos;
                        x.token_ids.resize(n);
                        for (auto& t : x.token_ids) t = token(rng);
                        x.do_sample = pos + n == o.context;
                        q.seqs.push_back(std::move(x));
                    }
                    ex->execute(q);
                }
                int32_t generated = 0;
                for (phase& ph : phases)
                    for (int i = 0; i < o.warmup + o.steps; ++i, ++generated) {
                        zmoe::step_request q;
                        q.step_id = step_id++;
                        q.dual_batch = ph.dual;
                        for (const auto& s : seqs) {
                            zmoe::scheduled_seq x = s;
                            x.start_pos = o.context + generated;
                            x.token_ids = {zmoe::kPlaceholderToken};
                            x.do_sample = true;
                            x.sample_index = static_cast<uint32_t>(generated + 1);
                            q.seqs.push_back(std::move(x));
                        }
                        const auto t0 = std::chrono::steady_clock::now();
                        ex->execute(q);
                        const double ms =
                            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                        if (r == 0 && i >= o.warmup) ph.ms.push_back(ms);
                    }
            } catch (const std::exception& e) {
                errors[r] = e.what();  // the other ranks then hang in NCCL: the caller's timeout reports it
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r)
        if (!errors[r].empty())
            throw zmoe::error(zmoe::errc::internal,
                              "world " + std::to_string(world) + " rank " + std::to_string(r) + ": " + errors[r]);
    return phases;
}

int run(int argc, char** argv) {
    options o;
    po::options_description desc("zmoe bench ep: expert-parallel exchange and decode steps on CUDA GPUs");
    desc.add_options()("model", po::value(&o.model)->required(), "model directory (config.json; weights unless dummy)")(
        "load-format", po::value(&o.load_format)->default_value(o.load_format), "auto or dummy")(
        "workers", po::value(&o.workers)->default_value(o.workers), "GPUs of the expert-parallel runs")(
        "batch", po::value(&o.batch)->default_value(o.batch), "decode sequences per GPU")(
        "context", po::value(&o.context)->default_value(o.context), "prompt tokens per sequence")(
        "steps", po::value(&o.steps)->default_value(o.steps), "timed decode steps per configuration")(
        "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed decode steps before them")(
        "block-size", po::value(&o.block_size)->default_value(o.block_size), "KV block size")(
        "max-num-batched-tokens", po::value(&o.max_num_batched_tokens)->default_value(o.max_num_batched_tokens),
        "prefill tokens per step")("exchange-tokens", po::value(&o.exchange_tokens)->default_value(o.exchange_tokens),
                                   "tokens per rank of the exchange-only timing")(
        "capacity-factor", po::value(&o.capacity_factor)->default_value(o.capacity_factor),
        "fixed exchange window over the even share (0: the executor's default)")(
        "skip-single", po::bool_switch(&o.skip_single), "no 1-GPU run")(
        "exchange-only", po::bool_switch(&o.exchange_only), "only the exchange timing (no decode steps)")(
        "json", po::value(&o.json), "write the results as JSON to this file");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, desc, vm)) return 0;
    if (o.workers < 2 || o.batch < 1 || o.context < 1 || o.steps < 1 || o.warmup < 0)
        throw zmoe::error(zmoe::errc::invalid_argument, "--workers >= 2, --batch, --context, --steps >= 1");
    const model_config cfg = model_config::load(o.model);
    nlohmann::json j = {{"model", o.model},
                        {"model_type", zmoe::model_arch_name(cfg.arch)},
                        {"load_format", o.load_format},
                        {"workers", o.workers},
                        {"batch_per_gpu", o.batch},
                        {"context", o.context},
                        {"steps", o.steps},
                        {"warmup", o.warmup}};

#ifdef ZMOE_WITH_CUDA
    const double factor = o.capacity_factor > 0 ? o.capacity_factor : 1.25;  // the executor's default
    const auto ex = zmoe::measure_ep_exchange({.world = o.workers,
                                               .tokens = o.exchange_tokens,
                                               .hidden = static_cast<int32_t>(cfg.hidden_size),
                                               .top_k = static_cast<int32_t>(cfg.num_experts_per_tok),
                                               .num_experts = static_cast<int32_t>(cfg.num_experts),
                                               .capacity_factor = factor});
    std::printf("\nzmoe bench ep: MoE exchange per layer, %d tokens per rank, %d GPUs, hidden %ld, top-%ld of %ld\n",
                o.exchange_tokens, o.workers, static_cast<long>(cfg.hidden_size),
                static_cast<long>(cfg.num_experts_per_tok), static_cast<long>(cfg.num_experts));
    std::printf("%5s %9s %16s %13s %13s %13s %13s %12s %12s\n", "rank", "capacity", "fixed graph d+c", "fixed disp",
                "fixed comb", "exact disp", "exact comb", "fixed MiB", "exact MiB");
    nlohmann::json jex = nlohmann::json::array();
    for (const auto& t : ex) {
        std::printf("%5d %9d %14.1fus %11.1fus %11.1fus %11.1fus %11.1fus %12.2f %12.2f\n", t.rank, t.capacity,
                    t.fixed_graph_us, t.fixed_dispatch_us, t.fixed_combine_us, t.exact_dispatch_us, t.exact_combine_us,
                    t.fixed_send_bytes / 1048576.0, t.exact_send_bytes / 1048576.0);
        jex.push_back({{"rank", t.rank},
                       {"capacity_rows_per_rank", t.capacity},
                       {"fixed_graph_dispatch_combine_us", t.fixed_graph_us},
                       {"fixed_dispatch_us", t.fixed_dispatch_us},
                       {"fixed_combine_us", t.fixed_combine_us},
                       {"exact_dispatch_us", t.exact_dispatch_us},
                       {"exact_combine_us", t.exact_combine_us},
                       {"fixed_send_bytes", t.fixed_send_bytes},
                       {"exact_send_bytes", t.exact_send_bytes}});
    }
    std::fflush(stdout);
    j["exchange"] = {{"tokens_per_rank", o.exchange_tokens}, {"capacity_factor", factor}, {"ranks", jex}};
#endif

    if (o.exchange_only) {
        if (!o.json.empty()) std::ofstream(o.json) << j.dump(2) << "\n";
        return 0;
    }
    std::vector<phase> phases;
    if (!o.skip_single) {
        std::fprintf(stderr, "1 GPU...\n");
        for (auto& p : run_world(o, cfg, 1, false, {false})) phases.push_back(p);
    }
    std::fprintf(stderr, "%d GPUs...\n", o.workers);
    for (auto& p : run_world(o, cfg, o.workers, false, {false, true})) phases.push_back(p);
    std::fprintf(stderr, "%d GPUs, exchange skipped...\n", o.workers);
    for (auto& p : run_world(o, cfg, o.workers, true, {false, true})) phases.push_back(p);

    double single_tps = 0, off_ms = 0, on_ms = 0, skip_ms = 0;
    std::printf("\nzmoe bench ep: decode steps, %d sequences per GPU, context %d, %d timed steps\n", o.batch, o.context,
                o.steps);
    std::printf("%5s %5s %10s %12s %14s %12s %12s\n", "GPUs", "DBO", "exchange", "ms/step", "tok/s per GPU",
                "tok/s total", "vs 1 GPU");
    nlohmann::json jsteps = nlohmann::json::array();
    for (const phase& p : phases) {
        const double ms = median(p.ms), tps = o.batch / ms * 1e3;
        if (p.world == 1) single_tps = tps;
        if (p.world > 1 && !p.skipped) (p.dual ? on_ms : off_ms) = ms;
        if (p.world > 1 && p.skipped && !p.dual) skip_ms = ms;
        const double scaling = single_tps > 0 ? tps / single_tps : 0;
        std::printf("%5d %5s %10s %12.3f %14.0f %12.0f %11.0f%%\n", p.world, p.dual ? "on" : "off",
                    p.world == 1 ? "-"
                    : p.skipped  ? "skipped"
                                 : "nccl",
                    ms, tps, tps * p.world, 100 * scaling);
        jsteps.push_back({{"gpus", p.world},
                          {"dbo", p.dual},
                          {"exchange_skipped", p.skipped},
                          {"median_step_ms", ms},
                          {"tok_per_s_per_gpu", tps},
                          {"tok_per_s_total", tps * p.world},
                          {"per_gpu_vs_single", scaling},
                          {"step_ms", p.ms}});
    }
    const double exchange_ms = off_ms - skip_ms;
    const double hidden = exchange_ms > 0 ? (off_ms - on_ms) / exchange_ms : 0;
    std::printf("\nexchange time per step (DBO off - skipped): %.3f ms; DBO on saves %.3f ms = %.0f%% of it hidden\n",
                exchange_ms, off_ms - on_ms, 100 * hidden);
    j["steps"] = jsteps;
    j["dbo"] = {{"off_ms", off_ms},
                {"on_ms", on_ms},
                {"skipped_ms", skip_ms},
                {"exchange_ms", exchange_ms},
                {"hidden_fraction", hidden}};
    if (!o.json.empty()) std::ofstream(o.json) << j.dump(2) << "\n";
    return 0;
}

}  // namespace

ZMOE_BENCH_MODE("ep", "expert parallelism on CUDA: exchange per layer, DBO on/off/skipped, 1 vs N GPUs", run);
