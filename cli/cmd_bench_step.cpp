// `zmoe bench step`: offline decode step time. Loads the model in this process on one device (no actors), prefills
// B sequences of --context tokens, then times decode steps at each batch size B and prints them beside the floor:
// the bytes one step must read (the dense weights, the experts the step's tokens actually touched, the KV cache)
// over the device's copy bandwidth, measured in the same run. Table on stdout, JSON with --json.
//
//   zmoe bench step --model DIR [--load-format dummy] [--quantization fp8] [--batch-sizes 1,64,256] [--context 128]
//   [--steps 32]

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
#include "model/step_floor.hpp"
#include "workers/step_executor.hpp"

namespace {

namespace po = boost::program_options;
using zmoe::model_config;

struct options {
    std::string model;
    std::string device = "cuda";
    std::string load_format = "auto";
    std::string quantization;
    std::string batch_sizes = "1,8,64,256";
    int context = 128;
    int steps = 32;
    int warmup = 4;
    int block_size = 16;
    int max_num_batched_tokens = 0;  // 0: max(2048, largest batch)
    double gpu_memory_utilization = 0.9;
    bool enforce_eager = false;
    bool profile = false;
    std::string json;
};

int run(int argc, char** argv) {
    options o;
    po::options_description desc("zmoe bench step: decode step time per batch size beside the memory floor");
    desc.add_options()("model", po::value(&o.model)->required(), "model directory (config.json; weights unless dummy)")(
        "device", po::value(&o.device)->default_value(o.device), "cuda or cpu")(
        "load-format", po::value(&o.load_format)->default_value(o.load_format),
        "auto (the checkpoint) or dummy (random weights from config.json)")(
        "quantization", po::value(&o.quantization)->default_value(o.quantization),
        "fp8: quantize the BF16 weights at load (docs/fp8.md); empty: the checkpoint's format")(
        "batch-sizes", po::value(&o.batch_sizes)->default_value(o.batch_sizes), "comma-separated decode batch sizes")(
        "context", po::value(&o.context)->default_value(o.context), "prompt tokens per sequence before decoding")(
        "steps", po::value(&o.steps)->default_value(o.steps), "timed decode steps per batch size")(
        "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed decode steps first")(
        "block-size", po::value(&o.block_size)->default_value(o.block_size), "KV block size")(
        "max-num-batched-tokens", po::value(&o.max_num_batched_tokens)->default_value(o.max_num_batched_tokens),
        "tokens per step (prefill chunks); 0 = max(2048, largest batch)")(
        "gpu-memory-utilization", po::value(&o.gpu_memory_utilization)->default_value(o.gpu_memory_utilization, "0.9"),
        "fraction of the GPU for weights, workspace and KV cache")("enforce-eager", po::bool_switch(&o.enforce_eager),
                                                                   "no decode graphs")(
        "profile", po::bool_switch(&o.profile),
        "collect device profiles only over the timed steps (cudaProfilerStart/Stop around them: run under a profiler "
        "started with collection off, e.g. ncu --profile-from-start off)")("json", po::value(&o.json),
                                                                           "write the results as JSON to this file");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, desc, vm)) return 0;
    const std::vector<int32_t> sizes = zmoe::cli::parse_positive_list(o.batch_sizes, "--batch-sizes");
    const int32_t max_batch = *std::max_element(sizes.begin(), sizes.end());
    if (o.context < 1 || o.steps < 1 || o.warmup < 0)
        throw zmoe::error(zmoe::errc::invalid_argument, "--context and --steps must be >= 1, --warmup >= 0");

    zmoe::executor_options eo;
    eo.model = model_config::load(o.model);
    const model_config& cfg = eo.model;
    zmoe::engine_config& run = eo.config;  // one worker's view of a one-worker run
    run.model = o.model;
    run.device = o.device;
    run.block_size = o.block_size;
    run.max_num_seqs = max_batch;
    run.max_num_batched_tokens = o.max_num_batched_tokens > 0 ? o.max_num_batched_tokens : std::max(2048, max_batch);
    const int32_t len = o.context + o.warmup + o.steps + 1;
    run.max_model_len = len;
    run.gpu_memory_utilization = o.gpu_memory_utilization;
    run.enforce_eager = o.enforce_eager;
    run.load_format = o.load_format;
    run.quantization = o.quantization;
    const int64_t blocks_per_seq = (len + o.block_size - 1) / o.block_size;
    run.num_kv_blocks = o.device == "cpu" ? blocks_per_seq * max_batch : 0;
    const auto placement = zmoe::expert_placement::initial(cfg.num_moe_layers(), cfg.num_experts, 0, 1);

    std::fprintf(stderr, "measuring copy bandwidth on %s...\n", o.device.c_str());
    const double bandwidth = zmoe::measure_copy_bandwidth(o.device);
    const auto t_load = std::chrono::steady_clock::now();
    auto ex = zmoe::make_step_executor(eo, placement);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    if (ex->num_kv_blocks() < blocks_per_seq * max_batch)
        throw zmoe::error(zmoe::errc::out_of_memory, "KV cache of " + std::to_string(ex->num_kv_blocks()) +
                                                         " blocks; the largest batch needs " +
                                                         std::to_string(blocks_per_seq * max_batch));

    const zmoe::step_floor_model floor_model = zmoe::step_floor_model::of(cfg, o.quantization);
    const int64_t dense_bytes = floor_model.dense_bytes;
    const int64_t expert_bytes = floor_model.expert_bytes;
    // K and V per position and layer (MLA: the one latent + rope-key row).
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cfg.vocab_size - 1));
    uint64_t next_id = 1, step_id = 0;
    nlohmann::json results = nlohmann::json::array();

    std::printf("\nzmoe bench step: %s (%s weights%s), %s, context %d, %d timed steps, copy bandwidth %.0f GB/s\n",
                o.model.c_str(), o.load_format.c_str(),
                o.quantization.empty() ? "" : (", quantized " + o.quantization).c_str(), o.device.c_str(), o.context,
                o.steps, bandwidth / 1e9);
    std::printf("%6s %10s %12s %14s %10s %10s %8s\n", "batch", "ms/step", "tok/s", "experts/layer", "floor GB",
                "floor ms", "floor %");
    for (int32_t B : sizes) {
        // B sequences with their own KV blocks, prefilled in chunks of at most max_num_batched_tokens.
        std::vector<zmoe::scheduled_seq> seqs(B);
        int32_t block = 0;
        for (auto& s : seqs) {
            s.request_id = next_id++;
            s.block_table.resize(blocks_per_seq);
            std::iota(s.block_table.begin(), s.block_table.end(), block);
            block += static_cast<int32_t>(blocks_per_seq);
        }
        for (int32_t pos = 0; pos < o.context;) {
            const int32_t chunk = std::min(o.context - pos, std::max(1, run.max_num_batched_tokens / B));
            zmoe::step_request r;
            r.step_id = step_id++;
            for (auto& s : seqs) {
                zmoe::scheduled_seq q = s;
                q.start_pos = pos;
                q.token_ids.resize(chunk);
                for (auto& t : q.token_ids) t = token(rng);
                q.do_sample = pos + chunk == o.context;
                r.seqs.push_back(std::move(q));
            }
            ex->execute(r);
            pos += chunk;
        }
        std::vector<double> ms;
        double floor_bytes = 0, experts_touched = 0;
        for (int32_t i = 0; i < o.warmup + o.steps; ++i) {
            zmoe::step_request r;
            r.step_id = step_id++;
            for (auto& s : seqs) {
                zmoe::scheduled_seq q = s;
                q.start_pos = o.context + i;
                q.token_ids = {zmoe::kPlaceholderToken};
                q.do_sample = true;
                q.sample_index = static_cast<uint32_t>(i + 1);
                r.seqs.push_back(std::move(q));
            }
            if (o.profile && i == o.warmup) zmoe::device_profiler_range(o.device, true);
            const auto t0 = std::chrono::steady_clock::now();
            const zmoe::step_result res = ex->execute(r);
            const double step_ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            if (i < o.warmup) continue;
            ms.push_back(step_ms);
            const int64_t touched = zmoe::experts_touched(res.expert_counts);
            experts_touched += static_cast<double>(touched) / std::max<int64_t>(1, cfg.num_moe_layers());
            floor_bytes += floor_model.bytes(touched, static_cast<int64_t>(B) * (o.context + i + 1));
        }
        if (o.profile) zmoe::device_profiler_range(o.device, false);
        floor_bytes /= o.steps;
        experts_touched /= o.steps;
        const double step_ms = zmoe::median(ms);
        const double mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
        const double floor_ms = floor_bytes / bandwidth * 1e3;
        std::printf("%6d %10.3f %12.0f %14.1f %10.2f %10.3f %7.0f%%\n", B, step_ms, B / step_ms * 1e3, experts_touched,
                    floor_bytes / 1e9, floor_ms, 100 * floor_ms / step_ms);
        std::fflush(stdout);
        results.push_back({{"batch", B},
                           {"median_step_ms", step_ms},
                           {"mean_step_ms", mean_ms},
                           {"output_tok_per_s", B / step_ms * 1e3},
                           {"experts_touched_per_layer", experts_touched},
                           {"floor_bytes", floor_bytes},
                           {"floor_ms", floor_ms},
                           {"floor_fraction", floor_ms / step_ms},
                           {"step_ms", ms}});
        zmoe::step_request done;
        done.step_id = step_id++;
        for (auto& s : seqs) done.finished_ids.push_back(s.request_id);
        ex->execute(done);
    }
    if (!o.json.empty()) {
        nlohmann::json j = {{"model", o.model},
                            {"model_type", zmoe::model_arch_name(cfg.arch)},
                            {"load_format", o.load_format},
                            {"quantization", o.quantization},
                            {"device", o.device},
                            {"enforce_eager", o.enforce_eager},
                            {"context", o.context},
                            {"steps", o.steps},
                            {"warmup", o.warmup},
                            {"copy_bandwidth_bytes_per_s", bandwidth},
                            {"load_s", load_s},
                            {"dense_weight_bytes_per_step", dense_bytes},
                            {"expert_bytes", expert_bytes},
                            {"results", results}};
        std::ofstream(o.json) << j.dump(2) << "\n";
    }
    return 0;
}

}  // namespace

ZMOE_BENCH_MODE("step", "decode step time per batch size beside the memory floor (offline, one device)", run);
