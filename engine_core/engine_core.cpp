#include "engine_core/engine_core.hpp"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "base/check.hpp"
#include "base/log.hpp"

namespace zmoe {

engine_outputs refused_request(const engine_add_request& request, errc code, const std::string& why) {
    engine_request_output e;
    e.request_id = request.request_id;
    e.finished = true;
    e.reason = finish_reason::error;
    e.error_code = code;
    e.error_message = why;
    e.num_prompt_tokens = static_cast<uint32_t>(request.prompt_token_ids.size());
    engine_outputs msg;
    msg.outputs.push_back(std::move(e));
    return msg;
}

namespace {

int32_t checked_workers(const engine_config& c) {
    if (c.workers < 1) throw error(errc::invalid_argument, "--workers must be >= 1");
    ep_transport_mode_of(c.ep_transport);  // a bad value fails the start, on every device
    return c.workers;
}

}  // namespace

engine_core::engine_core(engine_config config, model_config model, engine_core_sink& sink)
    : config_(std::move(config)),
      model_(std::move(model)),
      sink_(sink),
      dbo_(dbo_options::of(config_.enable_dbo, config_.dbo_decode_token_threshold, config_.dbo_prefill_token_threshold,
                           checked_workers(config_))),
      rank_metrics_(static_cast<size_t>(config_.workers)),
      eplb_(eplb_options::of(config_), static_cast<int32_t>(model_.num_moe_layers()),
            static_cast<int32_t>(model_.num_experts), metrics_),
      accounting_(step_floor_model::of(model_, config_.quantization), config_.workers, config_.trace_steps, metrics_) {}

engine_core::~engine_core() = default;

void engine_core::start(const std::vector<rank_capacity>& ranks) {
    const engine_config& c = config_;
    ZMOE_CHECK(static_cast<int32_t>(ranks.size()) == c.workers && !scheduler_,
               "engine_core::start: " << ranks.size() << " ranks for " << c.workers << " workers");
    // Start-up fails loudly rather than serving a run that fails every request.
    for (size_t r = 0; r < ranks.size(); ++r)
        if (ranks[r].num_kv_blocks <= 0)
            throw error(errc::out_of_memory, "worker " + std::to_string(r) +
                                                 " has no KV cache blocks (raise --kv-cache-mb, --num-kv-blocks or "
                                                 "--gpu-memory-utilization)");
    const int64_t model_len = model_.max_position_embeddings;
    const char* allow_long_env = std::getenv("ZMOE_ALLOW_LONG_MAX_MODEL_LEN");
    const bool allow_long = c.allow_long_max_model_len || (allow_long_env && std::string(allow_long_env) == "1");
    if (c.max_model_len > 0 && model_len > 0 && c.max_model_len > model_len && !allow_long)
        throw error(errc::invalid_argument,
                    "--max-model-len " + std::to_string(c.max_model_len) +
                        " exceeds the model's max_position_embeddings " + std::to_string(model_len) +
                        " (pass --allow-long-max-model-len, or set ZMOE_ALLOW_LONG_MAX_MODEL_LEN=1, to override)");

    // Size the scheduler from what each worker could allocate.
    scheduler_config cfg;
    cfg.max_num_batched_tokens = c.max_num_batched_tokens;
    cfg.max_num_seqs = c.max_num_seqs;
    cfg.block_size = c.block_size;
    cfg.async_scheduling = !c.no_async;
    cfg.enable_prefix_caching = !c.no_enable_prefix_caching;
    cfg.placement = dp_placement_from_name(c.dp_placement);
    cfg.placement_max_imbalance = c.dp_placement_max_imbalance;
    cfg.max_model_len = c.max_model_len > 0 ? c.max_model_len : static_cast<int32_t>(model_len);
    if (cfg.max_model_len <= 0) cfg.max_model_len = 4096;
    std::vector<double> bandwidth;
    for (const auto& r : ranks) {
        cfg.num_blocks_per_rank.push_back(static_cast<int32_t>(r.num_kv_blocks));
        bandwidth.push_back(r.copy_bandwidth);
    }
    scheduler_ = std::make_unique<scheduler>(cfg);
    max_model_len_ = cfg.max_model_len;
    accounting_.set_copy_bandwidth(std::move(bandwidth));
    eplb_.start();
    ZMOE_LOG(info, "engine core: serving (" << c.workers << " rank(s), max_model_len " << cfg.max_model_len
                                            << ", async " << (cfg.async_scheduling ? "on" : "off")
                                            << ", prefix caching " << (cfg.enable_prefix_caching ? "on" : "off")
                                            << ", placement " << dp_placement_name(cfg.placement) << ")");
    if (dbo_.enabled)
        ZMOE_LOG(info, "engine core: dual-batch overlap on: a step splits at "
                           << dbo_.prefill_token_threshold << " tokens on some rank with prefill, "
                           << dbo_.decode_token_threshold << " when decoding only");
}

void engine_core::add_request(engine_add_request&& m) {
    ZMOE_CHECK(serving(), "engine_core::add_request while not serving");
    new_request req;
    req.id = m.request_id;
    req.prompt = std::move(m.prompt_token_ids);
    req.sampling = m.sampling;
    req.max_tokens = static_cast<int32_t>(std::min<uint32_t>(m.max_tokens, INT32_MAX));
    req.stop_token_ids = m.stop_token_ids;
    if (!m.ignore_eos)
        req.stop_token_ids.insert(req.stop_token_ids.end(), model_.eos_token_ids.begin(), model_.eos_token_ids.end());
    req.structured = std::move(m.structured);
    req.ignore_eos = false;  // eos ids are already folded into stop_token_ids (or left out)
    req.cache_salt = std::move(m.cache_salt);
    // The workers keep every stop id (EOS included unless ignore_eos) from being sampled before min_tokens.
    if (req.sampling.min_tokens > 0) req.sampling.min_tokens_stop_ids = req.stop_token_ids;
    const uint32_t prompt_len = static_cast<uint32_t>(req.prompt.size());
    try {
        scheduler_->add_request(std::move(req));
    } catch (const error& e) {
        m.prompt_token_ids.assign(prompt_len, 0);  // moved out above; the refusal reports its length
        sink_.send_outputs(refused_request(m, e.code(), e.what()));
        return;
    }
    prompt_len_[m.request_id] = prompt_len;
    queued_since_[m.request_id] = clock_type::now();
    metrics_.counter_add("requests_added");
    metrics_.counter_add("prompt_tokens", prompt_len);
    pump();
}

void engine_core::abort_request(uint64_t id) {
    if (!scheduler_) return;
    auto out = scheduler_->abort_request(id);
    if (!out) return;
    prompt_len_.erase(id);  // the abort's output reports no prompt tokens
    queued_since_.erase(id);
    emit_outputs(scheduler_->next_step_id(), {*out});
}

void engine_core::pump() {
    if (!serving()) return;
    while (scheduler_->has_pending_work() && scheduler_->can_schedule()) {
        const auto planned_at = clock_type::now();
        std::vector<step_request> steps = scheduler_->schedule();
        if (!queued_since_.empty()) observe_queue_times(steps, planned_at);
        const bool dual_batch = should_split_step(steps, dbo_);
        size_t message_bytes = 0;
        for (int32_t r = 0; r < static_cast<int32_t>(steps.size()); ++r) {
            steps[static_cast<size_t>(r)].dual_batch = dual_batch;
            message_bytes += sink_.send_step(r, steps[static_cast<size_t>(r)]);
        }
        accounting_.step_sent(steps, planned_at, clock_type::now(), message_bytes);
    }
}

void engine_core::observe_queue_times(const std::vector<step_request>& steps, clock_type::time_point now) {
    for (const auto& step : steps) {
        for (const auto& seq : step.seqs) {
            const auto it = queued_since_.find(seq.request_id);
            if (it == queued_since_.end()) continue;  // scheduled before (a later chunk, a decode, a preemption)
            metrics_.observe("request_queue_time_ms",
                             std::chrono::duration<double, std::milli>(now - it->second).count());
            queued_since_.erase(it);
        }
    }
}

void engine_core::take_result(int32_t rank, step_result&& m) {
    if (!scheduler_ || !scheduler_->is_in_flight(m.step_id) || rank < 0 || rank >= config_.workers) {
        ZMOE_LOG(warn, "engine core: unexpected result of step " << m.step_id << " from rank " << rank);
        return;
    }
    auto& slots = arrived_[m.step_id];
    slots.resize(static_cast<size_t>(config_.workers));
    if (slots[static_cast<size_t>(rank)]) {
        ZMOE_LOG(warn, "engine core: second result of step " << m.step_id << " from rank " << rank << "; dropped");
        return;
    }
    auto& w = rank_metrics_[static_cast<size_t>(rank)];
    w.observe("step_compute_ms", m.compute_ms);
    w.observe("step_wait_ms", m.wait_ms);
    w.counter_add("steps");
    w.counter_add("sampled_tokens", static_cast<double>(m.tokens.size()));
    // The worker reports running totals: the counters follow them (docs/reliability.md, hostile input).
    w.counter_follow("frames_dropped", static_cast<double>(m.frames_dropped));
    w.counter_follow("exchange_steps_redone", static_cast<double>(m.exchange_steps_redone));
    slots[static_cast<size_t>(rank)] = std::move(m);
    // Steps finish in the order they were sent: the oldest in flight first, as soon as every rank has answered it.
    while (const auto oldest = scheduler_->oldest_in_flight()) {
        auto it = arrived_.find(*oldest);
        if (it == arrived_.end() ||
            !std::all_of(it->second.begin(), it->second.end(), [](const auto& r) { return r.has_value(); }))
            break;
        finish_step(*oldest);
    }
    pump();
}

void engine_core::finish_step(uint64_t step_id) {
    std::vector<step_result> results;
    for (auto& r : arrived_[step_id]) results.push_back(std::move(*r));
    arrived_.erase(step_id);
    const auto now = clock_type::now();
    accounting_.step_done(step_id, results, now);
    std::vector<request_output> outs;
    try {
        outs = scheduler_->update(results);
    } catch (const error& e) {
        throw error(errc::internal, std::string("step results rejected: ") + e.what());
    }
    try {
        eplb_.step_done(results);
    } catch (const error& e) {
        ZMOE_LOG(warn, "engine core: expert counts ignored: " << e.what());
    }
    for (const auto& r : results)
        metrics_.counter_add("tokens_sampled{rank=\"" + std::to_string(r.rank) + "\"}",
                             static_cast<double>(r.tokens.size()));
    emit_outputs(step_id, outs);
    if (auto move = eplb_.maybe_rebalance(scheduler_->next_step_id(), now)) {
        accounting_.note_event(eplb_.stage_step(), "stage " + std::to_string(move->move_id));
        accounting_.note_event(eplb_.switch_step(), "switch " + std::to_string(move->move_id));
        sink_.send_expert_move(*move);
    }
}

void engine_core::take_move_done(const worker_expert_move_done& m) { eplb_.move_done(m, clock_type::now()); }

void engine_core::emit_outputs(uint64_t step_id, const std::vector<request_output>& outs) {
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
        e.num_cached_tokens = static_cast<uint32_t>(std::max(o.num_cached_tokens, 0));
        metrics_.counter_add("generation_tokens", static_cast<double>(o.new_tokens.size()));
        if (o.finished) {
            prompt_len_.erase(o.id);
            queued_since_.erase(o.id);
            metrics_.counter_add(std::string("requests_finished{reason=\"") +
                                 std::string(finish_reason_name(o.reason)) + "\"}");
        }
        msg.outputs.push_back(std::move(e));
    }
    sink_.send_outputs(msg);
}

