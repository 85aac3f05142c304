#include "messages/engine_protocol.hpp"

#include <gtest/gtest.h>

#include "tests/messages/wire_test_util.hpp"

namespace zmoe {
namespace {

bool same_add_request(const engine_add_request& a, const engine_add_request& b) {
    return a.request_id == b.request_id && a.prompt_token_ids == b.prompt_token_ids && a.sampling == b.sampling &&
           a.max_tokens == b.max_tokens && a.stop_token_ids == b.stop_token_ids && a.ignore_eos == b.ignore_eos;
}

TEST(EngineProtocol, Hello) {
    test::check_wire_contract(engine_hello{"frontend", 4242, "s3cret"}, decode_frontend_to_engine);
}

TEST(EngineProtocol, Welcome) {
    test::check_wire_contract(engine_welcome{2, 256, 4096, 16, 100000, 500}, decode_engine_to_frontend);
}

TEST(EngineProtocol, AddRequest) {
    engine_add_request m;
    m.request_id = (uint64_t{1} << 40) + 3;
    m.prompt_token_ids = {151644, 872, 198, 0, 2147483647};
    m.sampling = {0.8f, 0.95f, 20, 0xdeadbeefcafeULL};
    m.max_tokens = 128;
    m.stop_token_ids = {151645, 151643};
    m.ignore_eos = true;
    test::check_wire_contract(m, decode_frontend_to_engine, same_add_request);
    m.sampling = {.temperature = 0.6f,
                  .top_p = 0.9f,
                  .top_k = 0,
                  .seed = 5,
                  .min_p = 0.05f,
                  .presence_penalty = -1.5f,
                  .frequency_penalty = 0.5f,
                  .repetition_penalty = 1.2f,
                  .min_tokens = 4,
                  .min_tokens_stop_ids = {151645},
                  .logit_bias_ids = {7, 99},
                  .logit_bias_values = {-100.f, 2.5f},
                  .logprobs = 20};
    test::check_wire_contract(m, decode_frontend_to_engine, same_add_request);
}

// A peer that predates the appended sampling fields sends [temperature, top_p, top_k, seed]: they decode as off.
TEST(EngineProtocol, AddRequestFromAnOlderPeer) {
    engine_add_request m;
    m.request_id = 5;
    m.prompt_token_ids = {1, 2};
    m.max_tokens = 3;
    m.sampling = {.temperature = 0.5f, .top_p = 0.8f, .top_k = 3, .seed = 9, .min_p = 0.5f, .logprobs = 2};
    msgpack_writer w;
    w.array_header(4);
    w.f32(0.5f);
    w.f32(0.8f);
    w.sint(3);
    w.uint(9);
    const auto decoded =
        std::get<engine_add_request>(decode_frontend_to_engine(test::with_field_replaced(encode(m), 4, w)));
    EXPECT_EQ(decoded.sampling, (sampling_params{.temperature = 0.5f, .top_p = 0.8f, .top_k = 3, .seed = 9}));
}

TEST(EngineProtocol, Abort) { test::check_wire_contract(engine_abort{77}, decode_frontend_to_engine); }

TEST(EngineProtocol, Outputs) {
    engine_outputs m;
    m.step_id = 9;
    m.outputs.push_back({1, {5, 6}, false, finish_reason::none, errc::ok, "", 10});
    m.outputs.push_back({2, {7}, true, finish_reason::length, errc::ok, "", 3});
    m.outputs.push_back({3, {}, true, finish_reason::error, errc::peer_dead, "worker 1 stopped answering", 4});
    m.outputs.push_back({4,
                         {8, 9},
                         false,
                         finish_reason::none,
                         errc::ok,
                         "",
                         2,
                         {{-0.25f, {8, 3}, {-0.25f, -1.5f}}, {-3.f, {1}, {-0.1f}}}});
    test::check_wire_contract(m, decode_engine_to_frontend);
    test::check_wire_contract(engine_outputs{10, {}}, decode_engine_to_frontend);
}

TEST(EngineProtocol, OutputsRejectBadFinishReasonAndShortRecords) {
    engine_outputs m;
    m.outputs.push_back({1, {5}, true, static_cast<finish_reason>(9), errc::ok, "", 1});
    EXPECT_THROW(decode_engine_to_frontend(encode(m)), error);

    msgpack_writer w;  // outputs = [[1]]: a record missing all but its first field
    w.array_header(1);
    w.array_header(1);
    w.uint(1);
    engine_outputs ok;
    EXPECT_THROW(decode_engine_to_frontend(test::with_field_replaced(encode(ok), 3, w)), error);
}

TEST(EngineProtocol, Metrics) {
    test::check_wire_contract(engine_metrics{"t"}, decode_frontend_to_engine);
    test::check_wire_contract(engine_metrics_reply{"t", "{\"steps\":3}"}, decode_engine_to_frontend);
}

TEST(EngineProtocol, HeartbeatShutdownError) {
    test::check_wire_contract(engine_heartbeat{}, decode_frontend_to_engine);
    test::check_wire_contract(engine_heartbeat{}, decode_engine_to_frontend);
    test::check_wire_contract(engine_shutdown{}, decode_frontend_to_engine);
    test::check_wire_contract(engine_error{errc::protocol, "hello: protocol version 2"}, decode_engine_to_frontend);
}

TEST(EngineProtocol, DirectionsDoNotMix) {
    EXPECT_THROW(decode_engine_to_frontend(encode(engine_abort{1})), error);
    EXPECT_THROW(decode_frontend_to_engine(encode(engine_welcome{})), error);
}

}  // namespace
}  // namespace zmoe
