#pragma once
// What the engine core measures of its steps: when each went out and came back, its served time (from when the
// workers could start it to its last result), its memory floor (the bytes it had to read over the workers' copy
// bandwidth, model/step_floor.hpp), the decode-only totals `zmoe bench serve` reads (docs/bench.md), the
// scheduler gauges, and with --trace-steps every step's record. Plain class: times are passed in, so tests can
// give exact ones; metrics go to the registry it is given.

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/metrics.hpp"
#include "engine_core/scheduler.hpp"
#include "messages/step_types.hpp"
#include "model/step_floor.hpp"

namespace zmoe {

class step_accounting {
  public:
    using clock_type = std::chrono::steady_clock;

    /// `num_ranks` workers serving a model of `floor`; `trace` keeps every step's record. Metrics go to `metrics`,
    /// which must outlive this object.
    step_accounting(step_floor_model floor, int32_t num_ranks, bool trace, metrics_registry& metrics);

    /// Each rank's device copy bandwidth in bytes/s (its worker_ready); a rank at 0 (unknown) leaves the floor out.
    void set_copy_bandwidth(std::vector<double> bytes_per_second);

    /// Step `steps[0].step_id` went out: `steps` are its per-rank shares (index = rank), planned from
    /// `planned_at` and handed to the transport by `sent_at` in `message_bytes` bytes.
    void step_sent(const std::vector<step_request>& steps, clock_type::time_point planned_at,
                   clock_type::time_point sent_at, size_t message_bytes);
    /// Step `step_id` has every rank's result at `now`: its time, served time and floor. Steps finish in the order
    /// they were sent (a worker runs its steps in order).
    void step_done(uint64_t step_id, const std::vector<step_result>& results, clock_type::time_point now);
    /// An event of a step to come or in flight, shown in its trace record ("eplb": "stage 1 switch 0 ").
    void note_event(uint64_t step_id, const std::string& event);

    /// The scheduler's gauges (running, waiting, KV blocks per rank and in total, preemptions, discarded tokens)
    /// and the steps in flight.
    void set_gauges(const scheduler_stats& stats, int32_t steps_in_flight);
    /// Gauges of what the floor is made of, and each rank's copy bandwidth.
    void set_floor_gauges();

    /// --trace-steps: the records of the finished steps, oldest first (empty without trace).
    const std::vector<nlohmann::json>& trace() const { return trace_; }
    /// Steps sent whose results are not all in.
    size_t num_open() const { return records_.size(); }

  private:
    struct step_record {
        clock_type::time_point sent_at;
        bool decode_only = false;           ///< every scheduled sequence of every rank feeds one token
        std::vector<int64_t> kv_positions;  ///< per rank: cached positions its attention reads (sum over sequences)
        int64_t num_tokens = 0;             ///< over all ranks
        int64_t num_seqs = 0;               ///< over all ranks
        int64_t max_rank_tokens = 0;        ///< the busiest rank's tokens
    };

    step_floor_model floor_;
    int32_t num_ranks_;
    bool trace_on_;
    metrics_registry& metrics_;
    std::vector<double> copy_bandwidth_;
    std::map<uint64_t, step_record> records_;
    clock_type::time_point last_step_done_{};  ///< when the previous step's results were complete
    std::vector<nlohmann::json> trace_;
    std::map<uint64_t, std::string> events_;  ///< step id -> its events, until the step is traced
};

}  // namespace zmoe
