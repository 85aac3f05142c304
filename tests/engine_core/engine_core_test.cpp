// The engine loop without sockets: an engine_core driven by fake workers (fake_cluster.hpp) the way the actor
// drives it. Requests must produce exactly the tokens the fake workers' function gives (scheduler_harness.hpp's
// reference), with up to two steps in flight, through aborts mid-flight, refusals and failures.

#include "engine_core/engine_core.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "base/error.hpp"
#include "fake_cluster.hpp"
#include "scheduler_harness.hpp"

namespace zmoe {
namespace {

using testing::fake_cluster;
using testing::kVocab;
using testing::reference_output;
using testing::tiny_moe_model;

engine_config small_config(int32_t workers, bool async = true) {
    engine_config c;
    c.workers = workers;
    c.block_size = 4;
    c.max_num_batched_tokens = 16;
    c.max_num_seqs = 4;
    c.no_async = !async;
    return c;
}

engine_add_request make_request(uint64_t id, int32_t prompt_len, uint32_t max_tokens, bool ignore_eos = false) {
    engine_add_request r;
    r.request_id = id;
    for (int32_t i = 0; i < prompt_len; ++i) r.prompt_token_ids.push_back(static_cast<int32_t>((id * 11 + i) % kVocab));
    r.max_tokens = max_tokens;
    r.stop_token_ids = {7};
    r.ignore_eos = ignore_eos;
    return r;
}

/// A request that runs to max_tokens: no stop id, EOS ignored.
engine_add_request long_request(uint64_t id, int32_t prompt_len, uint32_t max_tokens) {
    engine_add_request r = make_request(id, prompt_len, max_tokens, /*ignore_eos=*/true);
    r.stop_token_ids.clear();
    return r;
}

/// What the engine must produce for `r`: the model's EOS (5) joins the stop ids unless ignore_eos.
std::vector<int32_t> expected_tokens(const engine_add_request& r) {
    new_request n;
    n.id = r.request_id;
    n.prompt = r.prompt_token_ids;
    n.max_tokens = static_cast<int32_t>(r.max_tokens);
    n.stop_token_ids = r.stop_token_ids;
    if (!r.ignore_eos) n.stop_token_ids.push_back(5);
    return reference_output(n);
}

struct engine_fixture {
    explicit engine_fixture(engine_config config, int32_t num_blocks = 64, model_config model = tiny_moe_model())
        : cluster(config.workers, num_blocks, config.block_size, static_cast<int32_t>(model.num_moe_layers()),
                  static_cast<int32_t>(model.num_experts)),
          engine(config, model, cluster) {
        engine.start(std::vector<rank_capacity>(static_cast<size_t>(config.workers),
                                                rank_capacity{.num_kv_blocks = num_blocks, .copy_bandwidth = 1e9}));
    }

    void add(engine_add_request r) {
        cluster.prompt_lens[r.request_id] = static_cast<int32_t>(r.prompt_token_ids.size());
        requests.push_back(r);
        engine.add_request(std::move(r));
        note_in_flight();
    }

    /// The workers run the oldest step and its results reach the engine.
    void deliver_oldest() {
        for (auto& r : cluster.run_oldest()) engine.take_result(r.rank, std::move(r));
        note_in_flight();
    }

    /// Runs until the engine is idle; `before_each` runs before every delivery.
    void run_to_idle(const std::function<void()>& before_each = {}) {
        for (int guard = 0; !engine.idle(); ++guard) {
            ASSERT_LT(guard, 10000) << "engine never became idle";
            ASSERT_GT(cluster.num_unrun(), 0u) << "engine not idle but nothing in flight";
            if (before_each) before_each();
            deliver_oldest();
        }
        EXPECT_EQ(cluster.num_unrun(), 0u);
    }

    void note_in_flight() { max_in_flight = std::max(max_in_flight, engine.sched()->num_in_flight()); }

