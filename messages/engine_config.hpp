#pragma once
// The one engine configuration of a run: every engine flag (model, device, parallel layout, scheduler, EPLB,
// liveness, worker resources), defined once in for_each_engine_flag below. That one list drives everything a
// flag needs to travel:
//   - the command line of `zmoe serve`, `zmoe generate` and `zmoe engine-core` (cli/engine_flags.cpp),
//   - the arguments `serve`/`generate` pass to the engine-core process (engine_config_args),
//   - the welcome message the engine core sends every worker (encode_engine_config / read_engine_config),
// so a new flag is one field here plus one line in for_each_engine_flag, then read where it takes effect
// (docs/architecture.md, "Adding an engine flag").

#include <cstdint>
#include <string>
#include <vector>

namespace zmoe {

class msgpack_writer;
class field_cursor;

struct engine_config {
    // Model and device.
    std::string model;  ///< checkpoint directory (config.json, *.safetensors)
    std::string device = "cpu";
    // Parallel layout.
    int32_t workers = 1;    ///< expert-parallel ranks (worker processes)
    int32_t num_nodes = 1;  ///< nodes the workers span (hierarchical EPLB packing, threads per worker)
    /// CUDA: how the MoE exchange moves tokens between the GPUs (ep_transport_mode_of): "auto" writes peer to peer
    /// within one node (an FP8 model then sends BF16 rows, the faster copy there today) and uses NCCL send/recv
    /// across nodes; "nccl" takes NCCL send/recv on one node too, where an FP8 model dispatches FP8 records.
    std::string ep_transport = "auto";
    // Scheduler.
    /// Tokens per rank per step. 8192: a long prompt's chunks keep the experts compute-bound (one 8 192-token step
    /// beat four of 2 048 by 9% of the TTFT on an H100); the price, the running decodes' latency during the prompt,
    /// is measured beside it (docs/scheduler.md, "Chunk size").
    int32_t max_num_batched_tokens = 8192;
    int32_t max_num_seqs = 64;
    int32_t block_size = 16;
    int64_t num_kv_blocks = 0;  ///< per rank; 0 = as many as the worker's budget holds
    int32_t max_model_len = 0;  ///< 0 = the model's max_position_embeddings
    /// A max_model_len above the model's max_position_embeddings is refused unless this is set (or the environment
    /// has ZMOE_ALLOW_LONG_MAX_MODEL_LEN=1): positions past the trained ones give output of unknown quality.
    bool allow_long_max_model_len = false;
    bool no_async = false;  ///< synchronous scheduling
    // Prefix caching and placement across data-parallel ranks (docs/scheduler.md).
    bool no_enable_prefix_caching = false;
    std::string dp_placement = "cache-aware";  ///< cache-aware | least-loaded | round-robin
    int32_t dp_placement_max_imbalance = 4;    ///< cache-aware: extra requests the cached rank may hold
    // EPLB.
    bool enable_eplb = false;
    int32_t eplb_interval = 32;  ///< steps between rebalances
    int32_t eplb_window = 64;    ///< steps of expert load kept
    int32_t num_redundant_experts = 0;
    /// Steps a rebalance's weight transfer runs beside before every rank switches to the new placement (the
    /// transfer starts at one step boundary, the switch happens at the boundary this many steps later).
    int32_t eplb_stage_steps = 4;
    /// A layer's placement changes only when its balancedness on the load window gains more than this (window noise
    /// would otherwise move slots at every interval for nothing).
    double eplb_min_gain = 0.02;
    // Dual-batch overlap (engine_core/dual_batch.hpp). Defaults from the crossovers measured with the peer-to-peer
    // exchange (docs/benchmarks.md): decode steps were slower with DBO at every size measured on 2 and 4 GPUs (each
    // micro-batch re-reads the experts' weights), so they never split (2^30 tokens). Prefill steps first gained at
    // 8192 tokens per rank on 2 GPUs and at 2048 on 4 (the exchange grows with the ranks), so the prefill threshold's
    // default, 0, means "by the number of workers" (dbo_prefill_token_threshold_for).
    bool enable_dbo = false;
    int32_t dbo_decode_token_threshold = 1 << 30;
    int32_t dbo_prefill_token_threshold = 0;
    // Liveness.
    int32_t heartbeat_ms = 1000;
    /// Heartbeat intervals of silence after which a peer is dead: every actor of the run (frontend, engine core,
    /// workers) uses it, so a stall shorter than heartbeat_ms * heartbeat_max_missed is survived.
    int32_t heartbeat_max_missed = 3;
    // Worker resources.
    int32_t threads = 0;        ///< CPU kernel threads per worker; 0 = the node's cores divided among its workers
    int64_t kv_cache_mb = 256;  ///< CPU: KV cache budget per worker when num_kv_blocks is 0
    double gpu_memory_utilization = 0.9;  ///< CUDA: fraction of each GPU's memory for weights + KV cache
    std::string load_format = "auto";     ///< auto: the checkpoint's weights; dummy: random weights from config.json
    std::string quantization;             ///< "": the checkpoint's format; "fp8": quantize BF16 weights at load
    bool enforce_eager = false;           ///< CUDA: every step launched kernel by kernel (no decode CUDA graphs)
    double dummy_router_skew = 0;         ///< dummy weights: routers lean towards the highest expert ids (EPLB checks)
    bool trace_steps = false;             ///< every step's record in the metrics JSON ("steps")
    /// tokenizer.json (or its directory) the workers bind structured-output grammars to; empty: the command's
    /// --tokenizer (serve, generate), else the model directory.
    std::string grammar_tokenizer;

