// `zmoe bench mixed`: a long prompt arriving while decodes run, per chunk size (--max-num-batched-tokens). Loads the
// model in this process on one device and drives it with the engine core's own scheduler (synchronous: schedule, run
// the step, update), no actors. For each chunk size: --decodes sequences of --decode-context prompt tokens are
// prefilled and decode; after a few steady steps one prompt of each --lens length arrives, and runs (chunked by the
// scheduler beside the decodes) until its first token. Printed side by side: the prompt's time to first token, and
// the running decodes' inter-token latency over those steps (p50 / p99 / max; every decode gets a token in every
// step, decodes going first), with the steady decode step before it. Table on stdout, JSON with --json.
//
//   zmoe bench mixed --model DIR [--load-format dummy] [--decodes 32] [--decode-context 1024] [--lens 8192,32000]
//   [--chunks 2048,4096,8192,16384]

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/stats.hpp"
#include "cli/bench_metrics.hpp"
#include "cli/cmd_bench.hpp"
#include "cli/options.hpp"
#include "engine_core/scheduler.hpp"
#include "messages/expert_placement.hpp"
#include "workers/step_executor.hpp"

namespace {

namespace po = boost::program_options;
using zmoe::model_config;

struct options {
    std::string model;
    std::string device = "cuda";
    std::string load_format = "auto";
    std::string lens = "8192,32000";
    std::string chunks = "2048,4096,8192,16384";
    int decodes = 32;
    int decode_context = 1024;
    int steady_steps = 8;
    int block_size = 16;
    double gpu_memory_utilization = 0.9;
    bool enforce_eager = false;
    std::string json;
};

int run(int argc, char** argv) {
    options o;
    po::options_description desc("zmoe bench mixed: a long prompt's TTFT beside the running decodes' ITL, per chunk");
    desc.add_options()("model", po::value(&o.model)->required(), "model directory (config.json; weights unless dummy)")(
        "device", po::value(&o.device)->default_value(o.device), "cuda or cpu")(
        "load-format", po::value(&o.load_format)->default_value(o.load_format),
        "auto (the checkpoint) or dummy (random weights from config.json)")(
        "lens", po::value(&o.lens)->default_value(o.lens), "comma-separated long-prompt lengths")(
        "chunks", po::value(&o.chunks)->default_value(o.chunks), "comma-separated --max-num-batched-tokens values")(
        "decodes", po::value(&o.decodes)->default_value(o.decodes), "sequences decoding while the long prompt runs")(
        "decode-context", po::value(&o.decode_context)->default_value(o.decode_context),
        "prompt tokens of each decoding sequence")("steady-steps",
                                                   po::value(&o.steady_steps)->default_value(o.steady_steps),
                                                   "decode-only steps timed before the long prompt arrives")(
        "block-size", po::value(&o.block_size)->default_value(o.block_size), "KV block size")(
        "gpu-memory-utilization", po::value(&o.gpu_memory_utilization)->default_value(o.gpu_memory_utilization, "0.9"),
        "fraction of the GPU for weights, workspace and KV cache")("enforce-eager", po::bool_switch(&o.enforce_eager),
                                                                   "no decode graphs")(
        "json", po::value(&o.json), "write the results as JSON to this file");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, desc, vm)) return 0;
    const std::vector<int32_t> lens = zmoe::cli::parse_positive_list(o.lens, "--lens");
    const std::vector<int32_t> chunks = zmoe::cli::parse_positive_list(o.chunks, "--chunks");
    if (o.decodes < 0 || o.decode_context < 1 || o.steady_steps < 1)
        throw zmoe::error(zmoe::errc::invalid_argument,
                          "--decodes must be >= 0, --decode-context and --steady-steps >= 1");
    const int32_t max_len = *std::max_element(lens.begin(), lens.end());
    const int32_t max_chunk = *std::max_element(chunks.begin(), chunks.end());
    // The decodes' budget: their prompt, the steady steps and one token per step of the longest prefill at the
    // smallest chunk (decodes go first, so a step takes at most chunk - decodes prompt tokens), with room to spare.
    const int32_t min_chunk = *std::min_element(chunks.begin(), chunks.end());
    if (min_chunk <= o.decodes)
        throw zmoe::error(zmoe::errc::invalid_argument, "every --chunks value must exceed --decodes");
    const int32_t decode_tokens = o.steady_steps + 8 + 2 * (max_len / (min_chunk - o.decodes) + 2);
    const int32_t model_len = std::max(max_len + 1, o.decode_context + decode_tokens);

    zmoe::executor_options eo;
    eo.model = model_config::load(o.model);
    const model_config& cfg = eo.model;
    zmoe::engine_config& run = eo.config;  // one worker's view of a one-worker run
    run.model = o.model;
    run.device = o.device;
    run.block_size = o.block_size;
    run.max_num_seqs = o.decodes + 1;
    run.max_num_batched_tokens = max_chunk;
    run.max_model_len = model_len;
    run.gpu_memory_utilization = o.gpu_memory_utilization;
    run.enforce_eager = o.enforce_eager;
    run.load_format = o.load_format;
    const int64_t blocks_per_seq = (model_len + o.block_size - 1) / o.block_size;
    run.num_kv_blocks = o.device == "cpu" ? blocks_per_seq * (o.decodes + 1) : 0;
    const auto placement = zmoe::expert_placement::initial(cfg.num_moe_layers(), cfg.num_experts, 0, 1);
    auto ex = zmoe::make_step_executor(eo, placement);

    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cfg.vocab_size - 1));
    uint64_t next_id = 1;
    auto prompt = [&](int32_t n) {
        std::vector<int32_t> p(n);
        for (auto& t : p) t = token(rng);
        return p;
    };

    std::printf("\nzmoe bench mixed: %s (%s weights), %s; %d decodes of %d-token prompts, one long prompt at a time\n",
                o.model.c_str(), o.load_format.c_str(), o.device.c_str(), o.decodes, o.decode_context);
    std::printf("%8s %8s %9s %7s %10s %10s %10s %10s\n", "chunk", "prompt", "TTFT ms", "steps", "ITL p50", "ITL p99",
                "ITL max", "steady ms");
    nlohmann::json results = nlohmann::json::array();
    for (int32_t chunk : chunks) {
        for (int32_t len : lens) {
            zmoe::scheduler_config sc;
            sc.max_num_batched_tokens = chunk;
            sc.max_num_seqs = o.decodes + 1;
            sc.block_size = o.block_size;
            sc.num_blocks_per_rank = {static_cast<int32_t>(ex->num_kv_blocks())};
            sc.max_model_len = model_len;
            sc.async_scheduling = false;
            sc.enable_prefix_caching = false;
            zmoe::scheduler sched(sc);
            std::vector<uint64_t> decode_ids;
            for (int i = 0; i < o.decodes; ++i) {
                decode_ids.push_back(next_id++);
                zmoe::new_request r;
                r.id = decode_ids.back();
                r.prompt = prompt(o.decode_context);
                r.max_tokens = decode_tokens;
                r.ignore_eos = true;
                sched.add_request(std::move(r));
            }
            // One step: schedule, run, update; its wall time and the outputs.
            auto step = [&](std::vector<zmoe::request_output>* outs) {
                const auto t0 = std::chrono::steady_clock::now();
                std::vector<zmoe::step_request> steps = sched.schedule();
                std::vector<zmoe::step_result> res{ex->execute(steps[0])};
                std::vector<zmoe::request_output> got = sched.update(res);
                if (outs) *outs = std::move(got);
                return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            };
            // Prefill the decodes, then time steady decode steps.
            for (int guard = 0; guard < 100000; ++guard) {
                std::vector<zmoe::request_output> outs;
                step(&outs);
                if (static_cast<int>(outs.size()) == o.decodes) break;  // every decode sampled: all are decoding
            }
            std::vector<double> steady;
            for (int i = 0; i < o.steady_steps; ++i) steady.push_back(step(nullptr));

            const uint64_t long_id = next_id++;
            zmoe::new_request lr;
            lr.id = long_id;
            lr.prompt = prompt(len);
            lr.max_tokens = 1;
            lr.ignore_eos = true;
            const auto t0 = std::chrono::steady_clock::now();
            sched.add_request(std::move(lr));
            std::vector<double> itl;
            double ttft = -1;
            int32_t steps = 0;
            while (ttft < 0 && steps < 100000) {
                std::vector<zmoe::request_output> outs;
                const double ms = step(&outs);
                ++steps;
                bool decoded = false;
                for (const auto& out : outs) {
                    if (out.id == long_id && !out.new_tokens.empty())
                        ttft = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                    else if (!out.new_tokens.empty())
                        decoded = true;
                }
                if (decoded) itl.push_back(ms);
            }
            for (uint64_t id : decode_ids) sched.abort_request(id);
            while (sched.has_pending_work() || sched.num_unfinished() > 0) step(nullptr);
            // The aborted requests' finished ids reach the executor in one more (empty) step.
            step(nullptr);

            const double steady_ms = zmoe::median(steady);
            const double p50 = zmoe::cli::percentile(itl, 50), p99 = zmoe::cli::percentile(itl, 99);
            const double mx = itl.empty() ? 0 : *std::max_element(itl.begin(), itl.end());
            std::printf("%8d %8d %9.1f %7d %10.2f %10.2f %10.2f %10.2f\n", chunk, len, ttft, steps, p50, p99, mx,
                        steady_ms);
            std::fflush(stdout);
            results.push_back({{"max_num_batched_tokens", chunk},
                               {"prompt_tokens", len},
                               {"ttft_ms", ttft},
                               {"prefill_steps", steps},
                               {"itl_p50_ms", p50},
                               {"itl_p99_ms", p99},
                               {"itl_max_ms", mx},
                               {"itl_ms", itl},
                               {"steady_decode_step_ms", steady_ms}});
        }
    }
    if (!o.json.empty()) {
        nlohmann::json j = {{"model", o.model},
                            {"model_type", zmoe::model_arch_name(cfg.arch)},
                            {"load_format", o.load_format},
                            {"device", o.device},
                            {"decodes", o.decodes},
                            {"decode_context", o.decode_context},
                            {"enforce_eager", o.enforce_eager},
                            {"results", results}};
        std::ofstream(o.json) << j.dump(2) << "\n";
    }
    return 0;
}

}  // namespace

ZMOE_BENCH_MODE("mixed",
                "a long prompt's TTFT beside the running decodes' inter-token latency, per chunk size (offline)", run);