    fake_cluster cluster;
    engine_core engine;
    std::vector<engine_add_request> requests;
    int32_t max_in_flight = 0;
};

TEST(EngineCore, ServesEveryRequestItsReferenceTokensWithTwoStepsInFlight) {
    engine_fixture f(small_config(2));
    for (uint64_t id = 1; id <= 6; ++id) f.add(make_request(id, 3 + static_cast<int32_t>(id) * 2, 12, id % 3 == 0));
    f.run_to_idle();
    EXPECT_EQ(f.max_in_flight, 2) << "async scheduling keeps a second step in flight";
    for (const auto& r : f.requests) {
        ASSERT_TRUE(f.cluster.finished.contains(r.request_id)) << "request " << r.request_id;
        const auto want = expected_tokens(r);
        EXPECT_EQ(f.cluster.tokens[r.request_id], want) << "request " << r.request_id;
        const auto& fin = f.cluster.finished[r.request_id];
        EXPECT_EQ(fin.reason, want.size() < r.max_tokens ? finish_reason::stop : finish_reason::length);
        EXPECT_EQ(fin.num_prompt_tokens, r.prompt_token_ids.size());
    }
    // One outputs message per finished step with outputs, in step order.
    for (size_t i = 1; i < f.cluster.outputs.size(); ++i)
        EXPECT_LT(f.cluster.outputs[i - 1].step_id, f.cluster.outputs[i].step_id);
    EXPECT_EQ(f.engine.metrics().counter("requests_added"), 6);
    EXPECT_EQ(f.engine.metrics().counter("steps"), static_cast<double>(f.cluster.num_steps_sent));
    EXPECT_TRUE(f.engine.idle());
}

TEST(EngineCore, SynchronousSchedulingKeepsOneStepInFlight) {
    engine_fixture f(small_config(1, /*async=*/false));
    for (uint64_t id = 1; id <= 3; ++id) f.add(make_request(id, 5, 8));
    f.run_to_idle();
    EXPECT_EQ(f.max_in_flight, 1);
    for (const auto& r : f.requests) EXPECT_EQ(f.cluster.tokens[r.request_id], expected_tokens(r));
}

TEST(EngineCore, AbortMidFlightEndsTheRequestAtOnceAndDropsItsInFlightTokens) {
    engine_fixture f(small_config(1));
    f.add(long_request(1, 4, 50));
    f.add(make_request(2, 4, 6));
    // Let both requests decode for a while, with two steps in flight.
    for (int i = 0; i < 3; ++i) f.deliver_oldest();
    ASSERT_EQ(f.engine.sched()->num_in_flight(), 2);
    const size_t tokens_before = f.cluster.tokens[1].size();
    const size_t outputs_before = f.cluster.outputs.size();
    f.engine.abort_request(1);
    ASSERT_EQ(f.cluster.outputs.size(), outputs_before + 1) << "the abort's output goes out at once";
    const auto& out = f.cluster.outputs.back();
    ASSERT_EQ(out.outputs.size(), 1u);
    EXPECT_EQ(out.outputs[0].request_id, 1u);
    EXPECT_TRUE(out.outputs[0].finished);
    EXPECT_EQ(out.outputs[0].reason, finish_reason::abort);
    EXPECT_TRUE(out.outputs[0].new_token_ids.empty());
    EXPECT_EQ(out.step_id, f.cluster.num_steps_sent) << "an abort is reported against the next step";
    f.engine.abort_request(1);  // already ended: nothing more
    EXPECT_EQ(f.cluster.outputs.size(), outputs_before + 1);
    f.run_to_idle();
    EXPECT_EQ(f.cluster.tokens[1].size(), tokens_before) << "tokens of the in-flight steps are discarded";
    EXPECT_EQ(f.cluster.tokens[2], expected_tokens(f.requests[1]));
    EXPECT_GE(f.engine.sched()->stats().num_discarded_tokens, 1u);
}

TEST(EngineCore, ResultsOfStepsNotInFlightAndSecondResultsAreDropped) {
    engine_fixture f(small_config(2));
    f.add(make_request(1, 4, 4));
    auto results = f.cluster.run_oldest();
    step_result stray = results[0];
    stray.step_id = 99;
    f.engine.take_result(stray.rank, std::move(stray));  // never sent
    step_result first = results[0];
    f.engine.take_result(first.rank, std::move(first));
    step_result again = results[0];
    again.tokens.clear();
    f.engine.take_result(again.rank, std::move(again));  // the same rank twice: dropped, not an error
    EXPECT_TRUE(f.cluster.outputs.empty()) << "the step is not complete";
    f.engine.take_result(results[1].rank, std::move(results[1]));
    f.run_to_idle();
    EXPECT_EQ(f.cluster.tokens[1], expected_tokens(f.requests[0]));
}

TEST(EngineCore, ResultsThatContradictTheirStepThrowInternal) {
    engine_fixture f(small_config(1));
    f.add(make_request(1, 4, 4));
    auto results = f.cluster.run_oldest();
    results[0].tokens.push_back({12345, 1});  // a request the step never sampled
    try {
        f.engine.take_result(0, std::move(results[0]));
        FAIL() << "no error";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::internal);
        EXPECT_NE(std::string(e.what()).find("step results rejected"), std::string::npos) << e.what();
    }
}

TEST(EngineCore, RefusedRequestGetsAnErrorOutputWithItsPromptLength) {
    engine_fixture f(small_config(1));
    f.add(make_request(1, 250, 100));  // prompt + max_tokens over the model's 256 positions
    ASSERT_EQ(f.cluster.outputs.size(), 1u);
    const auto& o = f.cluster.outputs[0].outputs.at(0);
    EXPECT_TRUE(o.finished);
    EXPECT_EQ(o.reason, finish_reason::error);
    EXPECT_EQ(o.error_code, errc::invalid_argument);
    EXPECT_EQ(o.num_prompt_tokens, 250u);
    EXPECT_TRUE(f.engine.idle());
    EXPECT_EQ(f.cluster.num_steps_sent, 0u);
}

TEST(EngineCore, FailAllEndsEveryRequestWithTheErrorAndStopsScheduling) {
    engine_fixture f(small_config(2));
    f.add(long_request(1, 4, 30));
    f.add(long_request(2, 6, 30));
    f.deliver_oldest();
    const uint64_t sent = f.cluster.num_steps_sent;
    f.engine.fail_all(errc::peer_dead, "worker 1 stopped answering");
    ASSERT_EQ(f.cluster.finished.size(), 2u);
    for (const auto& [id, o] : f.cluster.finished) {
        EXPECT_EQ(o.reason, finish_reason::error);
        EXPECT_EQ(o.error_code, errc::peer_dead);
        EXPECT_EQ(o.error_message, "worker 1 stopped answering");
    }
    EXPECT_FALSE(f.engine.serving());
    while (f.cluster.num_unrun() > 0) f.deliver_oldest();  // results still in flight are taken, nothing is sent
    EXPECT_EQ(f.cluster.num_steps_sent, sent);
    EXPECT_TRUE(f.engine.idle());
    EXPECT_FALSE(f.engine.stats_line_at(std::chrono::steady_clock::now()).has_value());
}

TEST(EngineCore, StartRefusesARunThatCannotServe) {
    testing::fake_cluster cluster(2, 8, 4, 2, 4);
    engine_core engine(small_config(2), tiny_moe_model(), cluster);
    EXPECT_FALSE(engine.serving());
    try {
        engine.start({rank_capacity{.num_kv_blocks = 8, .copy_bandwidth = 0}, rank_capacity{}});
        FAIL() << "no error";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::out_of_memory);
        EXPECT_NE(std::string(e.what()).find("worker 1"), std::string::npos) << e.what();
    }
    engine_config long_len = small_config(1);
    long_len.max_model_len = 1000;
    engine_core engine2(long_len, tiny_moe_model(), cluster);
    try {
        engine2.start({rank_capacity{.num_kv_blocks = 8, .copy_bandwidth = 0}});
        FAIL() << "no error";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
    }
    long_len.allow_long_max_model_len = true;
    engine_core engine3(long_len, tiny_moe_model(), cluster);
    engine3.start({rank_capacity{.num_kv_blocks = 8, .copy_bandwidth = 0}});
    EXPECT_TRUE(engine3.serving());
    EXPECT_EQ(engine3.max_model_len(), 1000);
    engine_config none = small_config(0);
    EXPECT_THROW(engine_core(none, tiny_moe_model(), cluster), error);
}

