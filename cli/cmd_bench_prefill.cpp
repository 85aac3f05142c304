// `zmoe bench prefill`: offline time to first token of one long prompt. Loads the model in this process on one device
// (no actors), then for each prompt length and each chunk size (the scheduler's --max-num-batched-tokens: a prompt
// runs as steps of at most that many tokens) runs the prompt alone, step by step, and prints the sum of the steps
// (the TTFT the engine adds to it is its own step overhead) beside the prompt's FLOP floor: every projection, the
// routed and shared experts of top_k, the causal attention products and the last token's LM head at --peak-tflops.
// Table on stdout (per-step times with --steps), JSON with --json.
//
//   zmoe bench prefill --model DIR [--load-format dummy] [--lens 8192,32000] [--chunks 2048,8192,32768] [--reps 3]
//   [--profile-len L --profile-chunk C]
//
// --profile-len / --profile-chunk: cudaProfilerStart/Stop around the first timed run of that pair only, for a
// profiler started with collection off (ncu --profile-from-start off ...): the kernels of one prefill.

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/stats.hpp"
#include "cli/cmd_bench.hpp"
#include "cli/options.hpp"
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
    std::string chunks = "2048,8192,32768";
    int reps = 3;
    int block_size = 16;
    double peak_tflops = 0;
    double gpu_memory_utilization = 0.9;
    int profile_len = 0;
    int profile_chunk = 0;
    bool print_steps = false;
    std::string json;
};

/// Matrix FLOPs of a T-token prefill (bench/prefill_ttft.sh's count, for the non-MLA models).
double floor_flops(const model_config& c, int64_t T) {
    const double H = double(c.hidden_size), d = double(c.head_dim), hq = double(c.num_heads);
    const double hkv = double(c.num_kv_heads), L = double(c.num_layers);
    const double per_tok = H * (hq + 2 * hkv) * d + hq * d * H;
    const double attn = hq * 2 * d * double(T) * double(T);
    double f = L * (2 * per_tok * double(T) + attn);
    const double moe_layers = double(c.num_moe_layers());
    f += (L - moe_layers) * 2 * 3 * H * double(c.dense_intermediate_size) * double(T);
    if (c.num_experts > 0)
        f += moe_layers * (2 * 3 * H * double(c.moe_intermediate_size) * double(c.num_experts_per_tok) * double(T) +
                           2 * 3 * H * double(c.shared_expert_intermediate_size) * double(T) +
                           2 * H * double(c.num_experts) * double(T));
    return f + 2 * H * double(c.vocab_size);
}

