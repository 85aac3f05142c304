// `zmoe bench ep`: expert parallelism on CUDA, offline (no actors; one thread and one GPU per rank, NCCL between
// them). Prints tables and writes JSON with:
// - the MoE exchange alone at --exchange-tokens per rank (measure_ep_exchange): the fixed-capacity path's dispatch +
//   combine per layer, peer to peer (the default on one host) and over NCCL send/recv, each replayed as a CUDA
//   graph and each half eagerly; the exact (host-planned) path's halves; and the floor, a copy-engine copy of the
//   same remote bytes to the peer and back; each with the BF16 dispatch and the FP8 dispatch (an FP8 model's: e4m3
//   records with their scales, quantized on the way), and the FP8 / BF16 ratios;
// - decode step times at --batch sequences per GPU on 1 GPU and on --workers GPUs, with dual-batch overlap off and
//   forced on: output tok/s per GPU, scaling over 1 GPU, and what DBO saves (off - on);
// - with --prefill-tokens N1,N2,..., the same for prefill steps of each N tokens per GPU (N / --context sequences),
//   eagerly, every step on the fixed exchange: where dual-batch overlap can pay (compute-bound GEMMs).
//
// Decode steps print their memory floor beside them (model/step_floor.hpp: the dense weights, the KV cache and the
// rank's even share of the experts the step's tokens touched, at the copy bandwidth measured first). --device cpu
// runs the same steps on CPU ranks (threads, exchanging in process): no exchange timing there.
//
//   zmoe bench ep --model DIR --load-format dummy [--device cuda|cpu] [--quantization fp8] [--workers 2]
//       [--batch 256] [--context 128] [--exchange-tokens 128,256] [--skip-single] [--skip-dbo] [--json OUT]

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
#include "base/stats.hpp"
#include "cli/bench_ep_exchange.hpp"
#include "cli/cmd_bench.hpp"
#include "cli/options.hpp"
#include "messages/expert_placement.hpp"
#include "model/step_floor.hpp"
#include "workers/inproc_expert_comm.hpp"
#include "workers/step_executor.hpp"