TEST(EngineCore, EplbStagesAfterTheStepsInFlightAndSwitchesStageStepsLater) {
    engine_config c = small_config(2);
    c.enable_eplb = true;
    c.eplb_interval = 3;
    c.eplb_window = 4;
    c.eplb_stage_steps = 2;
    c.trace_steps = true;
    engine_fixture f(c);
    for (uint64_t id = 1; id <= 4; ++id) f.add(long_request(id, 6, 24));
    f.run_to_idle();
    ASSERT_GE(f.cluster.moves.size(), 1u) << "the skewed load (experts 0 and 1 of every layer) is rebalanced";
    const auto& first = f.cluster.moves[0];
    // The move goes out after step interval-1 finished, while the next step was already in flight (async): it must
    // stage before the next step to be sent, never before one already out.
    EXPECT_EQ(first.move.move_id, 1u);
    EXPECT_EQ(first.steps_sent_before, 4u) << "steps 0-3 were out when step 2 finished";
    EXPECT_EQ(first.move.apply_at_step, first.steps_sent_before + 2) << "switch = stage + eplb_stage_steps";
    EXPECT_FALSE(first.move.moves.empty());
    EXPECT_EQ(f.engine.eplb().stage_step(), first.steps_sent_before);
    EXPECT_EQ(f.engine.eplb().switch_step(), first.move.apply_at_step);
    EXPECT_TRUE(f.engine.eplb().move_pending());
    EXPECT_EQ(f.cluster.moves.size(), 1u) << "no second rebalance while the first is unacknowledged";
    // The trace shows the stage and the switch on their steps.
    const auto& trace = f.engine.accounting().trace();
    ASSERT_GT(trace.size(), first.move.apply_at_step);
    EXPECT_EQ(trace[first.steps_sent_before].value("eplb", ""), "stage 1 ");
    EXPECT_EQ(trace[first.move.apply_at_step].value("eplb", ""), "switch 1 ");
    for (const auto& t : trace) {
        const uint64_t s = t["step"];
        if (s != first.steps_sent_before && s != first.move.apply_at_step) {
            EXPECT_FALSE(t.contains("eplb")) << s;
        }
    }
    // Every rank acknowledges; the rebalance is complete with the last.
    for (int32_t r = 0; r < 2; ++r) {
        worker_expert_move_done done;
        done.move_id = 1;
        done.rank = r;
        done.bytes_moved = 1000;
        done.switched_at_step = first.move.apply_at_step;
        f.engine.take_move_done(done);
        EXPECT_EQ(f.engine.metrics().counter("eplb_rebalances"), r == 1 ? 1 : 0);
    }
    EXPECT_FALSE(f.engine.eplb().move_pending());
    EXPECT_EQ(f.engine.metrics().counter("eplb_bytes_moved"), 2000);
    // The welcome's placement moved on: experts 0 and 1 of layer 0 no longer share a rank.
    const auto& p = f.engine.eplb().placement()->physical_to_logical[0];
    const auto rank_of = [&](int32_t expert) {
        return static_cast<int32_t>(std::find(p.begin(), p.end(), expert) - p.begin()) / 2;
    };
    EXPECT_NE(rank_of(0), rank_of(1));
    for (const auto& r : f.requests) EXPECT_EQ(f.cluster.tokens[r.request_id], expected_tokens(r));
}