int run(int argc, char** argv) {
    options o;
    po::options_description desc("zmoe bench prefill: one long prompt's prefill time per chunk size, offline");
    desc.add_options()("model", po::value(&o.model)->required(), "model directory (config.json; weights unless dummy)")(
        "device", po::value(&o.device)->default_value(o.device), "cuda or cpu")(
        "load-format", po::value(&o.load_format)->default_value(o.load_format),
        "auto (the checkpoint) or dummy (random weights from config.json)")(
        "lens", po::value(&o.lens)->default_value(o.lens), "comma-separated prompt lengths")(
        "chunks", po::value(&o.chunks)->default_value(o.chunks),
        "comma-separated chunk sizes (max-num-batched-tokens values)")(
        "reps", po::value(&o.reps)->default_value(o.reps), "timed runs per (length, chunk); the median is printed")(
        "block-size", po::value(&o.block_size)->default_value(o.block_size), "KV block size")(
        "peak-tflops", po::value(&o.peak_tflops)->default_value(o.peak_tflops),
        "dense BF16 rate for the floor column (0: no floor)")(
        "gpu-memory-utilization", po::value(&o.gpu_memory_utilization)->default_value(o.gpu_memory_utilization, "0.9"),
        "fraction of the GPU for weights, workspace and KV cache")(
        "profile-len", po::value(&o.profile_len)->default_value(o.profile_len),
        "profile the first timed run of this length (with --profile-chunk)")(
        "profile-chunk", po::value(&o.profile_chunk)->default_value(o.profile_chunk), "the chunk size to profile")(
        "steps", po::bool_switch(&o.print_steps), "print every step's time of the median run")(
        "json", po::value(&o.json), "write the results as JSON to this file");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, desc, vm)) return 0;
    const std::vector<int32_t> lens = zmoe::cli::parse_positive_list(o.lens, "--lens");
    const std::vector<int32_t> chunks = zmoe::cli::parse_positive_list(o.chunks, "--chunks");
    if (o.reps < 1) throw zmoe::error(zmoe::errc::invalid_argument, "--reps must be >= 1");
    const int32_t max_len = *std::max_element(lens.begin(), lens.end());
    const int32_t max_chunk = std::min(*std::max_element(chunks.begin(), chunks.end()), max_len);

    zmoe::executor_options eo;
    eo.model = model_config::load(o.model);
    const model_config& cfg = eo.model;
    zmoe::engine_config& run = eo.config;  // one worker's view of a one-worker run
    run.model = o.model;
    run.device = o.device;
    run.block_size = o.block_size;
    run.max_num_seqs = 1;
    run.max_num_batched_tokens = max_chunk;
    run.max_model_len = max_len + 1;
    run.gpu_memory_utilization = o.gpu_memory_utilization;
    run.enforce_eager = true;  // prefill steps never replay decode graphs
    run.load_format = o.load_format;
    const int64_t blocks_per_seq = (max_len + 1 + o.block_size - 1) / o.block_size;
    run.num_kv_blocks = o.device == "cpu" ? blocks_per_seq : 0;
    const auto placement = zmoe::expert_placement::initial(cfg.num_moe_layers(), cfg.num_experts, 0, 1);
    auto ex = zmoe::make_step_executor(eo, placement);
    if (ex->num_kv_blocks() < blocks_per_seq)
        throw zmoe::error(zmoe::errc::out_of_memory, "KV cache of " + std::to_string(ex->num_kv_blocks()) +
                                                         " blocks; the longest prompt needs " +
                                                         std::to_string(blocks_per_seq));

    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cfg.vocab_size - 1));
    uint64_t next_id = 1, step_id = 0;
    std::vector<int32_t> table(blocks_per_seq);
    std::iota(table.begin(), table.end(), 0);

    // One prompt of `len` tokens in steps of at most `chunk`; every step's wall time (execute() waits for the device).
    auto prefill = [&](int32_t len, int32_t chunk, bool profile) {
        std::vector<double> ms;
        const uint64_t id = next_id++;
        if (profile) zmoe::device_profiler_range(o.device, true);
        for (int32_t pos = 0; pos < len;) {
            const int32_t n = std::min(len - pos, chunk);
            zmoe::step_request r;
            r.step_id = step_id++;
            zmoe::scheduled_seq q;
            q.request_id = id;
            q.start_pos = pos;
            q.block_table.assign(table.begin(), table.begin() + (pos + n + o.block_size - 1) / o.block_size);
            q.token_ids.resize(n);
            for (auto& t : q.token_ids) t = token(rng);
            q.do_sample = pos + n == len;
            r.seqs.push_back(std::move(q));
            const auto t0 = std::chrono::steady_clock::now();
            ex->execute(r);
            ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
            pos += n;
        }
        if (profile) zmoe::device_profiler_range(o.device, false);
        zmoe::step_request done;
        done.step_id = step_id++;
        done.finished_ids.push_back(id);
        ex->execute(done);
        return ms;
    };

    prefill(std::min(max_len, 1024), std::min(max_chunk, 1024), false);  // warm-up: lazy loads, GEMM plans
    std::printf("\nzmoe bench prefill: %s (%s weights), %s, one prompt at a time, median of %d\n", o.model.c_str(),
                o.load_format.c_str(), o.device.c_str(), o.reps);
    std::printf("%8s %8s %6s %12s %12s %10s %8s %12s\n", "prompt", "chunk", "steps", "prefill ms", "first step",
                "last step", "floor ms", "x floor");
    nlohmann::json results = nlohmann::json::array();
    for (int32_t len : lens) {
        std::vector<int32_t> done;  // chunk sizes run for this length (a chunk past the prompt is one step)
        for (int32_t chunk : chunks) {
            const int32_t c = std::min(chunk, len);
            if (std::find(done.begin(), done.end(), c) != done.end()) continue;
            done.push_back(c);
            std::vector<double> totals;
            std::vector<std::vector<double>> runs;
            for (int i = 0; i < o.reps; ++i) {
                const bool profile = i == 0 && len == o.profile_len && chunk == o.profile_chunk;
                runs.push_back(prefill(len, c, profile));
                totals.push_back(std::accumulate(runs.back().begin(), runs.back().end(), 0.0));
            }
            const double total = zmoe::median(totals);
            const size_t at = size_t(std::find(totals.begin(), totals.end(), total) - totals.begin());
            const std::vector<double>& steps = runs[std::min(at, runs.size() - 1)];
            const double floor_ms = o.peak_tflops > 0 ? floor_flops(cfg, len) / (o.peak_tflops * 1e12) * 1e3 : 0;
            std::printf("%8d %8d %6zu %12.2f %12.2f %10.2f %8.1f %12.2f\n", len, c, steps.size(), total, steps.front(),
                        steps.back(), floor_ms, floor_ms > 0 ? total / floor_ms : 0.0);
            if (o.print_steps) {
                std::printf("         steps ms:");
                for (double s : steps) std::printf(" %.2f", s);
                std::printf("\n");
            }
            std::fflush(stdout);
            results.push_back({{"prompt_tokens", len},
                               {"chunk", c},
                               {"median_prefill_ms", total},
                               {"prefill_ms", totals},
                               {"step_ms", steps},
                               {"floor_ms", floor_ms}});
        }
    }
    if (!o.json.empty()) {
        nlohmann::json j = {{"model", o.model},
                            {"model_type", zmoe::model_arch_name(cfg.arch)},
                            {"load_format", o.load_format},
                            {"device", o.device},
                            {"reps", o.reps},
                            {"peak_tflops", o.peak_tflops},
                            {"results", results}};
        std::ofstream(o.json) << j.dump(2) << "\n";
    }
    return 0;
}

}  // namespace

ZMOE_BENCH_MODE("prefill", "one long prompt's prefill time per chunk size beside the FLOP floor (offline, one device)",
                run);
