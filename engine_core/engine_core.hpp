#pragma once
// The engine: requests in, steps out, results in, outputs out. It owns the scheduler (the one owner of the
// requests and of the steps in flight), the EPLB coordinator, the step accounting and the engine's metrics, and no
// socket: what it sends goes through an engine_core_sink, so the actor (engine_core_actor.hpp) puts it on the wire
// and the tests hand it to fake workers. The loop, as vLLM's EngineCore.step():
//
//   add_request / abort_request      the frontend's requests
//   pump                             schedule -> send, while the scheduler allows (two steps in flight when async)
//   take_result                      collect each rank's result; a complete step (the oldest first) -> update ->
//                                    outputs, EPLB (maybe a rebalance to stage) -> pump
//
// Not thread-safe: one thread (the actor's) calls everything.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/error.hpp"
#include "base/metrics.hpp"
#include "engine_core/dual_batch.hpp"
#include "engine_core/eplb_coordinator.hpp"
#include "engine_core/scheduler.hpp"
#include "engine_core/stats_line.hpp"
#include "engine_core/step_accounting.hpp"
#include "messages/engine_config.hpp"
#include "messages/engine_protocol.hpp"
#include "messages/worker_protocol.hpp"
#include "model/model_config.hpp"
#include "model/step_floor.hpp"

namespace zmoe {

/// Where the engine's messages go. Calls come in the order the messages must leave in.
class engine_core_sink {
  public:
    virtual ~engine_core_sink() = default;
    /// Rank `rank`'s share of step `step.step_id` (every rank gets one per step, empty or not). Returns the bytes
    /// it took on the wire (0 if not encoded).
    virtual size_t send_step(int32_t rank, const step_request& step) = 0;
    /// An expert move for every rank; it goes out before the step it stages at (move.apply_at_step minus the stage
    /// steps: the next step sent).
    virtual void send_expert_move(const worker_expert_move& move) = 0;
    /// Outputs for the frontend: one message per finished step with outputs, per abort, per refused request.
    virtual void send_outputs(const engine_outputs& outputs) = 0;
};

/// What a worker brought up: its KV blocks and the copy bandwidth it measured (worker_ready).
struct rank_capacity {
    int64_t num_kv_blocks = 0;
    double copy_bandwidth = 0;  ///< bytes/s; 0 = unknown
};

/// The output that refuses `request` with `code` and `why` (finished, finish_reason::error).
engine_outputs refused_request(const engine_add_request& request, errc code, const std::string& why);

class engine_core {
  public:
    using clock_type = std::chrono::steady_clock;

    /// `config` is the run's; `model` its checkpoint's config.json. Throws zmoe::error(invalid_argument) for
    /// fewer than one worker. `sink` must outlive the engine.
    engine_core(engine_config config, model_config model, engine_core_sink& sink);
    ~engine_core();
    engine_core(const engine_core&) = delete;
    engine_core& operator=(const engine_core&) = delete;

    /// Starts serving on `ranks` (index = rank, one per worker): sizes the scheduler from their KV blocks. Throws
    /// zmoe::error, serving nothing, when the run cannot serve: out_of_memory for a rank without KV blocks,
    /// invalid_argument for a --max-model-len above the model's max_position_embeddings (unless allowed).
    void start(const std::vector<rank_capacity>& ranks);
    /// start() succeeded and halt() was not called.
    bool serving() const { return scheduler_ != nullptr && !halted_; }

    /// Queues a request (EOS ids folded into its stop ids unless ignore_eos) and sends what can go out. A request
    /// the scheduler refuses gets its error output (send_outputs) at once. Requires serving().
    void add_request(engine_add_request&& m);
    /// Ends request `id` wherever it is and sends its final output; an unknown (finished) id is ignored.
    void abort_request(uint64_t id);
    /// Rank `rank`'s result of a step. Results of a step no longer (or never) in flight are dropped with a warning.
    /// When the oldest steps in flight are complete they are finished in order (outputs sent, EPLB fed and maybe
    /// a rebalance staged) and the next steps sent. Throws zmoe::error(internal) when the results contradict the
    /// step they answer (the run cannot go on: the caller fails it).
    void take_result(int32_t rank, step_result&& m);
    /// A rank's acknowledgement of an expert move.
    void take_move_done(const worker_expert_move_done& m);
    /// Sends steps while the scheduler has work and room for another step in flight. Does nothing unless serving.
    void pump();
    /// Observes request_queue_time_ms for each request these steps take for the first time.
    void observe_queue_times(const std::vector<step_request>& steps, clock_type::time_point now);

    /// Ends every unfinished request with an error output (`code`, `why`) and stops scheduling.
    void fail_all(errc code, const std::string& why);
    /// Ends every unfinished request silently (nobody is listening) and stops scheduling.
    void halt();
    /// No unfinished request and no step in flight (a drain is complete).
    bool idle() const;

    /// The engine's metrics; the owner adds its own (frames_dropped, hellos_refused, failures, ...).
    metrics_registry& metrics() { return metrics_; }
    /// Rank `rank`'s metrics as the engine sees them (step times, sampled tokens, the worker's running totals).
    metrics_registry& rank_metrics(int32_t rank) { return rank_metrics_.at(static_cast<size_t>(rank)); }
    /// The metrics JSON: {"engine_core": ..., "worker_<r>": ..., "eplb_placement": ..., "steps": ...} with every
    /// gauge brought up to date.
    nlohmann::json metrics_json();
    /// The periodic stats line for the interval ending `now` (stats_line.hpp), or nullopt.
    std::optional<std::string> stats_line_at(clock_type::time_point now);

    int32_t max_model_len() const { return max_model_len_; }
    const dbo_options& dbo() const { return dbo_; }
    const model_config& model() const { return model_; }
    const eplb_coordinator& eplb() const { return eplb_; }
    const step_accounting& accounting() const { return accounting_; }
    /// The scheduler, once started (null before).
    const scheduler* sched() const { return scheduler_.get(); }

  private:
    void finish_step(uint64_t step_id);
    void set_prefix_cache_metrics(const scheduler_stats& st);
    void emit_outputs(uint64_t step_id, const std::vector<request_output>& outs);

    engine_config config_;
    model_config model_;
    engine_core_sink& sink_;
    dbo_options dbo_;
    metrics_registry metrics_;
    std::vector<metrics_registry> rank_metrics_;
    eplb_coordinator eplb_;
    step_accounting accounting_;
    stats_line stats_line_;
    std::unique_ptr<scheduler> scheduler_;
    bool halted_ = false;
    int32_t max_model_len_ = 0;
    /// Results received of steps still in flight (the scheduler says which are), by step id, then rank.
    std::map<uint64_t, std::vector<std::optional<step_result>>> arrived_;
    std::map<uint64_t, uint32_t> prompt_len_;  ///< unfinished request id -> prompt tokens
    /// Requests added and not yet in any step: when they arrived (their queue time, vLLM's
    /// request_queue_time_seconds, is observed as request_queue_time_ms when a step first takes them).
    std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> queued_since_;
};

}  // namespace zmoe
