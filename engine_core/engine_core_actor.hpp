#pragma once
// The engine core as an actor: the sockets, the handshake and the sends around the engine (engine_core.hpp), which
// holds the scheduler, EPLB and the step loop. Nothing on a device. Two ROUTER sockets: one the workers connect
// to, one the frontend connects to.
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
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/actor.hpp"
#include "actors/run_secret.hpp"
#include "engine_core/engine_core.hpp"
#include "messages/engine_config.hpp"
#include "messages/engine_protocol.hpp"
#include "messages/worker_protocol.hpp"

namespace zmoe {

struct engine_core_options {
    std::string worker_endpoint;    ///< bound; workers connect here
    std::string frontend_endpoint;  ///< bound; the frontend connects here
    engine_config config;           ///< the run's configuration; every worker gets it in its welcome
    /// How often the stats line (throughput, running/waiting, KV usage) is logged while serving; 0 = never.
    std::chrono::milliseconds stats_interval{5000};
};

class engine_core_actor : public actor, private engine_core_sink {
  public:
    /// Reads the model's config.json (config.model): throws zmoe::error(invalid_checkpoint / unsupported) before
    /// anything starts when the checkpoint cannot be served.
    explicit engine_core_actor(engine_core_options options);
    ~engine_core_actor() override;

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
        worker_hello hello;  ///< pid, device, data endpoint; rank 0's carries the NCCL unique id
        bool ready = false;
        rank_capacity capacity;
        bool alive = true;
    };

    // engine_core_sink: the engine's sends.
    size_t send_step(int32_t rank, const step_request& step) override;
    void send_expert_move(const worker_expert_move& move) override;
    void send_outputs(const engine_outputs& outputs) override;

    void on_worker_message(const inbound_message& msg);
    void handle_hello(const std::string& identity, const worker_hello& m);
    void handle_ready(int32_t rank, const worker_ready& m);
    void worker_died(int32_t rank, const std::string& why);
    void on_frontend_message(const inbound_message& msg);
    void handle_frontend_hello(const std::string& identity, const engine_hello& m);
    void handle_add_request(engine_add_request&& m);
    void handle_shutdown();
    void send_to_frontend(const std::string& bytes);
    void send_frontend_welcome();
    void fail_everything(errc code, const std::string& why);
    void broadcast_shutdown();
    void maybe_finish_drain();
    std::string metrics_reply_json();

    engine_core_options options_;
    std::string secret_ = run_secret();  ///< the run's secret; every hello must carry it
    engine_core core_;
    phase phase_ = phase::waiting_hello;
    int exit_code_ = 0;
    bool shutdown_sent_ = false;
    socket_id worker_sock_ = -1;
    socket_id frontend_sock_ = -1;
    std::string bound_worker_endpoint_;
    std::string bound_frontend_endpoint_;
    std::string frontend_identity_;
    std::vector<worker_info> workers_;  // by rank
    std::map<std::string, int32_t> rank_of_identity_;
    std::chrono::steady_clock::time_point started_at_;
};

}  // namespace zmoe
