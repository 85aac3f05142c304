#include "workers/worker_actor.hpp"

#include <unistd.h>

#include <cstring>
#include <fstream>

#include "actors/peer_mesh.hpp"
#include "actors/run_secret.hpp"
#include "base/check.hpp"
#include "base/log.hpp"
#include "base/overloaded.hpp"
#include "messages/expert_placement.hpp"
#include "model/model_config.hpp"
#include "workers/expert_comm.hpp"
#include "workers/model_runner.hpp"
#include "workers/step_executor.hpp"

namespace zmoe {

namespace {

using clock_type = std::chrono::steady_clock;

/// The CPU expert-parallel collective: float buffers over the ZeroMQ peer mesh.
class mesh_expert_comm final : public expert_comm {
  public:
    mesh_expert_comm(peer_mesh& mesh, const std::atomic<bool>& cancel) : mesh_(mesh), cancel_(cancel) {}
    int rank() const override { return mesh_.rank(); }
    int world_size() const override { return mesh_.world_size(); }
    std::vector<std::vector<float>> all_to_all(std::vector<std::vector<float>> send) override {
        std::vector<std::string> bytes(send.size());
        for (size_t r = 0; r < send.size(); ++r)
            bytes[r].assign(reinterpret_cast<const char*>(send[r].data()), send[r].size() * sizeof(float));
        auto got = mesh_.all_to_all(std::move(bytes), std::chrono::seconds(120), &cancel_);
        std::vector<std::vector<float>> out(got.size());
        for (size_t r = 0; r < got.size(); ++r) {
            ZMOE_CHECK(got[r].size() % sizeof(float) == 0, "all_to_all share of " << got[r].size() << " bytes");
            out[r].resize(got[r].size() / sizeof(float));
            std::memcpy(out[r].data(), got[r].data(), got[r].size());
        }
        return out;
    }

  private:
    peer_mesh& mesh_;
    const std::atomic<bool>& cancel_;
};

uint64_t host_free_memory() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit)
        if (key == "MemAvailable:") return kb * 1024;
    return 0;
}

/// The placement the engine core sent: per MoE layer, the logical expert of each physical slot, split
/// contiguously across ranks.
expert_placement placement_from_welcome(const model_config& cfg, const worker_welcome& w) {
    const int64_t num_layers = cfg.num_moe_layers();
    const auto& rows = w.expert_placement;
    const int world = w.config.workers;
    if (static_cast<int64_t>(rows.size()) != num_layers)
        throw error(errc::invalid_argument, "welcome: expert placement has " + std::to_string(rows.size()) +
                                                " layers, the model " + std::to_string(num_layers));
    const int64_t n = rows.empty() ? 0 : static_cast<int64_t>(rows[0].size());
    if (world < 1 || n % world != 0)
        throw error(errc::invalid_argument, "welcome: " + std::to_string(n) +
                                                " expert slots per layer do not split evenly over " +
                                                std::to_string(world) + " workers");
    expert_placement p{.num_experts = static_cast<int32_t>(cfg.num_experts),
                       .num_ranks = world,
                       .slots_per_rank = static_cast<int32_t>(n / world),
                       .physical_to_logical = rows};
    if (num_layers > 0) p.validate();  // every layer as long as the first, every expert id in range and placed
    return p;
}

}  // namespace

worker_actor::worker_actor(worker_options options)
    : actor("worker_" + std::to_string(options.rank),
            actor_options{.heartbeat_interval = options.heartbeat_interval,
                          .heartbeat_max_missed = options.heartbeat_max_missed}),
      options_(std::move(options)) {}

worker_actor::~worker_actor() {
    cancel_ = true;
    {
        std::lock_guard<std::mutex> lock(mu_);
        compute_stop_ = true;
    }
    cv_.notify_all();
    if (compute_.joinable()) compute_.join();
    request_stop();
    join();
}

void worker_actor::on_start() {
    engine_sock_ = add_socket(socket_kind::dealer, [this](const inbound_message& m) { on_engine_message(m); });
    set_routing_id(engine_sock_, "worker-" + std::to_string(options_.rank) + "-" + std::to_string(getpid()));
    connect(engine_sock_, options_.engine_endpoint);
    mesh_ = std::make_unique<peer_mesh>(options_.rank, options_.data_bind, run_secret());
    worker_hello hello;
    hello.rank = options_.rank;
    hello.device = options_.device;
    hello.free_memory = host_free_memory();
    hello.pid = getpid();
    hello.data_endpoint = mesh_->endpoint();
    // Rank 0 makes the NCCL unique id (CUDA); the engine core hands it to every rank in the welcome.
    if (options_.rank == 0) hello.collective_id = make_collective_id(options_.device);
    hello.auth = run_secret();
    send_reliable(engine_sock_, encode(hello));
    watch_peer(engine_sock_, "", encode(worker_heartbeat{}),
               [this] { fail(errc::peer_dead, "the engine core stopped answering"); });
    compute_ = std::thread([this] { compute_loop(); });
    ZMOE_LOG(info, "worker " << options_.rank << ": hello sent to " << options_.engine_endpoint);
}

bool worker_actor::on_stop_requested() {
    // SIGTERM/SIGINT: stop computing and leave. A serve-driven shutdown arrives as a message instead.
    cancel_ = true;
    return true;
}

