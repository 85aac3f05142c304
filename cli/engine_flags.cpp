#include "cli/engine_flags.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace po = boost::program_options;

namespace zmoe::cli {

void engine_flags::add_engine_options(po::options_description& d) {
    d.add_options()("model", po::value(&model)->required(), "checkpoint directory (config.json, *.safetensors)")(
        "workers", po::value(&workers)->default_value(workers),
        "worker processes (expert-parallel ranks); with --device cuda, default: one per visible GPU")(
        "device", po::value(&device)->default_value(device), "cpu or cuda")(
        "max-num-batched-tokens", po::value(&max_num_batched_tokens)->default_value(max_num_batched_tokens),
        "token budget per rank per step")("max-num-seqs", po::value(&max_num_seqs)->default_value(max_num_seqs),
                                          "running sequences per rank")(
        "block-size", po::value(&block_size)->default_value(block_size), "KV cache block size in tokens")(
        "num-kv-blocks", po::value(&num_kv_blocks)->default_value(num_kv_blocks),
        "KV blocks per rank (0 = as many as --kv-cache-mb holds)")(
        "max-model-len", po::value(&max_model_len)->default_value(max_model_len),
        "prompt + generated tokens per request (0 = the model's max_position_embeddings)")(
        "no-async", po::bool_switch(&no_async), "synchronous scheduling (step N+1 waits for step N's tokens)")(
        "enable-eplb", po::bool_switch(&enable_eplb), "expert-parallel load balancing while serving")(
        "eplb-interval", po::value(&eplb_interval)->default_value(eplb_interval), "steps between rebalances")(
        "eplb-window", po::value(&eplb_window)->default_value(eplb_window), "steps of expert load kept")(
        "num-redundant-experts", po::value(&num_redundant_experts)->default_value(num_redundant_experts),
        "extra expert replicas per MoE layer (experts + this must split evenly over the workers)")(
        "enable-dbo", po::bool_switch(&enable_dbo),
        "dual-batch overlap: split big steps into two micro-batches, one's expert all-to-all in flight while the "
        "other computes (CPU workers; ignored with a warning on cuda)")(
        "dbo-decode-token-threshold", po::value(&dbo_decode_token_threshold)->default_value(dbo_decode_token_threshold),
        "with --enable-dbo: a decode-only step splits when some rank has at least this many tokens")(
        "dbo-prefill-token-threshold",
        po::value(&dbo_prefill_token_threshold)->default_value(dbo_prefill_token_threshold),
        "with --enable-dbo: a step with prefill splits when some rank has at least this many tokens")(
        "num-nodes", po::value(&num_nodes)->default_value(num_nodes), "nodes, for hierarchical EPLB packing")(
        "heartbeat-ms", po::value(&heartbeat_ms)->default_value(heartbeat_ms),
        "heartbeat interval; a peer silent for 3 intervals is dead");
}

void engine_flags::add_worker_options(po::options_description& d) {
    d.add_options()("threads", po::value(&threads)->default_value(threads),
                    "CPU threads per worker (0 = cores / workers)")(
        "kv-cache-mb", po::value(&kv_cache_mb)->default_value(kv_cache_mb), "CPU: KV cache budget per worker, MiB")(
        "gpu-memory-utilization", po::value(&gpu_memory_utilization)->default_value(gpu_memory_utilization, "0.9"),
        "CUDA: fraction of each GPU's memory for weights + KV cache")(
        "load-format", po::value(&load_format)->default_value(load_format),
        "auto: the checkpoint's weights; dummy: random weights generated from config.json (benchmarks)")(
        "enforce-eager", po::bool_switch(&enforce_eager), "CUDA: run every step eagerly (no decode CUDA graphs)");
}

std::vector<std::string> engine_flags::engine_core_args() const {
    std::vector<std::string> a = {"--model",
                                  model,
                                  "--workers",
                                  std::to_string(workers),
                                  "--device",
                                  device,
                                  "--max-num-batched-tokens",
                                  std::to_string(max_num_batched_tokens),
                                  "--max-num-seqs",
                                  std::to_string(max_num_seqs),
                                  "--block-size",
                                  std::to_string(block_size),
                                  "--num-kv-blocks",
                                  std::to_string(num_kv_blocks),
                                  "--max-model-len",
                                  std::to_string(max_model_len),
                                  "--eplb-interval",
                                  std::to_string(eplb_interval),
                                  "--eplb-window",
                                  std::to_string(eplb_window),
                                  "--num-redundant-experts",
                                  std::to_string(num_redundant_experts),
                                  "--num-nodes",
                                  std::to_string(num_nodes),
                                  "--heartbeat-ms",
                                  std::to_string(heartbeat_ms),
                                  "--dbo-decode-token-threshold",
                                  std::to_string(dbo_decode_token_threshold),
                                  "--dbo-prefill-token-threshold",
                                  std::to_string(dbo_prefill_token_threshold)};
    if (no_async) a.push_back("--no-async");
    if (enable_eplb) a.push_back("--enable-eplb");
    if (enable_dbo) a.push_back("--enable-dbo");
    return a;
}

std::vector<std::string> engine_flags::worker_args() const {
    std::vector<std::string> a = {"--device",
                                  device,
                                  "--threads",
                                  std::to_string(threads_per_worker()),
                                  "--kv-cache-mb",
                                  std::to_string(kv_cache_mb),
                                  "--gpu-memory-utilization",
                                  std::to_string(gpu_memory_utilization),
                                  "--load-format",
                                  load_format,
                                  "--heartbeat-ms",
                                  std::to_string(heartbeat_ms)};
    if (enforce_eager) a.push_back("--enforce-eager");
    return a;
}

void engine_flags::default_workers_to_gpus(const po::variables_map& vm) {
    if (device != "cuda" || !vm["workers"].defaulted()) return;
    int n = 0;
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
        std::string v = visible;
        if (!v.empty()) n = 1 + static_cast<int>(std::count(v.begin(), v.end(), ','));
    } else {
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
            (void)e;
            ++n;
        }
    }
    if (n > 0) workers = n;
}

int engine_flags::threads_per_worker() const {
    if (threads > 0) return threads;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(1, cores / std::max(1, workers));
}

}  // namespace zmoe::cli