namespace {

namespace po = boost::program_options;
using zmoe::model_config;

struct options {
    std::string model;
    std::string device = "cuda";
    std::string load_format = "dummy";
    std::string quantization;  ///< engine_config::quantization ("fp8": quantize the weights at load)
    int workers = 2;
    int batch = 256;
    int context = 128;
    int steps = 16;
    int warmup = 3;
    int block_size = 16;
    int max_num_batched_tokens = 4096;
    std::string exchange_tokens = "128";  ///< comma list: one exchange timing per size
    std::string prefill_tokens;  ///< non-empty: prefill steps of these token counts per rank instead of decode steps
    std::vector<int32_t> prefill{};  ///< parsed
    double capacity_factor = 0;
    int comm_sms = 0;  ///< executor_options::ep_comm_sms (0: the executor's default)
    bool skip_single = false;
    bool skip_dbo = false;
    bool skip_exchange = false;
    bool exchange_only = false;
    std::string json;
};

struct phase {
    int world = 1;
    bool dual = false;
    int32_t tokens = 0;  ///< per rank and step
    std::vector<double> ms{};
    /// Decode: each timed step's memory floor in ms (rank 0's bytes: step_floor_model with the experts the step's
    /// tokens touched on any rank, split evenly over the ranks, as the engine core's served floor counts them).
    std::vector<double> floor_ms{};
};

/// `world` ranks (threads), each with --batch sequences of --context tokens: prefill, then for each of `phases`
/// (dual, tokens) warmup + steps decode steps with step_request::dual_batch = dual; with --prefill-tokens, each
/// phase's steps are instead prefills of tokens / --context sequences (new requests, the same KV blocks). Step
/// times are rank 0's. CPU: the ranks exchange through an in-process hub (inproc_expert_comm). `bandwidth`: the copy
/// bandwidth (bytes/s) the decode floors are computed against.
std::vector<phase> run_world(const options& o, const model_config& cfg, int world, std::vector<phase> phases,
                             double bandwidth) {
    zmoe::engine_config run;
    run.model = o.model;
    run.device = o.device;
    run.quantization = o.quantization;
    run.workers = world;
    run.block_size = o.block_size;
    run.max_num_seqs = o.batch;
    run.max_num_batched_tokens = std::max(o.max_num_batched_tokens, o.batch);
    if (!o.prefill.empty()) {
        // Prefill steps of up to --batch sequences x --context tokens, eager, with every step on the fixed exchange
        // (its windows hold a whole step per micro-batch): what dual-batch overlap can overlap.
        run.max_num_batched_tokens = o.batch * o.context;
        run.max_num_seqs = run.max_num_batched_tokens;
        run.enforce_eager = true;
    }
    const int32_t len = o.context + static_cast<int32_t>(phases.size()) * (o.warmup + o.steps) + 2;
    run.max_model_len = len;
    run.load_format = o.load_format;
    const int64_t blocks_per_seq = (len + o.block_size - 1) / o.block_size;
    run.num_kv_blocks = blocks_per_seq * o.batch;
    const auto placement = zmoe::expert_placement::initial(cfg.num_moe_layers(), cfg.num_experts, 0, world);
    const std::string id = world > 1 ? zmoe::make_collective_id(o.device) : std::string();
    for (phase& p : phases) p.world = world;
    std::vector<std::string> errors(world);
    zmoe::inproc_expert_hub hub(world);  // CPU ranks' exchange
    // Decode: every rank's expert counts of each timed step ([rank][phase][step]), and rank 0's KV positions.
    std::vector<std::vector<std::vector<std::vector<uint32_t>>>> counts(
        world, std::vector<std::vector<std::vector<uint32_t>>>(phases.size()));
    std::vector<std::vector<int64_t>> kv_positions(phases.size());
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
            try {
                zmoe::inproc_expert_comm comm(hub, r);
                zmoe::executor_options eo;
                eo.config = run;
                eo.model = cfg;
                eo.rank = r;
                if (o.device == "cpu") eo.comm = &comm;
                eo.collective_id = id;
                eo.ep_capacity_factor = o.capacity_factor;
                eo.ep_comm_sms = o.comm_sms;
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
                uint64_t next_id = static_cast<uint64_t>(o.batch) + 1;
                for (size_t pi = 0; pi < phases.size(); ++pi) {
                    phase& ph = phases[pi];
                    for (int i = 0; i < o.warmup + o.steps; ++i) {
                        zmoe::step_request q;
                        q.step_id = step_id++;
                        q.dual_batch = ph.dual;
                        if (!o.prefill.empty()) {
                            // The whole prompt again, as new requests (the same KV blocks), in one step.
                            for (int32_t k = 0; k < std::max(1, ph.tokens / o.context); ++k) {
                                zmoe::scheduled_seq x = seqs[k];
                                x.request_id = next_id++;
                                x.start_pos = 0;
                                x.token_ids.resize(o.context);
                                for (auto& t : x.token_ids) t = token(rng);
                                x.do_sample = true;
                                q.seqs.push_back(std::move(x));
                            }
                        } else {
                            for (const auto& s : seqs) {
                                zmoe::scheduled_seq x = s;
                                x.start_pos = o.context + generated;
                                x.token_ids = {zmoe::kPlaceholderToken};
                                x.do_sample = true;
                                x.sample_index = static_cast<uint32_t>(generated + 1);
                                q.seqs.push_back(std::move(x));
                            }
                            ++generated;
                        }
                        const auto t0 = std::chrono::steady_clock::now();
                        const zmoe::step_result res = ex->execute(q);
                        const double ms =
                            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                        if (i < o.warmup) continue;
                        if (r == 0) ph.ms.push_back(ms);
                        if (o.prefill.empty()) {
                            counts[r][pi].push_back(res.expert_counts);
                            if (r == 0)  // every sequence at context + generated positions after this step
                                kv_positions[pi].push_back(static_cast<int64_t>(o.batch) * (o.context + generated));
                        }
                    }
                }
            } catch (const std::exception& e) {
                errors[r] = e.what();  // CUDA: the other ranks then hang in NCCL: the caller's timeout reports it
                hub.abort();           // CPU: the others' exchanges fail instead of waiting
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r)
        if (!errors[r].empty())
            throw zmoe::error(zmoe::errc::internal,
                              "world " + std::to_string(world) + " rank " + std::to_string(r) + ": " + errors[r]);
    // The decode floors: rank 0 reads the dense weights, its sequences' KV cache and its share of the experts that
    // some rank's tokens touched (all ranks' counts summed).
    const zmoe::step_floor_model floor_model = zmoe::step_floor_model::of(cfg, o.quantization);
    for (size_t pi = 0; pi < phases.size() && bandwidth > 0; ++pi)
        for (size_t i = 0; i < kv_positions[pi].size(); ++i) {
            std::vector<uint32_t> sum;
            for (int r = 0; r < world; ++r) {
                const auto& c = counts[r][pi][i];
                if (sum.size() < c.size()) sum.resize(c.size(), 0);
                for (size_t e = 0; e < c.size(); ++e) sum[e] += c[e];
            }
            const double expert_share =
                static_cast<double>(zmoe::experts_touched(sum)) * static_cast<double>(floor_model.expert_bytes) / world;
            phases[pi].floor_ms.push_back((floor_model.bytes(0, kv_positions[pi][i]) + expert_share) / bandwidth * 1e3);
        }
    return phases;
}

#ifdef ZMOE_WITH_CUDA
/// The MoE exchange alone at `tokens` per rank on --workers GPUs, BF16 and FP8 dispatch: printed, and returned as
/// the JSON object of one exchange size.
nlohmann::json exchange_section(const options& o, const model_config& cfg, int32_t tokens) {
    // capacity_factor 0: the executor's default window (workers/ep_capacity.hpp). The dispatch both ways: BF16 rows,
    // and FP8 records (an FP8 model's dispatch: e4m3 codes + one fp32 scale per 128 channels); the combine is BF16.
    std::vector<std::vector<zmoe::ep_exchange_timing>> by_dtype;
    for (const bool fp8 : {false, true})
        by_dtype.push_back(zmoe::measure_ep_exchange({.world = o.workers,
                                                      .tokens = tokens,
                                                      .hidden = static_cast<int32_t>(cfg.hidden_size),
                                                      .top_k = static_cast<int32_t>(cfg.num_experts_per_tok),
                                                      .num_experts = static_cast<int32_t>(cfg.num_experts),
                                                      .capacity_factor = o.capacity_factor,
                                                      .fp8_dispatch = fp8}));
    std::printf("\nzmoe bench ep: MoE exchange per layer, %d tokens per rank, %d GPUs, hidden %ld, top-%ld of %ld\n",
                tokens, o.workers, static_cast<long>(cfg.hidden_size), static_cast<long>(cfg.num_experts_per_tok),
                static_cast<long>(cfg.num_experts));
    std::printf("%5s %5s %9s | %-38s | %-38s | %-25s | %9s %9s %9s\n", "", "", "", "fixed, peer to peer (default)",
                "fixed, NCCL send/recv", "exact (host plan), NCCL", "floor", "", "");
    std::printf("%5s %5s %9s | %12s %12s %12s | %12s %12s %12s | %12s %12s | %9s %9s %9s\n", "rank", "disp", "capacity",
                "graph d+c", "dispatch", "combine", "graph d+c", "dispatch", "combine", "dispatch", "combine",
                "copy d+c", "fixed MiB", "exact MiB");
    auto rank_json = [](const zmoe::ep_exchange_timing& t) {
        return nlohmann::json{{"rank", t.rank},
                              {"dispatch_dtype", t.fp8_dispatch ? "fp8" : "bf16"},
                              {"capacity_rows_per_rank", t.capacity},
                              {"p2p_available", t.p2p_available},
                              {"p2p_graph_dispatch_combine_us", t.p2p_graph_us},
                              {"p2p_dispatch_us", t.p2p_dispatch_us},
                              {"p2p_combine_us", t.p2p_combine_us},
                              {"fixed_graph_dispatch_combine_us", t.fixed_graph_us},
                              {"fixed_dispatch_us", t.fixed_dispatch_us},
                              {"fixed_combine_us", t.fixed_combine_us},
                              {"exact_dispatch_us", t.exact_dispatch_us},
                              {"exact_combine_us", t.exact_combine_us},
                              {"peer_copy_floor_us", t.peer_copy_floor_us},
                              {"fixed_send_bytes", t.fixed_send_bytes},
                              {"exact_send_bytes", t.exact_send_bytes},
                              {"exact_combine_bytes", t.exact_combine_bytes}};
    };
    nlohmann::json jdt[2] = {nlohmann::json::array(), nlohmann::json::array()};
    for (size_t d = 0; d < by_dtype.size(); ++d)
        for (const auto& t : by_dtype[d]) {
            std::printf(
                "%5d %5s %9d | %10.1fus %10.1fus %10.1fus | %10.1fus %10.1fus %10.1fus | %10.1fus %10.1fus | "
                "%7.1fus %9.2f %9.2f\n",
                t.rank, t.fp8_dispatch ? "fp8" : "bf16", t.capacity, t.p2p_graph_us, t.p2p_dispatch_us,
                t.p2p_combine_us, t.fixed_graph_us, t.fixed_dispatch_us, t.fixed_combine_us, t.exact_dispatch_us,
                t.exact_combine_us, t.peer_copy_floor_us, t.fixed_send_bytes / 1048576.0,
                t.exact_send_bytes / 1048576.0);
            jdt[d].push_back(rank_json(t));
        }
    // FP8 against BF16 dispatch, rank by rank: the dispatch alone (eager) per path, and the dispatch bytes.
    std::printf("\nFP8 vs BF16 dispatch, per layer (fp8 / bf16)\n");
    std::printf("%5s | %-38s | %-27s | %-27s | %9s\n", "", "peer to peer: graph d+c, dispatch", "NCCL fixed: dispatch",
                "exact: dispatch", "");
    std::printf("%5s | %8s %8s %8s %8s %3s | %8s %8s %9s | %8s %8s %9s | %9s\n", "rank", "bf16 us", "fp8 us", "bf16 us",
                "fp8 us", "", "bf16 us", "fp8 us", "ratio", "bf16 us", "fp8 us", "ratio", "bytes");
    nlohmann::json jcmp = nlohmann::json::array();
    auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
    for (size_t i = 0; i < by_dtype[0].size(); ++i) {
        const auto &b = by_dtype[0][i], &f = by_dtype[1][i];
        std::printf("%5d | %8.1f %8.1f %8.1f %8.1f %3s | %8.1f %8.1f %8.2fx | %8.1f %8.1f %8.2fx | %8.3fx\n", b.rank,
                    b.p2p_graph_us, f.p2p_graph_us, b.p2p_dispatch_us, f.p2p_dispatch_us, "", b.fixed_dispatch_us,
                    f.fixed_dispatch_us, ratio(f.fixed_dispatch_us, b.fixed_dispatch_us), b.exact_dispatch_us,
                    f.exact_dispatch_us, ratio(f.exact_dispatch_us, b.exact_dispatch_us),
                    ratio(double(f.exact_send_bytes), double(b.exact_send_bytes)));
        jcmp.push_back({{"rank", b.rank},
                        {"dispatch_bytes_ratio", ratio(double(f.exact_send_bytes), double(b.exact_send_bytes))},
                        {"p2p_dispatch_ratio", ratio(f.p2p_dispatch_us, b.p2p_dispatch_us)},
                        {"p2p_graph_dispatch_combine_ratio", ratio(f.p2p_graph_us, b.p2p_graph_us)},
                        {"fixed_dispatch_ratio", ratio(f.fixed_dispatch_us, b.fixed_dispatch_us)},
                        {"fixed_graph_dispatch_combine_ratio", ratio(f.fixed_graph_us, b.fixed_graph_us)},
                        {"exact_dispatch_ratio", ratio(f.exact_dispatch_us, b.exact_dispatch_us)}});
    }
    std::fflush(stdout);
    return {{"tokens_per_rank", tokens},
            {"capacity_factor", o.capacity_factor},
            {"ranks", jdt[0]},
            {"fp8_dispatch_ranks", jdt[1]},
            {"fp8_vs_bf16", jcmp}};
}
#endif

int run(int argc, char** argv) {
    options o;
    po::options_description desc("zmoe bench ep: expert-parallel exchange and decode steps on CUDA GPUs");
    desc.add_options()("model", po::value(&o.model)->required(), "model directory (config.json; weights unless dummy)")(
        "device", po::value(&o.device)->default_value(o.device),
        "cuda (one GPU per rank, NCCL) or cpu (ranks as threads exchanging in process; no exchange timing)")(
        "load-format", po::value(&o.load_format)->default_value(o.load_format), "auto or dummy")(
        "quantization", po::value(&o.quantization)->default_value(o.quantization),
        "fp8: quantize the BF16 weights at load (docs/fp8.md); empty: the checkpoint's format")(
        "workers", po::value(&o.workers)->default_value(o.workers), "GPUs of the expert-parallel runs")(
        "batch", po::value(&o.batch)->default_value(o.batch), "decode sequences per GPU")(
        "context", po::value(&o.context)->default_value(o.context), "prompt tokens per sequence")(
        "steps", po::value(&o.steps)->default_value(o.steps), "timed decode steps per configuration")(
        "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed decode steps before them")(
        "block-size", po::value(&o.block_size)->default_value(o.block_size), "KV block size")(
        "max-num-batched-tokens", po::value(&o.max_num_batched_tokens)->default_value(o.max_num_batched_tokens),
        "prefill tokens per step")("exchange-tokens", po::value(&o.exchange_tokens)->default_value(o.exchange_tokens),
                                   "tokens per rank of the exchange timing (a comma list: one timing per size)")(
        "capacity-factor", po::value(&o.capacity_factor)->default_value(o.capacity_factor),
        "fixed exchange window over the even share (0: the executor's default)")(
        "comm-sms", po::value(&o.comm_sms)->default_value(o.comm_sms),
        "SMs the expert GEMMs leave to the exchange while DBO overlaps it (0: none, the default)")(
        "skip-single", po::bool_switch(&o.skip_single), "no 1-GPU run")("skip-dbo", po::bool_switch(&o.skip_dbo),
                                                                        "no dual-batch-overlap steps (DBO off only)")(
        "exchange-only", po::bool_switch(&o.exchange_only), "only the exchange timing (no decode steps)")(
        "skip-exchange", po::bool_switch(&o.skip_exchange), "no exchange timing (the steps only)")(
        "prefill-tokens", po::value(&o.prefill_tokens),
        "comma-separated token counts per GPU: time prefill steps of each (--context tokens per sequence, eager) "
        "instead of decode steps")("json", po::value(&o.json), "write the results as JSON to this file");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, desc, vm)) return 0;
    if (o.workers < 2 || o.batch < 1 || o.context < 1 || o.steps < 1 || o.warmup < 0)
        throw zmoe::error(zmoe::errc::invalid_argument, "--workers >= 2, --batch, --context, --steps >= 1");
    if (o.device != "cuda" && o.device != "cpu")
        throw zmoe::error(zmoe::errc::invalid_argument, "--device must be cuda or cpu, not '" + o.device + "'");
    const std::vector<int32_t> exchange_tokens = zmoe::cli::parse_positive_list(o.exchange_tokens, "--exchange-tokens");
    for (size_t at = 0; at < o.prefill_tokens.size();) {
        const size_t comma = std::min(o.prefill_tokens.find(',', at), o.prefill_tokens.size());
        o.prefill.push_back(std::stoi(o.prefill_tokens.substr(at, comma - at)));
        at = comma + 1;
    }
    if (!o.prefill.empty()) o.batch = 1;
    for (int32_t n : o.prefill) o.batch = std::max(o.batch, n / o.context);  // sequences of the largest prefill
    const model_config cfg = model_config::load(o.model);
    nlohmann::json j = {{"model", o.model},
                        {"model_type", zmoe::model_arch_name(cfg.arch)},
                        {"device", o.device},
                        {"load_format", o.load_format},
                        {"quantization", o.quantization},
                        {"workers", o.workers},
                        {"batch_per_gpu", o.batch},
                        {"context", o.context},
                        {"steps", o.steps},
                        {"warmup", o.warmup},
                        {"capacity_factor", o.capacity_factor},
                        {"comm_sms", o.comm_sms},
                        {"step_kind", o.prefill.empty() ? "decode" : "prefill"}};

    if (o.skip_exchange && o.exchange_only)
        throw zmoe::error(zmoe::errc::invalid_argument, "--skip-exchange and --exchange-only leave nothing to run");
    nlohmann::json exchanges = nlohmann::json::array();
