#pragma once
// The engine core as an actor: owns the scheduler, the per-rank KV block accounting, EPLB and the step loop,
// and nothing on a device. Two ROUTER sockets: one the workers connect to, one the frontend connects to.
//
// Takes from workers:  hello, ready, step_result, heartbeat, expert_move_done, error
// Sends to workers:    welcome, step (every rank, every step), heartbeat, shutdown, expert_move
// Takes from frontend: hello, add_request, abort, metrics, heartbeat, shutdown
// Sends to frontend:   welcome, outputs (one per step), metrics_reply, heartbeat, error
//
// Life: waiting for num_workers hellos -> welcome every worker -> waiting for every ready -> serving ->
// (shutdown from the frontend: drain, stop workers, exit 0) or (a worker dies: fail every request with a clear
// error, stop the other workers, exit 1).

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/actor.hpp"
#include "actors/run_secret.hpp"
#include "base/metrics.hpp"
#include "engine_core/dual_batch.hpp"
#include "engine_core/expert_load.hpp"
#include "engine_core/scheduler.hpp"
#include "engine_core/stats_line.hpp"
#include "messages/engine_protocol.hpp"
#include "messages/expert_placement.hpp"
#include "messages/worker_protocol.hpp"
#include "workers/model_config.hpp"
#include "workers/step_floor.hpp"

namespace zmoe {

struct engine_core_options {
    std::string worker_endpoint;    ///< bound; workers connect here
    std::string frontend_endpoint;  ///< bound; the frontend connects here
    engine_config config;           ///< the run's configuration; every worker gets it in its welcome
    /// How often the stats line (throughput, running/waiting, KV usage) is logged while serving; 0 = never.
    std::chrono::milliseconds stats_interval{5000};
};

class engine_core_actor : public actor {
  public:
    explicit engine_core_actor(engine_core_options options);
    ~engine_core_actor() override;

    /// Reads the model's config.json (config.model): throws zmoe::error(invalid_checkpoint / unsupported) before
    /// anything starts when the checkpoint cannot be served.
    /// 0 after a clean shutdown, 1 after a failure (dead worker, failed handshake).
    int exit_code() const { return exit_code_; }
    /// Resolved bound endpoints (after start).
    const std::string& worker_endpoint() const { return bound_worker_endpoint_; }
    const std::string& frontend_endpoint() const { return bound_frontend_endpoint_; }

  protected:
    void on_start() override;
    bool on_stop_requested() override;
    void on_exit() override;

  private:
    enum class phase { waiting_hello, waiting_ready, serving, draining, failed };
    struct worker_info {
        std::string identity;
        int64_t pid = 0;
        std::string device;
        std::string data_endpoint;
        std::string collective_id;  // rank 0: NCCL unique id for the welcome
        bool ready = false;
        int64_t num_kv_blocks = 0;
        double copy_bandwidth = 0;  ///< bytes/s its device copies (worker_ready); 0 = unknown
        bool alive = true;
        metrics_registry metrics;
    };

    // Worker link.
    void on_worker_message(const inbound_message& msg);
    void handle_hello(const std::string& identity, const worker_hello& m);
    void handle_ready(int32_t rank, const worker_ready& m);
    void handle_step_result(int32_t rank, step_result&& m);
    void handle_move_done(const worker_expert_move_done& m);
    void worker_died(int32_t rank, const std::string& why);
    // Frontend link.
    void on_frontend_message(const inbound_message& msg);
    void handle_add_request(engine_add_request&& m);
    void handle_abort(const engine_abort& m);
    void send_to_frontend(const std::string& bytes);
    void send_frontend_welcome();
    // The step loop.
    void pump();
    void finish_step();
    void emit_outputs(uint64_t step_id, const std::vector<request_output>& outs);
    void maybe_rebalance();
    void fail_everything(errc code, const std::string& why);
    void broadcast_shutdown();
    void maybe_finish_drain();
    void update_gauges();
    nlohmann::json metrics_json();

    engine_core_options options_;
    std::string secret_ = run_secret();  ///< the run's secret; every hello must carry it
    phase phase_ = phase::waiting_hello;
    int exit_code_ = 0;
    socket_id worker_sock_ = -1;
    socket_id frontend_sock_ = -1;
    std::string bound_worker_endpoint_;
    std::string bound_frontend_endpoint_;
    std::string frontend_identity_;
    std::vector<worker_info> workers_;  // by rank
    std::map<std::string, int32_t> rank_of_identity_;
    model_config model_;  // config.json, read once at construction
    /// Dual-batch overlap: which steps run as two micro-batches (decided here, sent in every rank's step). The CUDA
    /// backend does not do DBO yet: with device "cuda" it is turned off with a warning.
    dbo_options dbo_;
    int32_t max_model_len_ = 0;
    std::unique_ptr<scheduler> scheduler_;
    std::deque<uint64_t> in_flight_;                                       // step ids sent, oldest first
    std::map<uint64_t, std::vector<std::optional<step_result>>> results_;  // step id -> by rank
    /// What the served-step accounting needs of a step in flight (docs/benchmarks.md, served decode).
    struct step_record {
        std::chrono::steady_clock::time_point sent_at;
        bool decode_only = false;           ///< every scheduled sequence of every rank feeds one token
        std::vector<int64_t> kv_positions;  ///< per rank: cached positions its attention reads (sum over sequences)
        int64_t num_tokens = 0;             ///< over all ranks
        int64_t num_seqs = 0;               ///< over all ranks
        int64_t max_rank_tokens = 0;        ///< the busiest rank's tokens
        double served_ms = 0;               ///< account_step's served time
    };
    std::map<uint64_t, step_record> step_records_;
    std::chrono::steady_clock::time_point last_step_done_;  ///< when the previous step's results were complete
    step_floor_model floor_model_;                          ///< the model's bytes, for the steps' memory floor
    /// Tokens routed to each (MoE layer, expert) since start, summed over ranks; the expert_tokens counters are
    /// written from it when metrics are asked for (not per step: 6 144 named series for a 48-layer, 128-expert model).
    std::vector<double> expert_tokens_;
    /// Served-step accounting of one finished step: its time, its memory floor, the workers' idle wait.
    void account_step(uint64_t step_id, const std::vector<step_result>& results);
    std::map<uint64_t, uint32_t> prompt_len_;  // unfinished request id -> prompt tokens
    // EPLB.
    std::unique_ptr<expert_load_window> load_window_;
    std::optional<expert_placement> placement_;
    uint64_t steps_since_rebalance_ = 0;
    uint64_t next_move_id_ = 1;
    uint64_t next_step_id_ = 0;
    bool shutdown_sent_ = false;
    std::chrono::steady_clock::time_point move_started_at_;
    std::set<int32_t> move_acks_pending_;
    uint64_t move_stage_step_ = 0;   ///< the pending rebalance: the step before which every rank stages it
    uint64_t move_switch_step_ = 0;  ///< and the step from which its placement serves
    /// --trace-steps: every finished step's record ("steps" in the metrics JSON), with its EPLB events.
    std::vector<nlohmann::json> step_trace_;
    std::map<uint64_t, std::string> step_events_;  // step id -> "stage N" / "switch N" (EPLB rebalance N)
    metrics_registry metrics_;
    stats_line stats_line_;
    /// Logs the stats line (on a timer, every options_.stats_interval while serving).
    void log_stats();
    std::chrono::steady_clock::time_point started_at_;
};

}  // namespace zmoe
