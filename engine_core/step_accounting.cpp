#include "engine_core/step_accounting.hpp"

#include <algorithm>
#include <utility>

namespace zmoe {

namespace {

double ms_between(step_accounting::clock_type::time_point from, step_accounting::clock_type::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

step_accounting::step_accounting(step_floor_model floor, int32_t num_ranks, bool trace, metrics_registry& metrics)
    : floor_(floor),
      num_ranks_(num_ranks),
      trace_on_(trace),
      metrics_(metrics),
      copy_bandwidth_(static_cast<size_t>(std::max(0, num_ranks)), 0.0) {}

void step_accounting::set_copy_bandwidth(std::vector<double> bytes_per_second) {
    copy_bandwidth_ = std::move(bytes_per_second);
    copy_bandwidth_.resize(static_cast<size_t>(std::max(0, num_ranks_)), 0.0);
}

void step_accounting::step_sent(const std::vector<step_request>& steps, clock_type::time_point planned_at,
                                clock_type::time_point sent_at, size_t message_bytes) {
    if (steps.empty()) return;
    step_record& rec = records_[steps.front().step_id];
    rec.sent_at = sent_at;
    rec.kv_positions.assign(steps.size(), 0);
    rec.decode_only = true;
    for (size_t r = 0; r < steps.size(); ++r) {
        int64_t rank_tokens = 0;
        for (const auto& s : steps[r].seqs) {
            const auto n = static_cast<int64_t>(s.token_ids.size());
            rank_tokens += n;
            rec.kv_positions[r] += s.start_pos + n;
            rec.decode_only = rec.decode_only && n == 1;
        }
        rec.num_tokens += rank_tokens;
        rec.num_seqs += static_cast<int64_t>(steps[r].seqs.size());
        rec.max_rank_tokens = std::max(rec.max_rank_tokens, rank_tokens);
    }
    rec.decode_only = rec.decode_only && rec.num_seqs > 0;
    if (steps.front().dual_batch) metrics_.counter_add("dbo_steps");
    metrics_.counter_add("steps");
    metrics_.observe("step_tokens", static_cast<double>(rec.num_tokens));
    // Host time of the step loop: planning, encoding and handing the step to the transport, and the bytes sent.
    metrics_.observe("schedule_ms", ms_between(planned_at, sent_at));
    metrics_.observe("step_message_bytes", static_cast<double>(message_bytes));
}

void step_accounting::note_event(uint64_t step_id, const std::string& event) {
    if (trace_on_) events_[step_id] += event + " ";
}

void step_accounting::step_done(uint64_t step_id, const std::vector<step_result>& results, clock_type::time_point now) {
    auto it = records_.find(step_id);
    if (it == records_.end()) return;
    const step_record rec = std::move(it->second);
    records_.erase(it);
    const double step_ms = ms_between(rec.sent_at, now);
    metrics_.observe("step_ms", step_ms);
    // Served time of the step: from when the workers could start it (sent, and the previous step done: a worker
    // runs steps in order) to when its last result arrived.
    const auto start = std::max(rec.sent_at, last_step_done_);
    last_step_done_ = now;
    const double served_ms = ms_between(start, now);
    // Memory floor: every rank reads the dense weights and its sequences' KV; the experts the step's tokens touched
    // are read once, split evenly over the ranks (exact with one worker). The slowest rank sets the floor.
    std::vector<uint32_t> counts;
    double wait_ms = 0;
    double sampled = 0;
    for (const step_result& r : results) {
        if (counts.size() < r.expert_counts.size()) counts.resize(r.expert_counts.size(), 0);
        for (size_t i = 0; i < r.expert_counts.size(); ++i) counts[i] += r.expert_counts[i];
        wait_ms = std::max(wait_ms, r.wait_ms);
        sampled += static_cast<double>(r.tokens.size());
    }
    const int64_t touched = experts_touched(counts);
    const double expert_share = static_cast<double>(touched) * static_cast<double>(floor_.expert_bytes) /
                                static_cast<double>(std::max(1, num_ranks_));
    double floor_ms = 0;
    bool have_floor = num_ranks_ > 0;
    for (size_t r = 0; r < copy_bandwidth_.size(); ++r) {
        const double bw = copy_bandwidth_[r];
        if (!(bw > 0)) {
            have_floor = false;
            break;
        }
        const double bytes = floor_.bytes(0, r < rec.kv_positions.size() ? rec.kv_positions[r] : 0) + expert_share;
        floor_ms = std::max(floor_ms, bytes / bw * 1e3);
    }
    metrics_.counter_add("served_step_ms", served_ms);
    if (have_floor) metrics_.counter_add("floor_step_ms", floor_ms);
    if (rec.decode_only) {
        metrics_.counter_add("decode_steps");
        metrics_.counter_add("decode_tokens", sampled);
        metrics_.counter_add("decode_served_step_ms", served_ms);
        metrics_.counter_add("decode_worker_wait_ms", wait_ms);
        if (have_floor) metrics_.counter_add("decode_floor_step_ms", floor_ms);
        metrics_.observe("decode_step_ms", served_ms);
    }
    if (!trace_on_) return;
    nlohmann::json t = {{"step", step_id},          {"ms", step_ms},        {"served_ms", served_ms},
                        {"tokens", rec.num_tokens}, {"seqs", rec.num_seqs}, {"max_rank_tokens", rec.max_rank_tokens},
                        {"decode", rec.decode_only}};
    if (auto e = events_.find(step_id); e != events_.end()) {
        t["eplb"] = e->second;
        events_.erase(e);
    }
    trace_.push_back(std::move(t));
}

void step_accounting::set_gauges(const scheduler_stats& st, int32_t steps_in_flight) {
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
    metrics_.gauge_set("steps_in_flight", static_cast<double>(steps_in_flight));
}

void step_accounting::set_floor_gauges() {
    // What the memory floor of a step is made of (docs/benchmarks.md, served decode).
    metrics_.gauge_set("floor_dense_bytes", static_cast<double>(floor_.dense_bytes));
    metrics_.gauge_set("floor_expert_bytes", static_cast<double>(floor_.expert_bytes));
    metrics_.gauge_set("floor_kv_bytes_per_position", static_cast<double>(floor_.kv_bytes_per_position));
    for (size_t r = 0; r < copy_bandwidth_.size(); ++r)
        metrics_.gauge_set("copy_bandwidth_bytes_per_second{rank=\"" + std::to_string(r) + "\"}", copy_bandwidth_[r]);
}

}  // namespace zmoe
