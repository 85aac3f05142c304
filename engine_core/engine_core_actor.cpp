#include "engine_core/engine_core_actor.hpp"

#include "base/log.hpp"
#include "base/overloaded.hpp"

namespace zmoe {

using clock_type = std::chrono::steady_clock;

engine_core_actor::engine_core_actor(engine_core_options options)
    : actor("engine_core", actor_options{.heartbeat_interval = std::chrono::milliseconds(options.config.heartbeat_ms),
                                         .heartbeat_max_missed = options.config.heartbeat_max_missed}),
      options_(std::move(options)),
      core_(options_.config, model_config::load(options_.config.model), *this) {
    workers_.resize(static_cast<size_t>(options_.config.workers));
}

engine_core_actor::~engine_core_actor() {
    request_stop();
    join();
}

void engine_core_actor::on_start() {
    started_at_ = clock_type::now();
    // Counters of hostile or broken input exist from the start (0 is an answer, not a missing series).
    core_.metrics().counter_add("frames_dropped", 0);
    core_.metrics().counter_add("hellos_refused", 0);
    worker_sock_ = add_socket(socket_kind::router, [this](const inbound_message& m) { on_worker_message(m); });
    frontend_sock_ = add_socket(socket_kind::router, [this](const inbound_message& m) { on_frontend_message(m); });
    bound_worker_endpoint_ = bind(worker_sock_, options_.worker_endpoint);
    bound_frontend_endpoint_ = bind(frontend_sock_, options_.frontend_endpoint);
    ZMOE_LOG(info, "engine core: waiting for " << options_.config.workers << " worker(s) on " << bound_worker_endpoint_
                                               << ", frontend on " << bound_frontend_endpoint_);
}

bool engine_core_actor::on_stop_requested() {
    // SIGTERM to the engine core itself: drain like a frontend shutdown would.
    if (phase_ == phase::serving) {
        phase_ = phase::draining;
        maybe_finish_drain();
        return false;
    }
    if (phase_ == phase::draining) return false;
    broadcast_shutdown();
    return true;
}

void engine_core_actor::on_exit() { broadcast_shutdown(); }

size_t engine_core_actor::send_step(int32_t rank, const step_request& step) {
    const std::string bytes = encode(step);
    send_reliable_to(worker_sock_, workers_[static_cast<size_t>(rank)].identity, bytes);
    return bytes.size();
}

void engine_core_actor::send_expert_move(const worker_expert_move& move) {
    const std::string bytes = encode(move);
    for (const auto& w : workers_) send_reliable_to(worker_sock_, w.identity, bytes);
}

void engine_core_actor::send_outputs(const engine_outputs& outputs) { send_to_frontend(encode(outputs)); }

void engine_core_actor::on_worker_message(const inbound_message& msg) {
    worker_to_engine decoded;
    try {
        decoded = decode_worker_to_engine(msg.payload);
    } catch (const error& e) {
        ZMOE_LOG(warn, "engine core: dropped a malformed worker message: " << e.what());
        core_.metrics().counter_add("frames_dropped");
        return;
    }
    const std::string identity(msg.peer);
    const auto it = rank_of_identity_.find(identity);
    const int32_t rank = it == rank_of_identity_.end() ? -1 : it->second;
    if (rank < 0 && !std::holds_alternative<worker_hello>(decoded)) {
        ZMOE_LOG(warn, "engine core: message from a worker that never said hello; dropped");
        core_.metrics().counter_add("frames_dropped");
        return;
    }
    visit_exhaustive(
        std::move(decoded), [&](const worker_hello& m) { handle_hello(identity, m); },
        [&](const worker_ready& m) { handle_ready(rank, m); },
        [&](step_result&& m) {
            try {
                core_.take_result(rank, std::move(m));
            } catch (const error& e) {  // the results contradict their step: the run cannot go on
                return fail_everything(e.code(), e.what());
            }
            maybe_finish_drain();
        },
        [&](const worker_expert_move_done& m) { core_.take_move_done(m); },
        [&](const worker_error& m) { worker_died(rank, "worker " + std::to_string(rank) + " failed: " + m.message); },
        [](const worker_heartbeat&) {});  // a sign of life, which the runtime already noted
}

void engine_core_actor::handle_hello(const std::string& identity, const worker_hello& m) {
    if (!secrets_equal(m.auth, secret_)) {
        core_.metrics().counter_add("hellos_refused");
        ZMOE_LOG(warn, "engine core: a worker hello without this run's secret; refused");
        send_to(worker_sock_, identity, encode(worker_error{m.rank, errc::protocol, "hello refused: not of this run"}));
        return;
    }
    if (phase_ != phase::waiting_hello) {
        ZMOE_LOG(warn, "engine core: late hello from rank " << m.rank << "; ignored");
        return;
    }
    // The worker's --device says which backend it brought up (rank 0 made the NCCL id for it): it must be the run's.
    const engine_config& c = options_.config;
    const std::string device_kind = m.device.substr(0, m.device.find(':'));
    if (m.protocol_version != kWorkerProtocolVersion || m.rank < 0 || m.rank >= c.workers ||
        !workers_[m.rank].identity.empty() || device_kind != c.device) {
        worker_error err{m.rank, errc::protocol,
                         "hello refused: rank " + std::to_string(m.rank) + " of " + std::to_string(c.workers) +
                             ", protocol " + std::to_string(m.protocol_version) + ", device " + m.device +
                             " (the run's: " + c.device + ")"};
        send_to(worker_sock_, identity, encode(err));
        ZMOE_LOG(warn, "engine core: " << err.message);
        return;
    }
    const int32_t rank = m.rank;
    workers_[rank].identity = identity;
    workers_[rank].hello = m;
    rank_of_identity_[identity] = rank;
    watch_peer(worker_sock_, identity, encode(worker_heartbeat{}), [this, rank] {
        worker_died(rank, "worker " + std::to_string(rank) + " (pid " + std::to_string(workers_[rank].hello.pid) +
                              ") stopped answering");
    });
    ZMOE_LOG(info, "engine core: worker " << rank << " (pid " << m.pid << ", " << m.device << ") said hello");
    if (rank_of_identity_.size() < static_cast<size_t>(c.workers)) return;

    phase_ = phase::waiting_ready;
    worker_welcome wel;
    wel.config = c;
    if (const auto& placement = core_.eplb().placement()) wel.expert_placement = placement->physical_to_logical;
    for (const auto& w : workers_) wel.peer_endpoints.push_back(w.hello.data_endpoint);
    wel.nccl_unique_id = workers_[0].hello.collective_id;  // rank 0's NCCL id
    for (int32_t r = 0; r < c.workers; ++r) {
        wel.rank = r;
        send_reliable_to(worker_sock_, workers_[r].identity, encode(wel));
    }
}

void engine_core_actor::handle_ready(int32_t rank, const worker_ready& m) {
    if (phase_ != phase::waiting_ready || workers_[rank].ready) return;
    workers_[rank].ready = true;
    workers_[rank].capacity = {.num_kv_blocks = static_cast<int64_t>(m.num_kv_blocks),
                               .copy_bandwidth = m.copy_bandwidth};
    ZMOE_LOG(info, "engine core: worker " << rank << " ready with " << m.num_kv_blocks << " KV blocks");
    std::vector<rank_capacity> ranks;
    for (const auto& w : workers_) {
        if (!w.ready) return;
        ranks.push_back(w.capacity);
    }
    try {
        core_.start(ranks);  // refuses a run that would fail every request
    } catch (const error& e) {
        return fail_everything(e.code(), e.what());
    }
    phase_ = phase::serving;
    if (options_.stats_interval.count() > 0) {
        const auto log_stats = [this] {
            if (const auto line = core_.stats_line_at(clock_type::now())) ZMOE_LOG(info, "engine core: " << *line);
        };
        log_stats();  // starts the first interval
        add_timer(options_.stats_interval, log_stats, true);
    }
    if (!frontend_identity_.empty()) send_frontend_welcome();
}

void engine_core_actor::worker_died(int32_t rank, const std::string& why) {
    if (!workers_[rank].alive) return;
    workers_[rank].alive = false;
    ZMOE_LOG(error, "engine core: " << why);
    fail_everything(errc::peer_dead, why);
}

void engine_core_actor::fail_everything(errc code, const std::string& why) {
    if (phase_ == phase::failed) return;
    phase_ = phase::failed;
    exit_code_ = 1;
    core_.metrics().counter_add("failures");
    core_.fail_all(code, why);
    send_to_frontend(encode(engine_error{code, why}));
    broadcast_shutdown();
    // Let the error replies leave before the process goes.
    add_timer(std::chrono::milliseconds(300), [this] { stop_now(); });
}

void engine_core_actor::broadcast_shutdown() {
    if (shutdown_sent_) return;
    shutdown_sent_ = true;
    for (const auto& w : workers_)
        if (!w.identity.empty() && w.alive) send_reliable_to(worker_sock_, w.identity, encode(worker_shutdown{}));
}

void engine_core_actor::maybe_finish_drain() {
    if (phase_ != phase::draining || !core_.idle()) return;
    ZMOE_LOG(info, "engine core: drained; stopping workers");
    broadcast_shutdown();
    add_timer(std::chrono::milliseconds(100), [this] { stop_now(); });
}

void engine_core_actor::send_to_frontend(const std::string& bytes) {
    if (!frontend_identity_.empty()) send_reliable_to(frontend_sock_, frontend_identity_, bytes);
}

void engine_core_actor::on_frontend_message(const inbound_message& msg) {
    frontend_to_engine decoded;
    try {
        decoded = decode_frontend_to_engine(msg.payload);
    } catch (const error& e) {
        ZMOE_LOG(warn, "engine core: dropped a malformed frontend message: " << e.what());
        core_.metrics().counter_add("frames_dropped");
        send_to(frontend_sock_, msg.peer, encode(engine_error{errc::protocol, e.what()}));
        return;
    }
    const std::string identity(msg.peer);
    if (identity != frontend_identity_ && !std::holds_alternative<engine_hello>(decoded)) {
        send_to(frontend_sock_, identity, encode(engine_error{errc::protocol, "send hello first"}));
        return;
    }
    visit_exhaustive(
        std::move(decoded), [&](const engine_hello& m) { handle_frontend_hello(identity, m); },
        [&](engine_add_request&& m) { handle_add_request(std::move(m)); },
        [&](const engine_abort& m) {
            core_.abort_request(m.request_id);
            maybe_finish_drain();
        },
        [&](const engine_metrics& m) {
            send_to_frontend(encode(engine_metrics_reply{m.tag, metrics_reply_json()}));
        },
        [&](const engine_shutdown&) { handle_shutdown(); },
        [](const engine_heartbeat&) {});  // a sign of life, which the runtime already noted
}

void engine_core_actor::handle_frontend_hello(const std::string& identity, const engine_hello& m) {
    // Only this run's frontend may take the frontend's place: anyone else's hello is refused and changes nothing.
    if (!secrets_equal(m.auth, secret_)) {
        core_.metrics().counter_add("hellos_refused");
        ZMOE_LOG(warn, "engine core: a frontend hello without this run's secret; refused");
        send_to(frontend_sock_, identity, encode(engine_error{errc::protocol, "hello refused: not of this run"}));
        return;
    }
    if (!frontend_identity_.empty() && frontend_identity_ != identity) unwatch_peer(frontend_sock_, frontend_identity_);
    frontend_identity_ = identity;
    watch_peer(frontend_sock_, identity, encode(engine_heartbeat{}), [this] {
        ZMOE_LOG(error, "engine core: the frontend stopped answering; stopping the run");
        core_.halt();
        frontend_identity_.clear();
        exit_code_ = 1;
        phase_ = phase::failed;
        broadcast_shutdown();
        add_timer(std::chrono::milliseconds(300), [this] { stop_now(); });
    });
    if (phase_ == phase::serving || phase_ == phase::draining) send_frontend_welcome();
}

void engine_core_actor::handle_add_request(engine_add_request&& m) {
    if (phase_ != phase::serving) {
        const bool failed = phase_ == phase::failed;
        send_to_frontend(encode(refused_request(m, failed ? errc::peer_dead : errc::unsupported,
                                                failed ? "the engine has failed" : "the engine is not serving")));
        return;
    }
    core_.add_request(std::move(m));
}

void engine_core_actor::handle_shutdown() {
    ZMOE_LOG(info, "engine core: shutdown requested; draining");
    if (phase_ == phase::serving) phase_ = phase::draining;
    if (phase_ == phase::draining) return maybe_finish_drain();
    broadcast_shutdown();
    add_timer(std::chrono::milliseconds(100), [this] { stop_now(); });
}

void engine_core_actor::send_frontend_welcome() {
    const engine_config& c = options_.config;
    send_to_frontend(encode(engine_welcome{.num_workers = static_cast<uint32_t>(c.workers),
                                           .max_num_seqs = static_cast<uint32_t>(c.max_num_seqs),
                                           .max_model_len = static_cast<uint32_t>(core_.max_model_len()),
                                           .block_size = static_cast<uint32_t>(c.block_size),
                                           .num_kv_blocks = static_cast<uint64_t>(workers_[0].capacity.num_kv_blocks),
                                           .heartbeat_interval_ms = static_cast<uint32_t>(c.heartbeat_ms)}));
}

std::string engine_core_actor::metrics_reply_json() {
    metrics_registry& m = core_.metrics();
    int alive = 0;
    for (size_t r = 0; r < workers_.size(); ++r) {
        alive += workers_[r].alive ? 1 : 0;
        core_.rank_metrics(static_cast<int32_t>(r)).gauge_set("alive", workers_[r].alive ? 1 : 0);
    }
    m.gauge_set("workers_alive", alive);
    m.gauge_set("workers", options_.config.workers);
    m.gauge_set("uptime_s", std::chrono::duration<double>(clock_type::now() - started_at_).count());
    return core_.metrics_json().dump();
}

}  // namespace zmoe
