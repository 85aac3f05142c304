#include "messages/worker_protocol.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <type_traits>

#include "tests/messages/step_compare.hpp"
#include "tests/messages/wire_test_util.hpp"

namespace zmoe {
namespace {

step_request sample_step(int num_seqs, int prefill_len) {
    step_request m;
    m.step_id = 41;
    for (int i = 0; i < num_seqs; ++i) {
        scheduled_seq s;
        s.request_id = 1000 + i;
        if (i == 0) {
            for (int t = 0; t < prefill_len; ++t) s.token_ids.push_back(t * 7 % 151936);
            s.start_pos = 0;
        } else {
            s.token_ids = {i % 3 == 0 ? kPlaceholderToken : 42 + i};
            s.start_pos = 100 + i;
        }
        for (int b = 0; b <= (s.start_pos + static_cast<int>(s.token_ids.size())) / 16; ++b)
            s.block_table.push_back(b * 3 + i);
        s.do_sample = i % 2 == 0;
        s.sample_index = i;
        s.sampling = {i % 4 == 0 ? 0.f : 0.7f, 0.9f, i % 5, 777u + i};
        if (i % 3 == 1) {
            s.sampling.repetition_penalty = 1.1f;
            s.sampling.frequency_penalty = 0.5f;
            s.sampling.min_tokens = 2;
            s.sampling.min_tokens_stop_ids = {2, 151645};
            s.sampling.logit_bias_ids = {i};
            s.sampling.logit_bias_values = {-1.f};
            s.sampling.logprobs = i % 21;
        }
        m.seqs.push_back(std::move(s));
    }
    m.finished_ids = {3, 4, uint64_t{1} << 50};
    return m;
}

step_result sample_result(int num_tokens, int num_counts) {
    step_result m;
    m.step_id = 41;
    m.rank = 3;
    for (int i = 0; i < num_tokens; ++i) {
        m.tokens.push_back({uint64_t(1000 + i), 151000 + i});
        if (i % 2 == 1) m.tokens.back().logprobs = token_logprobs{-0.5f * i, {151000 + i, 3}, {-0.5f * i, -2.f}};
    }
    for (int i = 0; i < num_counts; ++i) m.expert_counts.push_back(i * 13 % 97);
    m.compute_ms = 3.25;
    m.frames_dropped = 7001;
    m.wait_ms = 0.625;
    m.exchange_steps_redone = 299;
    return m;
}

TEST(WorkerProtocol, Hello) {
    test::check_wire_contract(worker_hello{1, "cuda:1", uint64_t{80} << 30, kWorkerProtocolVersion, 999,
                                           "tcp://10.0.0.2:6001", std::string(128, '\x07'), "s3cret"},
                              decode_worker_to_engine);
}

/// Every engine flag set away from its default, so a field the codec forgets shows up as a difference.
engine_config non_default_config() {
    engine_config c;
    c.model = "/models/qwen3-moe";
    c.device = "cuda";
    c.workers = 2;
    c.num_nodes = 2;
    c.ep_transport = "nccl";
    c.max_num_batched_tokens = 4096;
    c.max_num_seqs = 256;
    c.block_size = 32;
    c.num_kv_blocks = int64_t{1} << 33;
    c.max_model_len = 32768;
    c.no_async = true;
    c.no_enable_prefix_caching = true;
    c.dp_placement = "round-robin";
    c.dp_placement_max_imbalance = 9;
    c.enable_eplb = true;
    c.eplb_interval = 3000;
    c.eplb_window = 1000;
    c.num_redundant_experts = 2;
    c.heartbeat_ms = 250;
    c.heartbeat_max_missed = 9;
    c.allow_long_max_model_len = true;
    c.threads = 3;
    c.kv_cache_mb = 1024;
    c.gpu_memory_utilization = 0.625;
    c.load_format = "dummy";
    c.quantization = "fp8";
    c.enable_dbo = true;
    c.dbo_decode_token_threshold = 7;
    c.dbo_prefill_token_threshold = 70;
    c.enforce_eager = true;
    c.eplb_stage_steps = 5;
    c.eplb_min_gain = 0.125;
    c.dummy_router_skew = 0.25;
    c.trace_steps = true;
    c.grammar_tokenizer = "/tok";
    return c;
}

TEST(WorkerProtocol, Welcome) {
    worker_welcome m;
    m.rank = 1;
    m.config = non_default_config();
    m.expert_placement = {{0, 1, 2, 3, 0, 1}, {3, 2, 1, 0, 2, 3}};
    m.nccl_unique_id = std::string(128, '\0') + "\xff";
    m.peer_endpoints = {"tcp://a:1", "tcp://b:2"};
    test::check_wire_contract(m, decode_engine_to_worker);
}

TEST(WorkerProtocol, WelcomeCarriesEveryEngineFlag) {
    // Each flag, set alone, survives the trip: none is left out of the welcome.
    const engine_config changed = non_default_config();
    int num_flags = 0;
    for_each_engine_flag(changed, [&](const engine_flag_info& info, const auto& value) {
        ++num_flags;
        worker_welcome m;
        bool found = false;
        for_each_engine_flag(m.config, [&](const engine_flag_info& other, auto& field) {
            if constexpr (std::is_same_v<std::decay_t<decltype(field)>, std::decay_t<decltype(value)>>) {
                if (std::string(other.name) == info.name) {
                    EXPECT_NE(field, value) << info.name << ": the test value must differ from the default";
                    field = value;
                    found = true;
                }
            }
        });
        ASSERT_TRUE(found) << info.name;
        const auto back = std::get<worker_welcome>(decode_engine_to_worker(encode(m)));
        EXPECT_EQ(back.config, m.config) << info.name;
    });
    EXPECT_GE(num_flags, 18);
}

TEST(WorkerProtocol, WelcomeRejectsAnUnknownFlag) {
    worker_welcome m;
    msgpack_writer w;
    w.array_header(1);
    w.array_header(2);
    w.str("no-such-flag");
    w.sint(1);
    const std::string bytes = test::with_field_replaced(encode(m), 3, w);
    const std::string msg = [&] {
        try {
            decode_engine_to_worker(bytes);
        } catch (const error& e) {
            EXPECT_EQ(e.code(), errc::protocol);
            return std::string(e.what());
        }
        return std::string();
    }();
    EXPECT_NE(msg.find("no-such-flag"), std::string::npos) << msg;
}

TEST(WorkerProtocol, Ready) { test::check_wire_contract(worker_ready{1, 12345, 4.2e12}, decode_worker_to_engine); }

TEST(WorkerProtocol, Step) {
    test::check_wire_contract(sample_step(5, 37), decode_engine_to_worker, test::same_step);
    test::check_wire_contract(step_request{}, decode_engine_to_worker, test::same_step);  // the empty step
    step_request split = sample_step(3, 9);
    split.dual_batch = true;
    test::check_wire_contract(split, decode_engine_to_worker, test::same_step);
}

TEST(WorkerProtocol, StepResult) {
    test::check_wire_contract(sample_result(4, 48), decode_worker_to_engine, test::same_step_result);
    test::check_wire_contract(step_result{}, decode_worker_to_engine, test::same_step_result);
}

TEST(WorkerProtocol, StepRejectsMalformedSeq) {
    step_request m = sample_step(1, 3);
    std::string b = encode(m);
    msgpack_writer w;  // seqs = [[5, <bin of 3 bytes>, ...]]: token ids not whole int32s
    w.array_header(1);
    w.array_header(7);
    w.uint(5);
    w.bin("abc");
    w.sint(0);
    w.int32_le(std::vector<int32_t>{0});
    w.boolean(true);
    w.uint(0);
    w.array_header(4);
    w.f32(0);
    w.f32(1);
    w.sint(0);
    w.uint(0);
    EXPECT_THROW(decode_engine_to_worker(test::with_field_replaced(b, 3, w)), error);
}

TEST(WorkerProtocol, HeartbeatShutdown) {
    test::check_wire_contract(worker_heartbeat{}, decode_worker_to_engine);
    test::check_wire_contract(worker_heartbeat{}, decode_engine_to_worker);
    test::check_wire_contract(worker_shutdown{}, decode_engine_to_worker);
}

TEST(WorkerProtocol, ExpertMove) {
    worker_expert_move m{5, 3000, {{0, 4, 17, 1, 9}, {47, 130, 3, 0, 2}}};
    test::check_wire_contract(m, decode_engine_to_worker);
    test::check_wire_contract(worker_expert_move_done{5, 1, 1 << 20, 17, 2.5, false, 0.125, 0.75},
                              decode_worker_to_engine);
}

TEST(WorkerProtocol, Error) {
    test::check_wire_contract(worker_error{2, errc::invalid_checkpoint, "model.safetensors: truncated"},
                              decode_worker_to_engine);
}

TEST(WorkerProtocol, DirectionsDoNotMix) {
    EXPECT_THROW(decode_worker_to_engine(encode(sample_step(1, 1))), error);
    EXPECT_THROW(decode_engine_to_worker(encode(sample_result(1, 1))), error);
}

// Not a benchmark, a guard: a decode-sized step (256 seqs) must round-trip in well under a millisecond.
TEST(WorkerProtocol, StepCodecIsCheap) {
    step_request m = sample_step(256, 1);
    step_result res = sample_result(256, 48 * 128);
    constexpr int kIters = 200;
    auto t0 = std::chrono::steady_clock::now();
    size_t bytes = 0;
    for (int i = 0; i < kIters; ++i) {
        std::string b = encode(m);
        bytes += b.size();
        auto back = decode_engine_to_worker(b);
        ASSERT_EQ(std::get<step_request>(back).seqs.size(), 256u);
        std::string r = encode(res);
        auto rb = decode_worker_to_engine(r);
        ASSERT_EQ(std::get<step_result>(rb).expert_counts.size(), size_t{48 * 128});
    }
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kIters;
    std::printf("step(256 seqs, %zu B) + step_result(6144 counts) encode+decode: %.1f us\n", bytes / kIters, us);
    EXPECT_LT(us, 2000.0);
}

}  // namespace
}  // namespace zmoe