void worker_actor::fail(errc code, const std::string& why) {
    ZMOE_LOG(error, "worker " << options_.rank << ": " << why);
    exit_code_ = 1;
    send_reliable(engine_sock_, encode(worker_error{options_.rank, code, why}));
    cancel_ = true;
    stop_now();
}

void worker_actor::on_engine_message(const inbound_message& msg) {
    engine_to_worker decoded;
    try {
        decoded = decode_engine_to_worker(msg.payload);
    } catch (const error& e) {
        ZMOE_LOG(warn, "worker " << options_.rank << ": dropped a malformed message: " << e.what());
        ++malformed_dropped_;
        return;
    }
    visit_exhaustive(
        std::move(decoded), [&](const worker_welcome& m) { handle_welcome(m); },
        [&](step_request&& m) {
            submit([this, req = std::move(m)] {
                const auto t0 = clock_type::now();
                const double wait_ms = std::chrono::duration<double, std::milli>(t0 - idle_since_).count();
                maybe_switch_expert_move(req.step_id);
                step_result res = runner_->execute(req);
                res.rank = options_.rank;
                res.compute_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
                res.frames_dropped = mesh_->num_dropped() + malformed_dropped_.load();
                res.wait_ms = wait_ms;
                // Encoded and sent on the actor thread: the compute thread goes straight to the next step.
                post([this, res = std::move(res)] { send_reliable(engine_sock_, encode(res)); });
            });
        },
        [&](worker_expert_move&& m) { submit([this, mv = std::move(m)] { stage_expert_move(mv); }); },
        [&](const worker_shutdown&) {
            ZMOE_LOG(info, "worker " << options_.rank << ": shutdown");
            cancel_ = true;
            stop_now();
        },
        [](const worker_heartbeat&) {});  // a sign of life, which the runtime already noted
}

void worker_actor::handle_welcome(const worker_welcome& m) {
    if (welcomed_) return;
    if (m.rank != options_.rank) {
        fail(errc::protocol, "welcome for rank " + std::to_string(m.rank));
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mu_);
        welcome_ = m;
        welcomed_ = true;
    }
    submit([this] {
        const auto& w = welcome_;
        mesh_->connect(w.peer_endpoints);
        comm_ = std::make_unique<mesh_expert_comm>(*mesh_, cancel_);
        executor_options eo;
        eo.config = w.config;
        eo.model = model_config::load(w.config.model);  // the one parse of config.json in this process
        eo.rank = options_.rank;
        eo.comm = comm_.get();
        eo.collective_id = w.nccl_unique_id;
        // Before the weights and the KV cache take the memory: the bandwidth the engine core's floors use. A CPU
        // worker copies 64 MiB (start-up stays short), a GPU 1 GiB.
        const double copy_bandwidth =
            measure_copy_bandwidth(w.config.device, options_.rank, w.config.device == "cpu" ? size_t{64} << 20 : 0);
        runner_ = make_step_executor(eo, placement_from_welcome(eo.model, w));
        worker_ready ready;
        ready.rank = options_.rank;
        ready.num_kv_blocks = static_cast<uint64_t>(runner_->num_kv_blocks());
        ready.copy_bandwidth = copy_bandwidth;
        post([this, bytes = encode(ready)] { send_reliable(engine_sock_, bytes); });
        ZMOE_LOG(info, "worker " << options_.rank << ": model loaded from " << w.config.model << ", "
                                 << runner_->num_kv_blocks() << " KV blocks");
    });
}

std::optional<worker_welcome> worker_actor::welcome() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!welcomed_) return std::nullopt;
    return welcome_;
}

void worker_actor::stage_expert_move(const worker_expert_move& m) {
    runner_->stage_expert_moves(m.moves);
    staged_move_ = worker_expert_move{.move_id = m.move_id, .apply_at_step = m.apply_at_step, .moves = {}};
}

void worker_actor::maybe_switch_expert_move(uint64_t step_id) {
    if (!staged_move_ || step_id < staged_move_->apply_at_step) return;
    const expert_move_stats s = runner_->switch_expert_moves();
    const worker_expert_move_done done{.move_id = staged_move_->move_id,
                                       .rank = options_.rank,
                                       .bytes_moved = s.bytes,
                                       .switched_at_step = step_id,
                                       .transfer_ms = s.transfer_ms,
                                       .transfer_done = s.transfer_done,
                                       .switch_ms = s.switch_ms,
                                       .install_ms = s.install_ms};
    staged_move_.reset();
    post([this, done] { send_reliable(engine_sock_, encode(done)); });
}

void worker_actor::submit(std::function<void()> task) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
}

void worker_actor::compute_loop() {
    for (;;) {
        std::function<void()> task;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [this] { return compute_stop_ || !tasks_.empty(); });
            if (compute_stop_) return;
            task = std::move(tasks_.front());
            tasks_.pop_front();
        }
        try {
            task();
            idle_since_ = clock_type::now();
        } catch (const std::exception& e) {
            if (cancel_) return;
            const errc code = dynamic_cast<const error*>(&e) ? static_cast<const error&>(e).code() : errc::internal;
            const std::string why = e.what();
            post([this, code, why] { fail(code, why); });
            return;
        }
    }
}

}  // namespace zmoe
