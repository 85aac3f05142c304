#include "messages/engine_protocol.hpp"

#include <gtest/gtest.h>

#include "tests/messages/wire_test_util.hpp"

namespace zmoe {
namespace {

bool same_add_request(const engine_add_request& a, const engine_add_request& b) {
    return a.request_id == b.request_id && a.prompt_token_ids == b.prompt_token_ids &&
           a.sampling.temperature == b.sampling.temperature && a.sampling.top_p == b.sampling.top_p &&
           a.sampling.top_k == b.sampling.top_k && a.sampling.seed == b.sampling.seed && a.max_tokens == b.max_tokens &&
           a.stop_token_ids == b.stop_token_ids && a.ignore_eos == b.ignore_eos;
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
}

TEST(EngineProtocol, Abort) { test::check_wire_contract(engine_abort{77}, decode_frontend_to_engine); }

TEST(EngineProtocol, Outputs) {
    engine_outputs m;
    m.step_id = 9;
    m.outputs.push_back({1, {5, 6}, false, finish_reason::none, errc::ok, "", 10});
    m.outputs.push_back({2, {7}, true, finish_reason::length, errc::ok, "", 3});
    m.outputs.push_back({3, {}, true, finish_reason::error, errc::peer_dead, "worker 1 stopped answering", 4});
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
