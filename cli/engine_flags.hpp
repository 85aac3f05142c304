#pragma once
// The options shared by the commands that start an engine (serve, generate, engine-core, worker), and how they
// pass through to the actor processes' command lines.

#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace zmoe::cli {

struct engine_flags {
    std::string model;
    int workers = 1;
    std::string device = "cpu";
    int max_num_batched_tokens = 2048;
    int max_num_seqs = 64;
    int block_size = 16;
    int64_t num_kv_blocks = 0;
    int max_model_len = 0;
    bool no_async = false;
    bool enable_eplb = false;
    int eplb_interval = 32;
    int eplb_window = 64;
    int num_redundant_experts = 0;
    bool enable_dbo = false;
    int dbo_decode_token_threshold = 32;
    int dbo_prefill_token_threshold = 512;
    int num_nodes = 1;
    int heartbeat_ms = 1000;
    int threads = 0;  ///< CPU kernel threads per worker; 0 = the cores divided among the workers
    int64_t kv_cache_mb = 256;
    double gpu_memory_utilization = 0.9;
    std::string load_format = "auto";  ///< auto (the checkpoint) or dummy (random weights from config.json)
    bool enforce_eager = false;        ///< CUDA: no decode graphs

    /// Options of the engine core's scheduler, EPLB and liveness.
    void add_engine_options(boost::program_options::options_description& d);
    /// Options of a worker process.
    void add_worker_options(boost::program_options::options_description& d);
    /// The same settings as arguments for `zmoe engine-core` / `zmoe worker`.
    std::vector<std::string> engine_core_args() const;
    std::vector<std::string> worker_args() const;
    /// Threads each worker should use when `threads` is 0.
    int threads_per_worker() const;
    /// With --device cuda and no --workers given: one worker per visible GPU, counted without initialising CUDA
    /// (CUDA_VISIBLE_DEVICES, else /proc/driver/nvidia/gpus), so the launching process can still fork+exec.
    void default_workers_to_gpus(const boost::program_options::variables_map& vm);
};

}  // namespace zmoe::cli
