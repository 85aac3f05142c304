#pragma once
// The continuous-batching scheduler of the engine core: owns every request of every data-parallel rank, decides
// what each rank computes in each step, and folds the workers' sampled tokens back in. Plain class: no sockets,
// no device; the engine core's actor drives it as schedule -> send -> collect -> update. Policy: docs/scheduler.md.

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine_core/block_hash.hpp"
#include "engine_core/kv_block_pool.hpp"
#include "engine_core/request.hpp"
#include "messages/step_types.hpp"

namespace zmoe {

/// How add_request picks a new request's data-parallel rank (docs/scheduler.md, "Placement across ranks").
enum class dp_placement : uint8_t {
    cache_aware,   ///< the rank holding its longest cached prefix, unless too loaded; else least_loaded
    least_loaded,  ///< fewest unfinished requests
    round_robin,   ///< ranks in turn
};
/// "cache-aware", "least-loaded", "round-robin".
std::string_view dp_placement_name(dp_placement p);
/// The placement of that name; throws zmoe::error(invalid_argument) naming the choices otherwise.
dp_placement dp_placement_from_name(std::string_view name);

struct scheduler_config {
    int32_t max_num_batched_tokens = 8192;     ///< tokens per rank per step (prefill chunks + decodes), >= 1
    int32_t max_num_seqs = 64;                 ///< running requests per rank (and so sequences per step), >= 1
    int32_t block_size = 16;                   ///< token slots per KV block
    std::vector<int32_t> num_blocks_per_rank;  ///< KV blocks of each data-parallel rank; its size is the rank count
    int32_t max_model_len = 0;                 ///< prompt + max_tokens limit, >= 1
    /// Allow schedule() for step N+1 before update() of step N (at most two steps in flight).
    bool async_scheduling = true;
    /// Automatic prefix caching: full computed blocks are published under their hash chain and reused by later
    /// requests with the same prefix (docs/scheduler.md, "Prefix caching").
    bool enable_prefix_caching = true;
    dp_placement placement = dp_placement::cache_aware;
    /// cache_aware: the rank with the longest cached prefix is taken only while its unfinished requests exceed
    /// the least loaded rank's by at most this many; >= 0.
    int32_t placement_max_imbalance = 4;
};

/// Counters for metrics. Per-rank vectors are indexed by rank.
struct scheduler_stats {
    std::vector<int32_t> num_running;
    std::vector<int32_t> num_waiting;
    std::vector<int32_t> num_blocks_used;
    std::vector<int32_t> num_blocks_total;
    std::vector<int32_t> num_tokens_scheduled;         ///< in the latest schedule()
    std::vector<uint64_t> num_tokens_scheduled_total;  ///< since construction
    uint64_t num_steps = 0;
    uint64_t num_preemptions = 0;
    uint64_t num_discarded_tokens = 0;  ///< sampled for a request that had already finished (the step past a stop)
    // Prefix caching, per rank. Queries and hits count tokens, once per request (at its first scheduling): its
    // prompt length, and the prompt tokens its cached prefix spared.
    std::vector<uint64_t> prefix_cache_queries;
    std::vector<uint64_t> prefix_cache_hits;
    std::vector<int32_t> num_blocks_cached;    ///< blocks holding a published hash (in use or free)
    std::vector<uint64_t> num_blocks_evicted;  ///< cached blocks reused for other content
    std::vector<uint64_t> num_placed;          ///< requests add_request sent to each rank
    // Placement decisions since construction.
    uint64_t num_placed_cache_hit = 0;     ///< cache_aware: to the rank with the longest cached prefix
    uint64_t num_placed_overloaded = 0;    ///< cache_aware: that rank was too loaded, least loaded instead
    uint64_t num_placed_least_loaded = 0;  ///< no cached prefix anywhere (cache_aware), or least_loaded
    uint64_t num_placed_round_robin = 0;
};

class scheduler {
  public:
    /// Throws zmoe::error(invalid_argument) naming the bad field of `config`.
    explicit scheduler(scheduler_config config);
    ~scheduler();
    scheduler(const scheduler&) = delete;
    scheduler& operator=(const scheduler&) = delete;

    /// Queues a request on a rank that can hold it, chosen by config.placement, and returns that rank. Load is the
    /// number of unfinished (running + waiting) requests, ties broken by their total known tokens, then by the lower
    /// rank; cache_aware prefers the rank holding the longest prefix of the prompt (cached, or being computed by a
    /// step in flight) while its load is within placement_max_imbalance of the least loaded rank's.
    /// Throws zmoe::error: invalid_argument for an empty prompt, a negative prompt token, max_tokens < 1,
    /// prompt + max_tokens > max_model_len or an id already held; out_of_memory when prompt + max_tokens can never
    /// fit in any rank's KV pool. Ids must not be reused while a previous holder's id is still to be reported in a
    /// step's finished_ids.
    int32_t add_request(new_request req);