#ifdef ZMOE_WITH_CUDA
    if (o.device == "cuda" && !o.skip_exchange)
        for (const int32_t tokens : exchange_tokens) exchanges.push_back(exchange_section(o, cfg, tokens));
#endif
    if (!exchanges.empty())
        j["exchange"] = exchanges[0];  // the first size, where earlier readers look
    else if (!o.skip_exchange)
        std::printf("\nzmoe bench ep: the exchange timing runs on CUDA GPUs only (--device %s)\n", o.device.c_str());
    j["exchanges"] = exchanges;

    if (o.exchange_only) {
        if (!o.json.empty()) std::ofstream(o.json) << j.dump(2) << "\n";
        return 0;
    }
    // Decode: one step size (--batch); prefill: each --prefill-tokens size. DBO off and on for each.
    std::vector<phase> wanted;
    for (int32_t n : o.prefill.empty() ? std::vector<int32_t>{o.batch} : o.prefill)
        for (bool d : {false, true})
            if (!(d && o.skip_dbo)) wanted.push_back({.dual = d, .tokens = n});
    // The decode floors' bandwidth: one device-to-device copy on GPU 0 (or memcpy on the CPU), before any weights.
    const double bandwidth = zmoe::measure_copy_bandwidth(o.device, 0);
    std::vector<phase> phases;
    if (!o.skip_single) {
        std::fprintf(stderr, "1 GPU...\n");
        std::vector<phase> single;
        for (const phase& p : wanted)
            if (!p.dual) single.push_back(p);
        for (auto& p : run_world(o, cfg, 1, single, bandwidth)) phases.push_back(p);
    }
    std::fprintf(stderr, "%d GPUs...\n", o.workers);
    for (auto& p : run_world(o, cfg, o.workers, wanted, bandwidth)) phases.push_back(p);

    std::printf("\nzmoe bench ep: %s steps, context %d, %d timed steps%s, copy bandwidth %.0f GB/s\n",
                o.prefill.empty() ? "decode" : "prefill", o.context, o.steps,
                o.quantization.empty() ? "" : (", quantized " + o.quantization).c_str(), bandwidth / 1e9);
    std::printf("%8s %5s %5s %12s %14s %12s %12s %10s %8s\n", "tokens", "GPUs", "DBO", "ms/step", "tok/s per GPU",
                "tok/s total", "vs 1 GPU", "floor ms", "floor %");
    nlohmann::json jsteps = nlohmann::json::array(), jdbo = nlohmann::json::array();
    auto find = [&](int32_t tokens, int world, bool dual) {
        for (const phase& p : phases)
            if (p.tokens == tokens && p.world == world && p.dual == dual) return zmoe::median(p.ms);
        return 0.0;
    };
    for (const phase& p : phases) {
        const double ms = zmoe::median(p.ms), tps = p.tokens / ms * 1e3, single = find(p.tokens, 1, false);
        const double scaling = single > 0 ? single / ms : 0;  // same tokens per GPU
        // The floor beside the median step: the mean of the timed steps' floors (they grow with the KV cache only).
        const double floor_ms =
            p.floor_ms.empty() ? 0.0
                               : std::accumulate(p.floor_ms.begin(), p.floor_ms.end(), 0.0) / double(p.floor_ms.size());
        std::printf("%8d %5d %5s %12.3f %14.0f %12.0f %11.0f%%", p.tokens, p.world, p.dual ? "on" : "off", ms, tps,
                    tps * p.world, 100 * scaling);
        if (floor_ms > 0)
            std::printf(" %10.3f %7.0f%%\n", floor_ms, 100 * floor_ms / ms);
        else
            std::printf(" %10s %8s\n", "-", "-");
        nlohmann::json row = {
            {"tokens_per_gpu", p.tokens},   {"gpus", p.world},          {"dbo", p.dual},
            {"median_step_ms", ms},         {"tok_per_s_per_gpu", tps}, {"tok_per_s_total", tps * p.world},
            {"per_gpu_vs_single", scaling}, {"step_ms", p.ms}};
        if (floor_ms > 0) {
            row["floor_ms"] = floor_ms;
            row["floor_fraction"] = floor_ms / ms;
        }
        jsteps.push_back(std::move(row));
    }
    if (!o.skip_dbo) std::printf("\n%8s %12s %12s %12s\n", "tokens", "DBO off ms", "DBO on ms", "DBO saves");
    for (const phase& p : wanted) {
        if (p.dual || o.skip_dbo) continue;
        const double off = find(p.tokens, o.workers, false), on = find(p.tokens, o.workers, true);
        std::printf("%8d %12.3f %12.3f %12.3f\n", p.tokens, off, on, off - on);
        jdbo.push_back({{"tokens_per_gpu", p.tokens}, {"off_ms", off}, {"on_ms", on}, {"saved_ms", off - on}});
    }
    j["copy_bandwidth_bytes_per_s"] = bandwidth;
    j["steps"] = jsteps;
    j["dbo"] = jdbo;
    if (!o.json.empty()) std::ofstream(o.json) << j.dump(2) << "\n";
    return 0;
}

}  // namespace

ZMOE_BENCH_MODE("ep", "expert parallelism on CUDA: exchange per layer, DBO on/off, 1 vs N GPUs", run);
