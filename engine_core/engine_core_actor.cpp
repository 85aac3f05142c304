#include "engine_core/engine_core_actor.hpp"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "actors/run_secret.hpp"
#include "base/check.hpp"
#include "base/log.hpp"
#include "engine_core/eplb.hpp"
#include "engine_core/expert_move_plan.hpp"

namespace zmoe {

using clock_type = std::chrono::steady_clock;

namespace {

double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

}  // namespace

engine_core_actor::engine_core_actor(engine_core_options options)
    : actor("engine_core", actor_options{.heartbeat_interval = std::chrono::milliseconds(options.config.heartbeat_ms),
                                         .heartbeat_max_missed = options.config.heartbeat_max_missed}),
      options_(std::move(options)),
      model_(model_config::load(options_.config.model)),
      floor_model_(step_floor_model::of(model_)) {
    const engine_config& c = options_.config;
    if (c.workers < 1) throw error(errc::invalid_argument, "--workers must be >= 1");
    workers_.resize(c.workers);
    dbo_ = dbo_options::of(c.enable_dbo, c.dbo_decode_token_threshold, c.dbo_prefill_token_threshold, c.workers);
    if (model_.num_moe_layers() > 0) {
        placement_ =
            expert_placement::initial(static_cast<int32_t>(model_.num_moe_layers()),
                                      static_cast<int32_t>(model_.num_experts), c.num_redundant_experts, c.workers);
        if (placement_->num_redundant() != c.num_redundant_experts)
            ZMOE_LOG(info, "engine core: " << placement_->num_redundant() << " redundant expert slot(s) per layer so "
                                           << placement_->num_physical() << " slots split evenly over " << c.workers
                                           << " workers");
    }
}

engine_core_actor::~engine_core_actor() {
    request_stop();
    join();
}

void engine_core_actor::on_start() {
    started_at_ = clock_type::now();
    // Counters of hostile or broken input exist from the start (0 is an answer, not a missing series).
    metrics_.counter_add("frames_dropped", 0);
    metrics_.counter_add("hellos_refused", 0);
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

// ---------------------------------------------------------------------------------------------------------------
// Workers

void engine_core_actor::on_worker_message(const inbound_message& msg) {
    worker_to_engine decoded;
    try {
        decoded = decode_worker_to_engine(msg.payload);
    } catch (const error& e) {
        ZMOE_LOG(warn, "engine core: dropped a malformed worker message: " << e.what());
        metrics_.counter_add("frames_dropped");
        return;
    }
    const std::string identity(msg.peer);
    if (auto* hello = std::get_if<worker_hello>(&decoded)) {
        handle_hello(identity, *hello);
        return;
    }
    auto it = rank_of_identity_.find(identity);
    if (it == rank_of_identity_.end()) {
        ZMOE_LOG(warn, "engine core: message from a worker that never said hello; dropped");
        metrics_.counter_add("frames_dropped");
        return;
    }
    const int32_t rank = it->second;
    std::visit(
        [&](auto&& m) {
            using T = std::decay_t<decltype(m)>;
            if constexpr (std::is_same_v<T, worker_ready>) {
                handle_ready(rank, m);
            } else if constexpr (std::is_same_v<T, step_result>) {
                handle_step_result(rank, std::move(m));
            } else if constexpr (std::is_same_v<T, worker_expert_move_done>) {
                handle_move_done(m);
            } else if constexpr (std::is_same_v<T, worker_error>) {
                worker_died(rank, "worker " + std::to_string(rank) + " failed: " + m.message);
            }
            // heartbeats only count as signs of life, which the runtime already noted
        },
        std::move(decoded));
}

void engine_core_actor::handle_hello(const std::string& identity, const worker_hello& m) {
    if (!secrets_equal(m.auth, secret_)) {
        metrics_.counter_add("hellos_refused");
        ZMOE_LOG(warn, "engine core: a worker hello without this run's secret; refused");
        send_to(worker_sock_, identity, encode(worker_error{m.rank, errc::protocol, "hello refused: not of this run"}));
        return;
    }
    if (phase_ != phase::waiting_hello) {
        ZMOE_LOG(warn, "engine core: late hello from rank " << m.rank << "; ignored");
        return;
    }
    // The worker's --device says which backend it brought up (rank 0 made the NCCL id for it): it must be the run's.
    const std::string device_kind = m.device.substr(0, m.device.find(':'));
    if (m.protocol_version != kWorkerProtocolVersion || m.rank < 0 || m.rank >= options_.config.workers ||
        !workers_[m.rank].identity.empty() || device_kind != options_.config.device) {
        worker_error err{m.rank, errc::protocol,
                         "hello refused: rank " + std::to_string(m.rank) + " of " +
                             std::to_string(options_.config.workers) + ", protocol " +
                             std::to_string(m.protocol_version) + ", device " + m.device +
                             " (the run's: " + options_.config.device + ")"};
        send_to(worker_sock_, identity, encode(err));
        ZMOE_LOG(warn, "engine core: " << err.message);
        return;
    }
    auto& w = workers_[m.rank];
    w.identity = identity;
    w.pid = m.pid;
    w.device = m.device;
    w.data_endpoint = m.data_endpoint;
    w.collective_id = m.collective_id;
    rank_of_identity_[identity] = m.rank;
    const int32_t rank = m.rank;
    watch_peer(worker_sock_, identity, encode(worker_heartbeat{}), [this, rank] {
        worker_died(rank, "worker " + std::to_string(rank) + " (pid " + std::to_string(workers_[rank].pid) +
                              ") stopped answering");
    });
    ZMOE_LOG(info, "engine core: worker " << rank << " (pid " << m.pid << ", " << m.device << ") said hello");
    if (rank_of_identity_.size() < static_cast<size_t>(options_.config.workers)) return;

    phase_ = phase::waiting_ready;
    std::vector<std::string> peers;
    for (const auto& wi : workers_) peers.push_back(wi.data_endpoint);
    for (int32_t r = 0; r < options_.config.workers; ++r) {
        worker_welcome wel;
        wel.rank = r;
        wel.config = options_.config;
        if (placement_) wel.expert_placement = placement_->physical_to_logical;
        wel.peer_endpoints = peers;
        wel.nccl_unique_id = workers_[0].collective_id;
        send_reliable_to(worker_sock_, workers_[r].identity, encode(wel));
    }
}

void engine_core_actor::handle_ready(int32_t rank, const worker_ready& m) {
    if (phase_ != phase::waiting_ready || workers_[rank].ready) return;
    workers_[rank].ready = true;
    workers_[rank].num_kv_blocks = static_cast<int64_t>(m.num_kv_blocks);
    workers_[rank].copy_bandwidth = m.copy_bandwidth;
    ZMOE_LOG(info, "engine core: worker " << rank << " ready with " << m.num_kv_blocks << " KV blocks");
    for (const auto& w : workers_)
        if (!w.ready) return;

    // Every worker is ready. Start-up fails loudly rather than serving a run that fails every request.
    for (size_t r = 0; r < workers_.size(); ++r)
        if (workers_[r].num_kv_blocks <= 0)
            return fail_everything(errc::out_of_memory,
                                   "worker " + std::to_string(r) +
                                       " has no KV cache blocks (raise --kv-cache-mb, --num-kv-blocks or "
                                       "--gpu-memory-utilization)");
    const engine_config& c = options_.config;
    const int64_t model_len = model_.max_position_embeddings;
    const char* allow_long_env = std::getenv("ZMOE_ALLOW_LONG_MAX_MODEL_LEN");
    const bool allow_long = c.allow_long_max_model_len || (allow_long_env && std::string(allow_long_env) == "1");
    if (c.max_model_len > 0 && model_len > 0 && c.max_model_len > model_len && !allow_long)
        return fail_everything(errc::invalid_argument,
                               "--max-model-len " + std::to_string(c.max_model_len) +
                                   " exceeds the model's max_position_embeddings " + std::to_string(model_len) +
                                   " (pass --allow-long-max-model-len, or set ZMOE_ALLOW_LONG_MAX_MODEL_LEN=1, to "
                                   "override)");

    // Size the scheduler from what each worker could allocate.
    scheduler_config cfg;
    cfg.max_num_batched_tokens = c.max_num_batched_tokens;
    cfg.max_num_seqs = c.max_num_seqs;
    cfg.block_size = c.block_size;
    cfg.async_scheduling = !c.no_async;
    cfg.max_model_len = c.max_model_len > 0 ? c.max_model_len : static_cast<int32_t>(model_.max_position_embeddings);
    if (cfg.max_model_len <= 0) cfg.max_model_len = 4096;
    for (const auto& w : workers_) cfg.num_blocks_per_rank.push_back(static_cast<int32_t>(w.num_kv_blocks));
    scheduler_ = std::make_unique<scheduler>(cfg);
    max_model_len_ = cfg.max_model_len;
    phase_ = phase::serving;
    if (options_.stats_interval.count() > 0) {
        log_stats();  // starts the first interval
        add_timer(
            options_.stats_interval, [this] { log_stats(); }, true);
    }
    if (placement_) {
        const int32_t window = c.eplb_window > 0 ? c.eplb_window : 32;
        load_window_ =
            std::make_unique<expert_load_window>(placement_->num_moe_layers(), placement_->num_experts, window);
    }
    ZMOE_LOG(info, "engine core: serving (" << c.workers << " rank(s), max_model_len " << cfg.max_model_len
                                            << ", async " << (cfg.async_scheduling ? "on" : "off") << ")");
    if (dbo_.enabled)
        ZMOE_LOG(info, "engine core: dual-batch overlap on: a step splits at "
                           << dbo_.prefill_token_threshold << " tokens on some rank with prefill, "
                           << dbo_.decode_token_threshold << " when decoding only");
    if (!frontend_identity_.empty()) send_frontend_welcome();
    update_gauges();
}

void engine_core_actor::send_frontend_welcome() {
    engine_welcome wel;
    wel.num_workers = static_cast<uint32_t>(options_.config.workers);
    wel.max_num_seqs = static_cast<uint32_t>(options_.config.max_num_seqs);
    wel.max_model_len = static_cast<uint32_t>(max_model_len_);
    wel.block_size = static_cast<uint32_t>(options_.config.block_size);
    wel.num_kv_blocks = workers_.empty() ? 0 : static_cast<uint64_t>(workers_[0].num_kv_blocks);
    wel.heartbeat_interval_ms = static_cast<uint32_t>(options_.config.heartbeat_ms);
    send_to_frontend(encode(wel));
}

void engine_core_actor::handle_step_result(int32_t rank, step_result&& m) {
    auto it = results_.find(m.step_id);
    if (it == results_.end() || rank >= static_cast<int32_t>(it->second.size()) || it->second[rank]) {
        ZMOE_LOG(warn, "engine core: unexpected result of step " << m.step_id << " from rank " << rank);
        return;
    }
    auto& w = workers_[rank].metrics;
    w.observe("step_compute_ms", m.compute_ms);
    w.observe("step_wait_ms", m.wait_ms);
    w.counter_add("steps");
    w.counter_add("sampled_tokens", static_cast<double>(m.tokens.size()));
    // The worker reports running totals: the counters follow them (docs/reliability.md, hostile input).
    w.counter_follow("frames_dropped", static_cast<double>(m.frames_dropped));
    w.counter_follow("exchange_steps_redone", static_cast<double>(m.exchange_steps_redone));
    it->second[rank] = std::move(m);
    while (!in_flight_.empty()) {
        auto& slot = results_[in_flight_.front()];
        if (!std::all_of(slot.begin(), slot.end(), [](const auto& r) { return r.has_value(); })) break;
        finish_step();
    }
    pump();
}

void engine_core_actor::finish_step() {
    const uint64_t step_id = in_flight_.front();
    in_flight_.pop_front();
    std::vector<step_result> results;
    for (auto& r : results_[step_id]) results.push_back(std::move(*r));
    results_.erase(step_id);
    const double step_ms = ms_since(step_records_[step_id].sent_at);
    metrics_.observe("step_ms", step_ms);
    account_step(step_id, results);
    if (options_.config.trace_steps) {
        const step_record& rec = step_records_[step_id];
        nlohmann::json t = {
            {"step", step_id},          {"ms", step_ms},        {"served_ms", rec.served_ms},
            {"tokens", rec.num_tokens}, {"seqs", rec.num_seqs}, {"max_rank_tokens", rec.max_rank_tokens},
            {"decode", rec.decode_only}};
        if (auto e = step_events_.find(step_id); e != step_events_.end()) {
            t["eplb"] = e->second;
            step_events_.erase(e);
        }
        step_trace_.push_back(std::move(t));
    }
    step_records_.erase(step_id);
    std::vector<request_output> outs;
    try {
        outs = scheduler_->update(results);
    } catch (const error& e) {
        fail_everything(errc::internal, std::string("step results rejected: ") + e.what());
        return;
    }
    if (load_window_) {
        try {
            load_window_->add_step(results);  // checks every rank's counts have the window's size
            for (const auto& r : results) {
                if (r.expert_counts.empty()) continue;
                expert_tokens_.resize(r.expert_counts.size(), 0.0);
                for (size_t i = 0; i < r.expert_counts.size(); ++i) expert_tokens_[i] += r.expert_counts[i];
            }
        } catch (const error& e) {
            ZMOE_LOG(warn, "engine core: expert counts ignored: " << e.what());
        }
    }
    for (const auto& r : results)
        metrics_.counter_add("tokens_sampled{rank=\"" + std::to_string(r.rank) + "\"}",
                             static_cast<double>(r.tokens.size()));
    emit_outputs(step_id, outs);
    ++steps_since_rebalance_;
    maybe_rebalance();
    update_gauges();
    maybe_finish_drain();
}

void engine_core_actor::account_step(uint64_t step_id, const std::vector<step_result>& results) {
    const auto now = clock_type::now();
    const step_record& rec = step_records_[step_id];
    // Served time of the step: from when the workers could start it (sent, and the previous step done: a worker
    // runs steps in order) to when its last result arrived.
    const auto start = std::max(rec.sent_at, last_step_done_);
    last_step_done_ = now;
    const double served_ms = std::chrono::duration<double, std::milli>(now - start).count();
    step_records_[step_id].served_ms = served_ms;
    // Memory floor: every rank reads the dense weights and its sequences' KV; the experts the step's tokens touched
    // are read once, split evenly over the ranks (exact with one worker). The slowest rank sets the floor.
    std::vector<uint32_t> counts;
    double wait_ms = 0;
    for (const step_result& r : results) {
        if (counts.size() < r.expert_counts.size()) counts.resize(r.expert_counts.size(), 0);
        for (size_t i = 0; i < r.expert_counts.size(); ++i) counts[i] += r.expert_counts[i];
        wait_ms = std::max(wait_ms, r.wait_ms);
    }
    const int64_t touched = experts_touched(counts);
    const double expert_share = static_cast<double>(touched) * static_cast<double>(floor_model_.expert_bytes) /
                                static_cast<double>(std::max<size_t>(1, workers_.size()));
    double floor_ms = 0;
    bool have_floor = true;
    for (size_t r = 0; r < workers_.size(); ++r) {
        const double bw = workers_[r].copy_bandwidth;
        if (!(bw > 0)) {
            have_floor = false;
            break;
        }
        const double bytes =
            floor_model_.bytes(0, r < rec.kv_positions.size() ? rec.kv_positions[r] : 0) + expert_share;
        floor_ms = std::max(floor_ms, bytes / bw * 1e3);
    }
    double sampled = 0;
    for (const step_result& r : results) sampled += static_cast<double>(r.tokens.size());
    metrics_.counter_add("served_step_ms", served_ms);
    if (have_floor) metrics_.counter_add("floor_step_ms", floor_ms);
    if (!rec.decode_only) return;
    metrics_.counter_add("decode_steps");
    metrics_.counter_add("decode_tokens", sampled);
    metrics_.counter_add("decode_served_step_ms", served_ms);
    metrics_.counter_add("decode_worker_wait_ms", wait_ms);
    if (have_floor) metrics_.counter_add("decode_floor_step_ms", floor_ms);
    metrics_.observe("decode_step_ms", served_ms);
}

void engine_core_actor::pump() {
    if (phase_ != phase::serving && phase_ != phase::draining) return;
    while (scheduler_->has_pending_work() && scheduler_->can_schedule()) {
        const auto t0 = clock_type::now();
        auto steps = scheduler_->schedule();
        const uint64_t step_id = steps.front().step_id;
        next_step_id_ = step_id + 1;
        in_flight_.push_back(step_id);
        results_[step_id].assign(options_.config.workers, std::nullopt);
        step_record& rec = step_records_[step_id];
        rec.kv_positions.assign(steps.size(), 0);
        rec.decode_only = true;
        const bool dual_batch = should_split_step(steps, dbo_);
        if (dual_batch) metrics_.counter_add("dbo_steps");
        size_t num_tokens = 0, num_seqs = 0, message_bytes = 0;
        for (int32_t r = 0; r < options_.config.workers; ++r) {
            steps[r].dual_batch = dual_batch;
            size_t rank_tokens = 0;
            for (const auto& s : steps[r].seqs) {
                num_tokens += s.token_ids.size();
                rank_tokens += s.token_ids.size();
                rec.kv_positions[r] += s.start_pos + static_cast<int64_t>(s.token_ids.size());
                rec.decode_only = rec.decode_only && s.token_ids.size() == 1;
            }
            num_seqs += steps[r].seqs.size();
            rec.max_rank_tokens = std::max(rec.max_rank_tokens, static_cast<int64_t>(rank_tokens));
            const std::string bytes = encode(steps[r]);
            message_bytes += bytes.size();
            send_reliable_to(worker_sock_, workers_[r].identity, bytes);
        }
        rec.decode_only = rec.decode_only && num_seqs > 0;
        rec.num_tokens = static_cast<int64_t>(num_tokens);
        rec.num_seqs = static_cast<int64_t>(num_seqs);
        rec.sent_at = clock_type::now();
        metrics_.counter_add("steps");
        metrics_.observe("step_tokens", static_cast<double>(num_tokens));
        // Host time of the step loop: planning, encoding and handing the step to ZeroMQ, and the bytes sent.
        metrics_.observe("schedule_ms", std::chrono::duration<double, std::milli>(rec.sent_at - t0).count());
        metrics_.observe("step_message_bytes", static_cast<double>(message_bytes));
    }
    update_gauges();
}

void engine_core_actor::emit_outputs(uint64_t step_id, const std::vector<request_output>& outs) {
    if (outs.empty()) return;
    engine_outputs msg;
    msg.step_id = step_id;
    for (const auto& o : outs) {
        engine_request_output e;
        e.request_id = o.id;
        e.new_token_ids = o.new_tokens;
        e.finished = o.finished;
        e.reason = o.reason;
        auto p = prompt_len_.find(o.id);
        e.num_prompt_tokens = p == prompt_len_.end() ? 0 : p->second;
        e.new_logprobs = o.new_logprobs;
        metrics_.counter_add("generation_tokens", static_cast<double>(o.new_tokens.size()));
        if (o.finished) {
            prompt_len_.erase(o.id);
            metrics_.counter_add(std::string("requests_finished{reason=\"") +
                                 std::string(finish_reason_name(o.reason)) + "\"}");
        }
        msg.outputs.push_back(std::move(e));
    }
    send_to_frontend(encode(msg));
}

void engine_core_actor::maybe_rebalance() {
    const engine_config& c = options_.config;
    if (!c.enable_eplb || !placement_ || !load_window_ || !move_acks_pending_.empty()) return;
    if (c.eplb_interval <= 0 || steps_since_rebalance_ < static_cast<uint64_t>(c.eplb_interval)) return;
    steps_since_rebalance_ = 0;
    const auto load = load_window_->load();
    rebalance_plan plan;
    try {
        plan = plan_rebalance(load, *placement_, options_.config.num_nodes, 0, std::max(0.0, c.eplb_min_gain));
    } catch (const error& e) {
        ZMOE_LOG(warn, "engine core: EPLB skipped: " << e.what());
        return;
    }
    // The current placement on the latest window, every evaluation; before/after figures of adopted rebalances.
    metrics_.gauge_set("eplb_balancedness_current", plan.balancedness_before);
    if (plan.changed_layers.empty()) {
        metrics_.counter_add("eplb_plans_not_adopted");  // no layer improved: the placement stays
        return;
    }
    metrics_.gauge_set("eplb_balancedness_before", plan.balancedness_before);
    metrics_.gauge_set("eplb_balancedness_after", plan.balancedness_after);
    for (size_t l = 0; l < load.size(); ++l) {
        metrics_.gauge_set("eplb_layer_balancedness_before{layer=\"" + std::to_string(l) + "\"}",
                           layer_balancedness(load[l], placement_->physical_to_logical[l], options_.config.workers));
        metrics_.gauge_set("eplb_layer_balancedness_after{layer=\"" + std::to_string(l) + "\"}",
                           layer_balancedness(load[l], plan.placement.physical_to_logical[l], options_.config.workers));
    }
    const auto moves = plan_expert_moves(*placement_, plan.placement, options_.config.num_nodes);
    // Every rank stages the moves before step next_step_id_ (this message goes out before that step's), and the
    // steps go on meanwhile on the current placement; all switch before step apply_at_step.
    worker_expert_move msg;
    msg.move_id = next_move_id_++;
    msg.apply_at_step = next_step_id_ + static_cast<uint64_t>(std::max(0, c.eplb_stage_steps));
    move_stage_step_ = next_step_id_;
    move_switch_step_ = msg.apply_at_step;
    if (c.trace_steps) {
        step_events_[move_stage_step_] += "stage " + std::to_string(msg.move_id) + " ";
        step_events_[move_switch_step_] += "switch " + std::to_string(msg.move_id) + " ";
    }
    for (const auto& m : moves)
        msg.moves.push_back(expert_slot_move{static_cast<uint32_t>(m.layer), static_cast<uint32_t>(m.dst_slot),
                                             m.logical_expert, m.src_rank, static_cast<uint32_t>(m.src_slot)});
    for (int32_t r = 0; r < options_.config.workers; ++r) {
        move_acks_pending_.insert(r);
        send_reliable_to(worker_sock_, workers_[r].identity, encode(msg));
    }
    move_started_at_ = clock_type::now();
    placement_ = std::move(plan.placement);
    metrics_.counter_add("eplb_expert_moves", static_cast<double>(moves.size()));
    ZMOE_LOG(info, "engine core: EPLB rebalance " << msg.move_id << ": " << moves.size() << " slot move(s), "
                                                  << "balancedness " << plan.balancedness_before << " -> "
                                                  << plan.balancedness_after);
}

void engine_core_actor::handle_move_done(const worker_expert_move_done& m) {
    if (!move_acks_pending_.erase(m.rank)) return;
    if (m.switched_at_step != move_switch_step_)
        ZMOE_LOG(warn, "engine core: rank " << m.rank << " switched expert move " << m.move_id << " at step "
                                            << m.switched_at_step << ", not " << move_switch_step_);
    metrics_.counter_add("eplb_bytes_moved", static_cast<double>(m.bytes_moved));
    // Per rank and rebalance: the transfer's own time, and what the switch cost at its step boundary.
    metrics_.observe("eplb_transfer_ms", m.transfer_ms);
    metrics_.observe("eplb_switch_ms", m.switch_ms);
    metrics_.observe("eplb_install_ms", m.install_ms);
    if (!m.transfer_done) metrics_.counter_add("eplb_switches_waited");  // the switch step waited for the transfer
    if (!move_acks_pending_.empty()) return;
    // The one metric whose name says "rebalance": completed rebalances (every rank installed the moves).
    metrics_.counter_add("eplb_rebalances");
    metrics_.observe("eplb_move_ms", ms_since(move_started_at_));
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
    metrics_.counter_add("failures");
    if (scheduler_) {
        engine_outputs msg;
        for (auto& [id, len] : prompt_len_) {
            scheduler_->abort_request(id, finish_reason::error);
            engine_request_output e;
            e.request_id = id;
            e.finished = true;
            e.reason = finish_reason::error;
            e.error_code = code;
            e.error_message = why;
            e.num_prompt_tokens = len;
            msg.outputs.push_back(std::move(e));
        }
        prompt_len_.clear();
        if (!msg.outputs.empty()) send_to_frontend(encode(msg));
    }
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
    if (phase_ != phase::draining) return;
    if (scheduler_ && (scheduler_->num_unfinished() > 0 || !in_flight_.empty())) return;
    ZMOE_LOG(info, "engine core: drained; stopping workers");
    broadcast_shutdown();
    add_timer(std::chrono::milliseconds(100), [this] { stop_now(); });
}

// ---------------------------------------------------------------------------------------------------------------
// Frontend

void engine_core_actor::send_to_frontend(const std::string& bytes) {
    if (!frontend_identity_.empty()) send_reliable_to(frontend_sock_, frontend_identity_, bytes);
}

void engine_core_actor::on_frontend_message(const inbound_message& msg) {
    frontend_to_engine decoded;
    try {
        decoded = decode_frontend_to_engine(msg.payload);
    } catch (const error& e) {
        ZMOE_LOG(warn, "engine core: dropped a malformed frontend message: " << e.what());
        metrics_.counter_add("frames_dropped");
        send_to(frontend_sock_, msg.peer, encode(engine_error{errc::protocol, e.what()}));
        return;
    }
    const std::string identity(msg.peer);
    if (auto* hello = std::get_if<engine_hello>(&decoded)) {
        // Only this run's frontend may take the frontend's place: anyone else's hello is refused and changes nothing.
        if (!secrets_equal(hello->auth, secret_)) {
            metrics_.counter_add("hellos_refused");
            ZMOE_LOG(warn, "engine core: a frontend hello without this run's secret; refused");
            send_to(frontend_sock_, identity, encode(engine_error{errc::protocol, "hello refused: not of this run"}));
            return;
        }
        if (!frontend_identity_.empty() && frontend_identity_ != identity)
            unwatch_peer(frontend_sock_, frontend_identity_);
        frontend_identity_ = identity;
        watch_peer(frontend_sock_, identity, encode(engine_heartbeat{}), [this] {
            ZMOE_LOG(error, "engine core: the frontend stopped answering; stopping the run");
            if (scheduler_)
                for (auto& [id, len] : prompt_len_) scheduler_->abort_request(id);
            prompt_len_.clear();
            frontend_identity_.clear();
            exit_code_ = 1;
            phase_ = phase::failed;
            broadcast_shutdown();
            add_timer(std::chrono::milliseconds(300), [this] { stop_now(); });
        });
        if (phase_ == phase::serving || phase_ == phase::draining) send_frontend_welcome();
        return;
    }
    if (identity != frontend_identity_) {
        send_to(frontend_sock_, identity, encode(engine_error{errc::protocol, "send hello first"}));
        return;
    }
    std::visit(
        [&](auto&& m) {
            using T = std::decay_t<decltype(m)>;
            if constexpr (std::is_same_v<T, engine_add_request>) {
                handle_add_request(std::move(m));
            } else if constexpr (std::is_same_v<T, engine_abort>) {
                handle_abort(m);
            } else if constexpr (std::is_same_v<T, engine_metrics>) {
                send_to_frontend(encode(engine_metrics_reply{m.tag, metrics_json().dump()}));
            } else if constexpr (std::is_same_v<T, engine_shutdown>) {
                ZMOE_LOG(info, "engine core: shutdown requested; draining");
                if (phase_ == phase::serving) phase_ = phase::draining;
                if (phase_ == phase::draining) {
                    maybe_finish_drain();
                } else {
                    broadcast_shutdown();
                    add_timer(std::chrono::milliseconds(100), [this] { stop_now(); });
                }
            }
        },
        std::move(decoded));
}

void engine_core_actor::handle_add_request(engine_add_request&& m) {
    auto reject = [&](errc code, const std::string& why) {
        engine_outputs msg;
        engine_request_output e;
        e.request_id = m.request_id;
        e.finished = true;
        e.reason = finish_reason::error;
        e.error_code = code;
        e.error_message = why;
        e.num_prompt_tokens = static_cast<uint32_t>(m.prompt_token_ids.size());
        msg.outputs.push_back(std::move(e));
        send_to_frontend(encode(msg));
    };
    if (phase_ != phase::serving) {
        reject(phase_ == phase::failed ? errc::peer_dead : errc::unsupported,
               phase_ == phase::failed ? "the engine has failed" : "the engine is not serving");
        return;
    }
    new_request req;
    req.id = m.request_id;
    req.prompt = std::move(m.prompt_token_ids);
    req.sampling = m.sampling;
    req.max_tokens = static_cast<int32_t>(std::min<uint32_t>(m.max_tokens, INT32_MAX));
    req.stop_token_ids = m.stop_token_ids;
    if (!m.ignore_eos)
        req.stop_token_ids.insert(req.stop_token_ids.end(), model_.eos_token_ids.begin(), model_.eos_token_ids.end());
    req.ignore_eos = false;  // eos ids are already folded into stop_token_ids (or left out)
    // The workers keep every stop id (EOS included unless ignore_eos) from being sampled before min_tokens.
    if (req.sampling.min_tokens > 0) req.sampling.min_tokens_stop_ids = req.stop_token_ids;
    const uint32_t prompt_len = static_cast<uint32_t>(req.prompt.size());
    try {
        scheduler_->add_request(std::move(req));
    } catch (const error& e) {
        m.prompt_token_ids.assign(prompt_len, 0);
        reject(e.code(), e.what());
        return;
    }
    prompt_len_[m.request_id] = prompt_len;
    metrics_.counter_add("requests_added");
    metrics_.counter_add("prompt_tokens", prompt_len);
    pump();
}

void engine_core_actor::handle_abort(const engine_abort& m) {
    if (!scheduler_) return;
    auto out = scheduler_->abort_request(m.request_id);
    if (!out) return;
    prompt_len_.erase(m.request_id);
    emit_outputs(next_step_id_, {*out});
    update_gauges();
    maybe_finish_drain();
}

// ---------------------------------------------------------------------------------------------------------------
// Metrics

void engine_core_actor::update_gauges() {
    if (!scheduler_) return;
    const auto st = scheduler_->stats();
    double running = 0, waiting = 0;
    for (size_t r = 0; r < st.num_running.size(); ++r) {
        const std::string label = "{rank=\"" + std::to_string(r) + "\"}";
        metrics_.gauge_set("requests_running" + label, st.num_running[r]);
        metrics_.gauge_set("requests_waiting" + label, st.num_waiting[r]);
        metrics_.gauge_set("kv_blocks_used" + label, st.num_blocks_used[r]);
        metrics_.gauge_set("kv_blocks_total" + label, st.num_blocks_total[r]);
        metrics_.gauge_set("tokens_scheduled_total" + label, static_cast<double>(st.num_tokens_scheduled_total[r]));
        running += st.num_running[r];
        waiting += st.num_waiting[r];
    }
    metrics_.gauge_set("requests_running", running);
    metrics_.gauge_set("requests_waiting", waiting);
    metrics_.gauge_set("preemptions", static_cast<double>(st.num_preemptions));
    metrics_.gauge_set("discarded_tokens", static_cast<double>(st.num_discarded_tokens));
    metrics_.gauge_set("steps_in_flight", static_cast<double>(in_flight_.size()));
}

void engine_core_actor::log_stats() {
    if (!scheduler_ || phase_ == phase::failed) return;
    const auto st = scheduler_->stats();
    stats_sample now{.at = clock_type::now(),
                     .prompt_tokens = metrics_.counter("prompt_tokens"),
                     .generation_tokens = metrics_.counter("generation_tokens"),
                     .preemptions = static_cast<double>(st.num_preemptions),
                     .num_running = 0,
                     .num_waiting = 0,
                     .kv_blocks_used = 0,
                     .kv_blocks_total = 0};
    for (size_t r = 0; r < st.num_running.size(); ++r) {
        now.num_running += st.num_running[r];
        now.num_waiting += st.num_waiting[r];
        now.kv_blocks_used += st.num_blocks_used[r];
        now.kv_blocks_total += st.num_blocks_total[r];
    }
    if (const auto line = stats_line_.next(now)) ZMOE_LOG(info, "engine core: " << *line);
}

nlohmann::json engine_core_actor::metrics_json() {
    update_gauges();
    int alive = 0;
    for (const auto& w : workers_) alive += w.alive ? 1 : 0;
    metrics_.gauge_set("workers_alive", alive);
    metrics_.gauge_set("workers", options_.config.workers);
    metrics_.gauge_set("uptime_s", ms_since(started_at_) / 1000.0);
    // Steps of expert load EPLB plans from: grows to --eplb-window, then stays.
    if (load_window_) metrics_.gauge_set("eplb_load_window_steps", load_window_->num_steps());
    const auto num_experts = static_cast<size_t>(std::max<int64_t>(1, model_.num_experts));
    for (size_t i = 0; i < expert_tokens_.size(); ++i) {
        if (expert_tokens_[i] == 0) continue;
        const std::string name = "expert_tokens{layer=\"" + std::to_string(i / num_experts) + "\",expert=\"" +
                                 std::to_string(i % num_experts) + "\"}";
        metrics_.counter_follow(name, expert_tokens_[i]);  // a running total
    }
    // What the memory floor of a step is made of (docs/benchmarks.md, served decode).
    metrics_.gauge_set("floor_dense_bytes", static_cast<double>(floor_model_.dense_bytes));
    metrics_.gauge_set("floor_expert_bytes", static_cast<double>(floor_model_.expert_bytes));
    metrics_.gauge_set("floor_kv_bytes_per_position", static_cast<double>(floor_model_.kv_bytes_per_position));
    for (size_t r = 0; r < workers_.size(); ++r)
        metrics_.gauge_set("copy_bandwidth_bytes_per_second{rank=\"" + std::to_string(r) + "\"}",
                           workers_[r].copy_bandwidth);
    nlohmann::json out;
    out["engine_core"] = metrics_.to_json();
    for (size_t r = 0; r < workers_.size(); ++r) {
        workers_[r].metrics.gauge_set("alive", workers_[r].alive ? 1 : 0);
        out["worker_" + std::to_string(r)] = workers_[r].metrics.to_json();
    }
    if (placement_) out["eplb_placement"] = placement_->physical_to_logical;
    if (options_.config.trace_steps) out["steps"] = step_trace_;
    return out;
}

}  // namespace zmoe