    bool operator==(const engine_config&) const = default;
};

/// How a flag is spelled and explained; `required` flags have no default.
struct engine_flag_info {
    const char* name;  ///< command-line spelling without the leading "--"
    const char* help;
    bool required = false;
};

/// Calls visit(info, field) for every engine flag, in a fixed order. Config may be const or not; field is then
/// `const T&` or `T&` with T one of std::string, int32_t, int64_t, double, bool (bool flags are switches).
template <typename Config, typename Visitor>
void for_each_engine_flag(Config& c, Visitor&& visit) {
    visit(engine_flag_info{"model", "checkpoint directory (config.json, *.safetensors)", true}, c.model);
    visit(engine_flag_info{"device", "cpu or cuda"}, c.device);
    visit(engine_flag_info{"workers",
                           "worker processes (expert-parallel ranks); with --device cuda, default: one per "
                           "visible GPU"},
          c.workers);
    visit(engine_flag_info{"num-nodes",
                           "nodes the workers span, for hierarchical EPLB packing (CUDA: the MoE exchange is peer "
                           "to peer within one node, NCCL send/recv over several)"},
          c.num_nodes);
    visit(engine_flag_info{"max-num-batched-tokens", "token budget per rank per step"}, c.max_num_batched_tokens);
    visit(engine_flag_info{"max-num-seqs", "running sequences per rank"}, c.max_num_seqs);
    visit(engine_flag_info{"block-size", "KV cache block size in tokens"}, c.block_size);
    visit(engine_flag_info{"num-kv-blocks",
                           "KV blocks per rank (0 = as many as --kv-cache-mb / "
                           "--gpu-memory-utilization hold)"},
          c.num_kv_blocks);
    visit(engine_flag_info{"max-model-len",
                           "prompt + generated tokens per request (0 = the model's "
                           "max_position_embeddings)"},
          c.max_model_len);
    visit(engine_flag_info{"allow-long-max-model-len",
                           "accept a --max-model-len above the model's "
                           "max_position_embeddings (also: ZMOE_ALLOW_LONG_MAX_MODEL_LEN=1)"},
          c.allow_long_max_model_len);
    visit(engine_flag_info{"no-async", "synchronous scheduling (step N+1 waits for step N's tokens)"}, c.no_async);
    visit(engine_flag_info{"no-enable-prefix-caching",
                           "turn off automatic prefix caching (on by default: full KV blocks are reused by later "
                           "requests with the same prefix and cache_salt)"},
          c.no_enable_prefix_caching);
    visit(engine_flag_info{"dp-placement",
                           "data-parallel rank of a new request: cache-aware (the rank holding its longest cached "
                           "prefix, within --dp-placement-max-imbalance), least-loaded or round-robin"},
          c.dp_placement);
    visit(engine_flag_info{"dp-placement-max-imbalance",
                           "cache-aware placement: the rank with the cached prefix is taken while its unfinished "
                           "requests exceed the least loaded rank's by at most this many"},
          c.dp_placement_max_imbalance);
    visit(engine_flag_info{"enable-eplb", "expert-parallel load balancing while serving"}, c.enable_eplb);
    visit(engine_flag_info{"eplb-interval", "steps between rebalances"}, c.eplb_interval);
    visit(engine_flag_info{"eplb-window", "steps of expert load kept"}, c.eplb_window);
    visit(engine_flag_info{"num-redundant-experts", "extra expert replicas per MoE layer"}, c.num_redundant_experts);
    visit(engine_flag_info{"eplb-stage-steps",
                           "steps an EPLB rebalance's weight transfer runs beside before every rank switches "
                           "to the new placement (0: the next step waits for it)"},
          c.eplb_stage_steps);
    visit(engine_flag_info{"eplb-min-gain",
                           "a layer's expert placement changes only when its balancedness (mean / max tokens "
                           "per rank) on the load window gains more than this"},
          c.eplb_min_gain);
    visit(engine_flag_info{"enable-dbo",
                           "dual-batch overlap: split big steps into two micro-batches, one's expert "
                           "all-to-all in flight while the other computes"},
          c.enable_dbo);
    visit(engine_flag_info{"dbo-decode-token-threshold",
                           "with --enable-dbo: a decode-only step splits when some rank "
                           "has at least this many tokens (default: never, measured slower)"},
          c.dbo_decode_token_threshold);
    visit(engine_flag_info{"dbo-prefill-token-threshold",
                           "with --enable-dbo: a step with prefill splits when some "
                           "rank has at least this many tokens (0: by the worker count, "
                           "8192 below 4 workers, 2048 from 4, the crossovers measured)"},
          c.dbo_prefill_token_threshold);
    visit(engine_flag_info{"heartbeat-ms",
                           "heartbeat interval; a peer silent for --heartbeat-max-missed intervals "
                           "is dead"},
          c.heartbeat_ms);
    visit(engine_flag_info{"heartbeat-max-missed",
                           "heartbeat tolerance of every actor (frontend, engine core, "
                           "workers): intervals of silence before a peer is declared dead"},
          c.heartbeat_max_missed);
    visit(engine_flag_info{"threads", "CPU threads per worker (0 = the node's cores / its workers)"}, c.threads);
    visit(engine_flag_info{"kv-cache-mb", "CPU: KV cache budget per worker, MiB"}, c.kv_cache_mb);
    visit(engine_flag_info{"gpu-memory-utilization", "CUDA: fraction of each GPU's memory for weights + KV cache"},
          c.gpu_memory_utilization);
    visit(engine_flag_info{"load-format",
                           "auto: the checkpoint's weights; dummy: random weights generated from "
                           "config.json (benchmarks)"},
          c.load_format);
    visit(engine_flag_info{"quantization",
                           "fp8: quantize the checkpoint's BF16 linears at load to block-scaled FP8 (e4m3, one "
                           "scale per 128x128 block, activations per token and 128 channels; docs/fp8.md); "
                           "empty: the checkpoint's own format (an FP8 checkpoint runs FP8)"},
          c.quantization);
    visit(engine_flag_info{"enforce-eager", "CUDA: run every step eagerly (no decode CUDA graphs)"}, c.enforce_eager);
    visit(engine_flag_info{"dummy-router-skew",
                           "with --load-format dummy: skew every router towards the highest expert ids (expert e "
                           "leans by about 7 S / (E - e) standard deviations; 0 = none), to exercise EPLB"},
          c.dummy_router_skew);
    visit(engine_flag_info{"trace-steps",
                           "keep every step's record (tokens, sequences, kind, time, EPLB stage/switch) in "
                           "the metrics JSON"},
          c.trace_steps);
    visit(engine_flag_info{"grammar-tokenizer",
                           "tokenizer.json (or its directory) the workers bind structured-output grammars to "
                           "(default: --tokenizer, else --model)"},
          c.grammar_tokenizer);
    // Appended last: the welcome carries the flags as [name, value] pairs in this order.
    visit(engine_flag_info{"ep-transport",
                           "CUDA: the MoE exchange between GPUs: auto (peer to peer within one node, BF16 rows; NCCL "
                           "send/recv across nodes) or nccl (NCCL send/recv everywhere; an FP8 model dispatches FP8 "
                           "records, docs/fp8.md)"},
          c.ep_transport);
}

/// The configuration as `--name value` arguments (switches only when set), parseable by the same flags.
std::vector<std::string> engine_config_args(const engine_config& c);

/// The configuration as one msgpack value (an array of [name, value] pairs), for the welcome.
void encode_engine_config(msgpack_writer& w, const engine_config& c);
/// Reads what encode_engine_config wrote. Throws zmoe::error(protocol) on an unknown name, a value of the wrong
/// type, or a malformed record.
engine_config read_engine_config(field_cursor& f, const char* field);

/// What --ep-transport selects.
enum class ep_transport_mode {
    automatic,  ///< peer to peer within one node (when every GPU maps every other's memory), else NCCL
    nccl,       ///< NCCL send/recv, on one node too
};
/// --ep-transport's value ("auto" or "nccl"). Throws zmoe::error(invalid_argument) naming any other value.
ep_transport_mode ep_transport_mode_of(const std::string& name);

/// CPU kernel threads one worker uses: `threads` if set, else the node's cores divided among its workers.
int engine_threads_per_worker(const engine_config& c, unsigned hardware_threads);

}  // namespace zmoe