TEST(EngineCore, QueueTimeIsObservedOnceWhenAStepFirstTakesARequest) {
    auto queued = [](engine_fixture& f) {
        const auto j = f.engine.metrics_json()["engine_core"]["histograms"];
        return j.contains("request_queue_time_ms") ? j["request_queue_time_ms"]["count"].get<uint64_t>() : 0u;
    };
    {
        // Six requests of several steps each (prefill, decodes): each observed once, when first scheduled.
        engine_fixture f(small_config(2));
        for (uint64_t id = 1; id <= 6; ++id) f.add(long_request(id, 5, 6));
        f.run_to_idle();
        EXPECT_EQ(queued(f), 6u);
        EXPECT_GE(f.engine.metrics_json()["engine_core"]["histograms"]["request_queue_time_ms"]["sum"].get<double>(),
                  0.0);
    }
    {
        // One sequence at a time: the second request waits, and aborted while waiting it has no queue time.
        engine_config c = small_config(1);
        c.max_num_seqs = 1;
        engine_fixture f(c);
        f.add(long_request(1, 5, 6));
        f.add(long_request(2, 5, 6));
        EXPECT_EQ(queued(f), 1u);
        f.engine.abort_request(2);
        f.run_to_idle();
        EXPECT_EQ(queued(f), 1u);
    }
}

TEST(EngineCore, MetricsJsonHasEveryPartAndTheGaugesOfNow) {
    engine_config c = small_config(2);
    c.trace_steps = true;
    engine_fixture f(c);
    f.add(make_request(1, 4, 3));
    f.engine.rank_metrics(1).gauge_set("alive", 1);
    auto j = f.engine.metrics_json();
    EXPECT_EQ(j["engine_core"]["gauges"]["steps_in_flight"], 2);
    EXPECT_EQ(j["engine_core"]["gauges"]["requests_running"], 1);
    EXPECT_EQ(j["engine_core"]["gauges"]["copy_bandwidth_bytes_per_second{rank=\"1\"}"], 1e9);
    EXPECT_TRUE(j.contains("worker_0"));
    EXPECT_EQ(j["worker_1"]["gauges"]["alive"], 1);
    EXPECT_EQ(j["eplb_placement"].size(), 2u);
    f.run_to_idle();
    j = f.engine.metrics_json();
    EXPECT_EQ(j["engine_core"]["gauges"]["steps_in_flight"], 0);
    EXPECT_EQ(j["steps"].size(), f.cluster.num_steps_sent);
    EXPECT_EQ(j["engine_core"]["counters"]["expert_tokens{layer=\"1\",expert=\"0\"}"],
              j["engine_core"]["counters"]["expert_tokens{layer=\"0\",expert=\"1\"}"]);
    EXPECT_GT(j["engine_core"]["counters"]["expert_tokens{layer=\"0\",expert=\"0\"}"], 0);
    EXPECT_EQ(j["worker_0"]["counters"]["steps"], static_cast<double>(f.cluster.num_steps_sent));
}

}  // namespace
}  // namespace zmoe
