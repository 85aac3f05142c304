#pragma once
// A worker as an actor: one per GPU (or CPU shard). The actor thread only moves messages and heartbeats; a
// compute thread owns the model runner and runs steps and expert moves in arrival order, so a long step never
// silences the heartbeat.
//
// Takes from the engine core: welcome, step, expert_move, heartbeat, shutdown
// Sends to the engine core:   hello, ready, step_result, expert_move_done, heartbeat, error

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "actors/actor.hpp"
#include "messages/worker_protocol.hpp"

namespace zmoe {

class peer_mesh;
class step_executor;
class expert_comm;

/// What a worker process knows before the welcome: where the engine core is, its rank, the backend it brings up
/// (rank 0 makes the NCCL id for it in the hello) and its link's heartbeat. Everything else about the run comes
/// in the welcome's engine_config.
struct worker_options {
    std::string engine_endpoint;  ///< the engine core's worker ROUTER
    int32_t rank = 0;
    std::string device = "cpu";
    std::string data_bind = "tcp://127.0.0.1:*";  ///< where peers reach this worker for the all-to-all
    std::chrono::milliseconds heartbeat_interval{1000};
    int heartbeat_max_missed = 3;  ///< intervals of silence before the engine core is declared dead
};

class worker_actor : public actor {
  public:
    explicit worker_actor(worker_options options);
    ~worker_actor() override;
    /// 0 after a shutdown from the engine core; 1 after a failure (engine core gone, model load failed).
    int exit_code() const { return exit_code_; }
    /// Once the welcome arrived: the run's configuration and the expert placement (per MoE layer, the logical
    /// expert of each physical slot) this worker was told to use. Empty before.
    std::optional<worker_welcome> welcome() const;

  protected:
    void on_start() override;
    bool on_stop_requested() override;

  private:
    void on_engine_message(const inbound_message& msg);
    void handle_welcome(const worker_welcome& m);
    void fail(errc code, const std::string& why);
    /// Queues work for the compute thread.
    void submit(std::function<void()> task);
    void compute_loop();
    /// Compute thread: stages an EPLB rebalance (a collective: every rank reaches it between the same two steps).
    void stage_expert_move(const worker_expert_move& m);
    /// Compute thread, before each step: switches to the staged rebalance once the step is its apply_at_step, and
    /// reports it to the engine core.
    void maybe_switch_expert_move(uint64_t step_id);

    worker_options options_;
    socket_id engine_sock_ = -1;
    int exit_code_ = 0;
    bool welcomed_ = false;
    worker_welcome welcome_;  // written once by the actor thread before welcomed_ is published under mu_
    std::unique_ptr<peer_mesh> mesh_;
    std::unique_ptr<expert_comm> comm_;
    std::unique_ptr<step_executor> runner_;          // touched only by the compute thread once created
    std::optional<worker_expert_move> staged_move_;  // compute thread: a staged rebalance (moves left empty)
    std::atomic<bool> cancel_{false};
    std::atomic<uint64_t> malformed_dropped_{0};  ///< undecodable engine-core messages (reported in step results)
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> tasks_;
    bool compute_stop_ = false;
    std::thread compute_;
    /// When the compute thread last finished a task (touched only by it): a step's wait_ms is counted from here.
    std::chrono::steady_clock::time_point idle_since_ = std::chrono::steady_clock::now();
};

}  // namespace zmoe
