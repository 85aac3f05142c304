// Served-step accounting with exact times: served time, memory floor, decode totals and the trace records.

#include "engine_core/step_accounting.hpp"

#include <gtest/gtest.h>

namespace zmoe {
namespace {

using clock_type = step_accounting::clock_type;
using std::chrono::milliseconds;

const step_floor_model kFloor{.dense_bytes = 1000, .expert_bytes = 100, .kv_bytes_per_position = 10};

scheduled_seq seq(uint64_t id, int32_t start_pos, int32_t num_tokens) {
    scheduled_seq s;
    s.request_id = id;
    s.start_pos = start_pos;
    s.token_ids.assign(static_cast<size_t>(num_tokens), 1);
    return s;
}

std::vector<step_request> two_rank_step(uint64_t step_id, std::vector<scheduled_seq> rank0,
                                        std::vector<scheduled_seq> rank1) {
    std::vector<step_request> steps(2);
    for (auto& s : steps) s.step_id = step_id;
    steps[0].seqs = std::move(rank0);
    steps[1].seqs = std::move(rank1);
    return steps;
}

std::vector<step_result> results(uint64_t step_id, std::vector<uint32_t> counts0, std::vector<uint32_t> counts1,
                                 int32_t tokens0, int32_t tokens1, double wait0, double wait1) {
    std::vector<step_result> out(2);
    out[0].step_id = out[1].step_id = step_id;
    out[1].rank = 1;
    out[0].expert_counts = std::move(counts0);
    out[1].expert_counts = std::move(counts1);
    for (int32_t i = 0; i < tokens0; ++i) out[0].tokens.push_back({static_cast<uint64_t>(i), 1});
    for (int32_t i = 0; i < tokens1; ++i) out[1].tokens.push_back({static_cast<uint64_t>(100 + i), 1});
    out[0].wait_ms = wait0;
    out[1].wait_ms = wait1;
    return out;
}

TEST(StepAccounting, ServedTimeStartsWhenTheWorkersCouldStartTheStep) {
    metrics_registry m;
    step_accounting a(kFloor, 2, /*trace=*/true, m);
    a.set_copy_bandwidth({1e6, 2e6});
    const clock_type::time_point t0{};
    // Step 0: one decode per rank; rank 0 reads 10 cached positions, rank 1 20.
    a.step_sent(two_rank_step(0, {seq(1, 9, 1)}, {seq(2, 19, 1)}), t0 + milliseconds(1), t0 + milliseconds(2), 64);
    // Step 1 goes out before step 0 is done (async): it can only start when step 0 is.
    a.step_sent(two_rank_step(1, {seq(1, 10, 1)}, {seq(2, 20, 1)}), t0 + milliseconds(3), t0 + milliseconds(3), 64);
    EXPECT_EQ(a.num_open(), 2u);
    a.step_done(0, results(0, {1, 0, 2, 0}, {0, 0, 1, 1}, 1, 1, 0.5, 1.5), t0 + milliseconds(6));
    a.step_done(1, results(1, {1, 0, 0, 0}, {0, 0, 0, 0}, 1, 1, 0.25, 0), t0 + milliseconds(10));
    EXPECT_EQ(a.num_open(), 0u);
    // Served: step 0 from 2 to 6 ms, step 1 from 6 (step 0 done) to 10 ms.
    EXPECT_DOUBLE_EQ(m.counter("served_step_ms"), 8.0);
    EXPECT_DOUBLE_EQ(m.counter("decode_served_step_ms"), 8.0);
    EXPECT_EQ(m.counter("decode_steps"), 2);
    EXPECT_EQ(m.counter("decode_tokens"), 4);
    EXPECT_DOUBLE_EQ(m.counter("decode_worker_wait_ms"), 1.5 + 0.25) << "the slowest rank's wait, per step";
    // Floor of step 0: 3 experts touched over both ranks (300 bytes, 150 per rank); rank 0 reads 1000 + 100 + 150
    // bytes at 1 MB/s = 1.25 ms, rank 1 1000 + 200 + 150 at 2 MB/s = 0.675 ms: 1.25 ms. Step 1: one expert (50 per
    // rank); rank 0: 1000 + 110 + 50 at 1 MB/s = 1.16 ms, rank 1: 1000 + 210 + 50 at 2 MB/s = 0.63 ms.
    EXPECT_NEAR(m.counter("floor_step_ms"), 1.25 + 1.16, 1e-9);
    EXPECT_NEAR(m.counter("decode_floor_step_ms"), 1.25 + 1.16, 1e-9);
    EXPECT_EQ(m.counter("steps"), 2);
    const auto j = m.to_json();
    EXPECT_EQ(j["histograms"]["step_ms"]["max"], 7.0) << "step 1: sent at 3 ms, done at 10";
    EXPECT_EQ(j["histograms"]["schedule_ms"]["max"], 1.0);
    EXPECT_EQ(j["histograms"]["step_message_bytes"]["sum"], 128.0);
    const auto& trace = a.trace();
    ASSERT_EQ(trace.size(), 2u);
    EXPECT_EQ(trace[0]["step"], 0);
    EXPECT_DOUBLE_EQ(trace[0]["served_ms"].get<double>(), 4.0);
    EXPECT_DOUBLE_EQ(trace[1]["ms"].get<double>(), 7.0);
    EXPECT_EQ(trace[1]["tokens"], 2);
    EXPECT_EQ(trace[1]["seqs"], 2);
    EXPECT_EQ(trace[1]["decode"], true);
}

TEST(StepAccounting, PrefillStepsAndUnknownBandwidthLeaveTheDecodeAndFloorTotalsAlone) {
    metrics_registry m;
    step_accounting a(kFloor, 2, /*trace=*/true, m);
    a.set_copy_bandwidth({1e6, 0});  // rank 1's bandwidth unknown: no floor
    const clock_type::time_point t0{};
    auto steps = two_rank_step(4, {seq(1, 0, 5)}, {seq(2, 7, 1)});
    steps[0].dual_batch = steps[1].dual_batch = true;
    a.note_event(4, "stage 1");
    a.note_event(4, "switch 0");
    a.note_event(9, "switch 1");  // a step still to come keeps its event
    a.step_sent(steps, t0, t0 + milliseconds(1), 10);
    a.step_done(4, results(4, {}, {}, 1, 1, 0, 0), t0 + milliseconds(3));
    EXPECT_DOUBLE_EQ(m.counter("served_step_ms"), 2.0);
    EXPECT_EQ(m.counter("decode_steps"), 0);
    EXPECT_EQ(m.counter("dbo_steps"), 1);
    const auto j = m.to_json();
    EXPECT_FALSE(j["counters"].contains("floor_step_ms"));
    EXPECT_FALSE(j["counters"].contains("decode_served_step_ms"));
    ASSERT_EQ(a.trace().size(), 1u);
    EXPECT_EQ(a.trace()[0]["eplb"], "stage 1 switch 0 ");
    EXPECT_EQ(a.trace()[0]["max_rank_tokens"], 5);
    EXPECT_EQ(a.trace()[0]["decode"], false);
    a.step_done(77, {}, t0);  // never sent: nothing
    EXPECT_EQ(a.trace().size(), 1u);
}

TEST(StepAccounting, GaugesOfTheSchedulerAndTheFloor) {
    metrics_registry m;
    step_accounting a(kFloor, 2, /*trace=*/false, m);
    a.set_copy_bandwidth({3e9, 4e9});
    scheduler_stats st;
    st.num_running = {2, 1};
    st.num_waiting = {0, 3};
    st.num_blocks_used = {5, 6};
    st.num_blocks_total = {10, 10};
    st.num_tokens_scheduled_total = {100, 50};
    st.num_preemptions = 4;
    a.set_gauges(st, 2);
    a.set_floor_gauges();
    EXPECT_EQ(m.gauge("requests_running"), 3);
    EXPECT_EQ(m.gauge("requests_waiting"), 3);
    EXPECT_EQ(m.gauge("requests_waiting{rank=\"1\"}"), 3);
    EXPECT_EQ(m.gauge("kv_blocks_used{rank=\"0\"}"), 5);
    EXPECT_EQ(m.gauge("tokens_scheduled_total{rank=\"0\"}"), 100);
    EXPECT_EQ(m.gauge("preemptions"), 4);
    EXPECT_EQ(m.gauge("steps_in_flight"), 2);
    EXPECT_EQ(m.gauge("floor_dense_bytes"), 1000);
    EXPECT_EQ(m.gauge("floor_kv_bytes_per_position"), 10);
    EXPECT_EQ(m.gauge("copy_bandwidth_bytes_per_second{rank=\"1\"}"), 4e9);
    EXPECT_TRUE(a.trace().empty());
}

}  // namespace
}  // namespace zmoe