void engine_core::fail_all(errc code, const std::string& why) {
    halted_ = true;
    if (!scheduler_) return;
    engine_outputs msg;
    for (const auto& [id, len] : prompt_len_) {
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
    queued_since_.clear();
    if (!msg.outputs.empty()) sink_.send_outputs(msg);
}

void engine_core::halt() {
    halted_ = true;
    if (scheduler_)
        for (const auto& [id, len] : prompt_len_) scheduler_->abort_request(id);
    prompt_len_.clear();
    queued_since_.clear();
}

bool engine_core::idle() const {
    return !scheduler_ || (scheduler_->num_unfinished() == 0 && scheduler_->num_in_flight() == 0);
}

void engine_core::set_prefix_cache_metrics(const scheduler_stats& st) {
    // Running totals kept by the scheduler: the counters follow them.
    double queries = 0, hits = 0;
    for (size_t r = 0; r < st.prefix_cache_queries.size(); ++r) {
        const std::string label = "{rank=\"" + std::to_string(r) + "\"}";
        metrics_.counter_follow("prefix_cache_queries" + label, static_cast<double>(st.prefix_cache_queries[r]));
        metrics_.counter_follow("prefix_cache_hits" + label, static_cast<double>(st.prefix_cache_hits[r]));
        metrics_.counter_follow("prefix_cache_evictions" + label, static_cast<double>(st.num_blocks_evicted[r]));
        metrics_.counter_follow("requests_placed" + label, static_cast<double>(st.num_placed[r]));
        metrics_.gauge_set("prefix_cache_blocks" + label, st.num_blocks_cached[r]);
        if (st.prefix_cache_queries[r] > 0)
            metrics_.gauge_set("prefix_cache_hit_rate" + label, static_cast<double>(st.prefix_cache_hits[r]) /
                                                                    static_cast<double>(st.prefix_cache_queries[r]));
        queries += static_cast<double>(st.prefix_cache_queries[r]);
        hits += static_cast<double>(st.prefix_cache_hits[r]);
    }
    metrics_.counter_follow("prefix_cache_queries", queries);
    metrics_.counter_follow("prefix_cache_hits", hits);
    if (queries > 0) metrics_.gauge_set("prefix_cache_hit_rate", hits / queries);
    metrics_.counter_follow("dp_placements{decision=\"cache_hit\"}", static_cast<double>(st.num_placed_cache_hit));
    metrics_.counter_follow("dp_placements{decision=\"overloaded\"}", static_cast<double>(st.num_placed_overloaded));
    metrics_.counter_follow("dp_placements{decision=\"least_loaded\"}",
                            static_cast<double>(st.num_placed_least_loaded));
    metrics_.counter_follow("dp_placements{decision=\"round_robin\"}", static_cast<double>(st.num_placed_round_robin));
}

std::optional<std::string> engine_core::stats_line_at(clock_type::time_point now) {
    if (!scheduler_ || halted_) return std::nullopt;
    const auto st = scheduler_->stats();
    stats_sample sample{.at = now,
                        .prompt_tokens = metrics_.counter("prompt_tokens"),
                        .generation_tokens = metrics_.counter("generation_tokens"),
                        .preemptions = static_cast<double>(st.num_preemptions),
                        .num_running = 0,
                        .num_waiting = 0,
                        .kv_blocks_used = 0,
                        .kv_blocks_total = 0,
                        .prefix_cache_queries = 0,
                        .prefix_cache_hits = 0};
    for (size_t r = 0; r < st.num_running.size(); ++r) {
        sample.num_running += st.num_running[r];
        sample.num_waiting += st.num_waiting[r];
        sample.kv_blocks_used += st.num_blocks_used[r];
        sample.kv_blocks_total += st.num_blocks_total[r];
        sample.prefix_cache_queries += static_cast<double>(st.prefix_cache_queries[r]);
        sample.prefix_cache_hits += static_cast<double>(st.prefix_cache_hits[r]);
    }
    return stats_line_.next(sample);
}

nlohmann::json engine_core::metrics_json() {
    if (scheduler_) {
        const scheduler_stats st = scheduler_->stats();
        accounting_.set_gauges(st, scheduler_->num_in_flight());
        set_prefix_cache_metrics(st);
    }
    // Steps of expert load EPLB plans from: grows to --eplb-window, then stays.
    if (scheduler_ && eplb_.placement()) metrics_.gauge_set("eplb_load_window_steps", eplb_.load_window_steps());
    const auto num_experts = static_cast<size_t>(std::max<int64_t>(1, model_.num_experts));
    const auto& expert_tokens = eplb_.expert_tokens();
    for (size_t i = 0; i < expert_tokens.size(); ++i) {
        if (expert_tokens[i] == 0) continue;
        const std::string name = "expert_tokens{layer=\"" + std::to_string(i / num_experts) + "\",expert=\"" +
                                 std::to_string(i % num_experts) + "\"}";
        metrics_.counter_follow(name, expert_tokens[i]);  // a running total
    }
    accounting_.set_floor_gauges();
    nlohmann::json out;
    out["engine_core"] = metrics_.to_json();
    for (size_t r = 0; r < rank_metrics_.size(); ++r) out["worker_" + std::to_string(r)] = rank_metrics_[r].to_json();
    if (eplb_.placement()) out["eplb_placement"] = eplb_.placement()->physical_to_logical;
    if (config_.trace_steps) out["steps"] = accounting_.trace();
    return out;
}

}  // namespace zmoe