    /// Ends a request wherever it is (waiting, running, with a step in flight) and frees its blocks. Returns its
    /// final output (no new tokens, finished, `reason`), or nullopt when the id is unknown (already finished).
    /// Tokens still in flight for it are discarded when they arrive.
    std::optional<request_output> abort_request(uint64_t id, finish_reason reason = finish_reason::abort);

    /// Whether schedule() may be called now: no step in flight (sync), fewer than two (async).
    bool can_schedule() const;
    /// Steps returned by schedule() whose results have not yet been given to update().
    int32_t num_in_flight() const;
    /// The oldest step in flight (the one update() takes next), or nullopt when none is.
    std::optional<uint64_t> oldest_in_flight() const;
    /// Whether step `step_id` was returned by schedule() and its results are not yet given to update().
    bool is_in_flight(uint64_t step_id) const;
    /// The id the next schedule() gives its step.
    uint64_t next_step_id() const { return next_step_id_; }
    /// Whether a schedule() now could give some rank work (a waiting request or a running one still to sample).
    /// False while the only unfinished requests wait for their last in-flight token.
    bool has_pending_work() const;
    /// Requests held (running or waiting, not finished).
    int32_t num_unfinished() const { return static_cast<int32_t>(requests_.size()); }

    /// Plans the next step: exactly one step_request per rank, index = rank, all with the same step_id (empty seqs
    /// where a rank has nothing to do). Requires can_schedule().
    std::vector<step_request> schedule();

    /// Takes the results of the oldest step in flight, one step_result per rank (any order). Appends sampled
    /// tokens, applies stop conditions and returns, per request that gained a token or finished, its output
    /// (ordered by rank, then by position in the step). Throws zmoe::error(protocol), changing nothing, when the
    /// results do not match that step (wrong step id, missing/duplicate rank, tokens not matching the sampled
    /// sequences).
    std::vector<request_output> update(const std::vector<step_result>& results);

    scheduler_stats stats() const;
    const scheduler_config& config() const { return config_; }
    int32_t num_ranks() const;
    /// Rank holding request `id`, or -1.
    int32_t rank_of(uint64_t id) const;
    const kv_block_pool& pool(int32_t rank) const;

  private:
    struct request_state;
    struct rank_state;
    // Who sampled in a step that is still out, per rank in step order, so results can be matched and stale tokens
    // (for a request that ended meanwhile) told apart from live ones.
    // A chunk a step computes: once the step is done, the request's full blocks up to `end` hold computed KV and
    // are published (if the request is still the same incarnation). `pending` are the hashes of the full blocks it
    // completes, known when it was sent: a waiting request whose next block is among them waits for it.
    struct computed_chunk {
        uint64_t id = 0;
        uint64_t serial = 0;
        uint32_t epoch = 0;
        int32_t rank = 0;
        int32_t end = 0;
        std::vector<block_hash> pending;
    };
    struct in_flight_step {
        uint64_t step_id = 0;
        std::vector<std::vector<std::pair<uint64_t, uint64_t>>> samples;  // [rank] -> (request id, serial)
        std::vector<computed_chunk> computed;
    };

    void schedule_rank(rank_state& rank, step_request& out, in_flight_step& flight);
    bool grow_blocks(rank_state& rank, request_state& req, int32_t num_new_tokens, uint64_t step_id, bool& preempted);
    void preempt(rank_state& rank, request_state& req);
    void finish(request_state& req);
    void emit(request_state& req, int32_t num_tokens, uint64_t step_id, step_request& out, in_flight_step& flight);
    /// The rank for a new request (extends its hash chain for the lookup), or -1 when no rank can hold it.
    int32_t place(request_state& req, int64_t kv_tokens);
    /// Full blocks of the request's known tokens a cache hit may cover: (known - 1) / block_size, the last token is
    /// always computed (its logits are the sample). 0 when prefix caching is off or the request reads its history.
    int32_t max_hit_blocks(request_state& req);
    /// Cached (or, with `pending`, being computed) leading blocks of `req` on `rank`, at most `limit`.
    int32_t prefix_on_rank(const rank_state& rank, const request_state& req, int32_t limit, bool pending) const;
    void publish_computed(const in_flight_step& flight);

    scheduler_config config_;
    std::vector<rank_state> ranks_;
    std::unordered_map<uint64_t, std::unique_ptr<request_state>> requests_;
    std::deque<in_flight_step> in_flight_;
    uint64_t next_step_id_ = 0;
    uint64_t next_serial_ = 0;
    uint64_t num_steps_ = 0;
    uint64_t num_preemptions_ = 0;
    uint64_t num_discarded_tokens_ = 0;
    block_hasher hasher_;
    uint64_t next_round_robin_ = 0;
    uint64_t num_placed_cache_hit_ = 0;
    uint64_t num_placed_overloaded_ = 0;
    uint64_t num_placed_least_loaded_ = 0;
    uint64_t num_placed_round_robin_ = 0;
};

}  // namespace zmoe
