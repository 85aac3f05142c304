#include "messages/client_protocol.hpp"

#include <gtest/gtest.h>

#include <msgpack.hpp>

#include "messages/envelope.hpp"
#include "tests/messages/wire_test_util.hpp"

namespace zmoe {
namespace {

client_generate sample_generate() {
    client_generate m;
    m.client_request_id = "req-1";
    m.prompt = std::string("The capital of France is");
    m.max_tokens = 32;
    m.temperature = 0.7f;
    m.top_p = 0.9f;
    m.top_k = 40;
    m.seed = 1234;
    m.stop = {"\n\n", "###"};
    m.ignore_eos = true;
    m.stream = false;
    return m;
}

TEST(ClientProtocol, GenerateWithText) { test::check_wire_contract(sample_generate(), decode_client_request); }

TEST(ClientProtocol, GenerateWithTokenIdsAndNoSeed) {
    client_generate m = sample_generate();
    m.prompt = std::vector<int32_t>{1, 2, 151643, 0};
    m.seed.reset();
    m.stop.clear();
    test::check_wire_contract(m, decode_client_request);
}

TEST(ClientProtocol, GenerateWithChatMessages) {
    client_generate m = sample_generate();
    m.prompt = std::string();
    m.chat = R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})";
    test::check_wire_contract(m, decode_client_request);
}

TEST(ClientProtocol, GenerateWithNSequences) {
    client_generate m = sample_generate();
    m.n = 4;
    test::check_wire_contract(m, decode_client_request);
    EXPECT_EQ(std::get<client_generate>(decode_client_request(encode(m))).n, 4u);
}

TEST(ClientProtocol, GenerateWithEveryStructuredOutputKind) {
    for (const auto& s :
         {structured_output{structured_kind::json_schema, R"({"type":"object"})"},
          structured_output{structured_kind::json_object, ""}, structured_output{structured_kind::regex, "[a-z]{3}"},
          structured_output{structured_kind::choice, R"(["a","b"])"},
          structured_output{structured_kind::grammar, R"(root ::= "x")"}}) {
        client_generate m = sample_generate();
        m.structured = s;
        test::check_wire_contract(m, decode_client_request);
        EXPECT_EQ(std::get<client_generate>(decode_client_request(encode(m))).structured, s);
    }
}

TEST(ClientProtocol, RejectsAnUnknownStructuredOutputKind) {
    client_generate m = sample_generate();
    m.structured = {structured_kind::regex, "a"};
    const std::string b = encode(m);
    const auto replaced = [&](const std::string& kind) {
        msgpack_writer w;
        w.array_header(2);
        w.str(kind);
        w.str("a");
        return test::with_field_replaced(b, 23, w);
    };
    EXPECT_NO_THROW(decode_client_request(replaced("choice")));
    try {
        decode_client_request(replaced("yaml"));
        ADD_FAILURE() << "accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("unknown structured-output kind 'yaml'"), std::string::npos) << e.what();
    }
    msgpack_writer one;
    one.array_header(1);
    one.str("regex");
    EXPECT_THROW(decode_client_request(test::with_field_replaced(b, 23, one)), error);
}

TEST(ClientProtocol, Abort) { test::check_wire_contract(client_abort{"req-7"}, decode_client_request); }
TEST(ClientProtocol, Health) { test::check_wire_contract(client_health{"h1"}, decode_client_request); }
TEST(ClientProtocol, Metrics) { test::check_wire_contract(client_metrics{"m1"}, decode_client_request); }
TEST(ClientProtocol, Hello) { test::check_wire_contract(client_hello{"an-api-key"}, decode_client_request); }
TEST(ClientProtocol, HeartbeatBothWays) {
    test::check_wire_contract(client_heartbeat{}, decode_client_request);
    test::check_wire_contract(client_heartbeat{}, decode_client_reply);
}

TEST(ClientProtocol, Delta) {
    client_delta m{"req-1", {11, 12, 13}, " Paris.", true, finish_reason::stop, 6, 3};
    test::check_wire_contract(m, decode_client_reply);
    m.finished = false;
    m.reason = finish_reason::none;
    m.token_ids.clear();
    m.text.clear();
    test::check_wire_contract(m, decode_client_reply);
    m.index = 3;  // the fourth of the request's n sequences
    test::check_wire_contract(m, decode_client_reply);
    EXPECT_EQ(std::get<client_delta>(decode_client_reply(encode(m))).index, 3u);
}

TEST(ClientProtocol, Error) {
    test::check_wire_contract(client_error{"req-2", errc::invalid_argument, "top_p must be in (0, 1]"},
                              decode_client_reply);
    test::check_wire_contract(client_error{"", errc::protocol, "not msgpack"}, decode_client_reply);
}

TEST(ClientProtocol, HealthReply) {
    client_health_reply m{"h1",   "degraded", "qwen3-moe-tiny", 2, 1, 5, 1, 12.5, "0.1.0", "worker 1 stopped answering",
                          "run-7"};
    test::check_wire_contract(m, decode_client_reply);
}

TEST(ClientProtocol, MetricsReply) {
    test::check_wire_contract(client_metrics_reply{"m1", R"({"frontend":{"requests":3}})"}, decode_client_reply);
}

TEST(ClientProtocol, TokenizeAndDetokenize) {
    test::check_wire_contract(client_tokenize{"t1", "Hello there", "", false}, decode_client_request);
    test::check_wire_contract(client_tokenize{"t2", "", R"({"messages":[{"role":"user","content":"hi"}]})", true},
                              decode_client_request);
    test::check_wire_contract(client_detokenize{"d1", {9707, 1052, 0}}, decode_client_request);
    test::check_wire_contract(
        client_tokens_reply{"d1", {9707, 1052}, "Hello there", {"Hello", " there"}, 4096, errc::ok, ""},
        decode_client_reply);
    test::check_wire_contract(client_tokens_reply{"t9", {}, "", {}, 0, errc::invalid_argument, "token id 999999"},
                              decode_client_reply);
}

TEST(ClientProtocol, DirectionsDoNotMix) {
    EXPECT_THROW(decode_client_reply(encode(sample_generate())), error);
    EXPECT_THROW(decode_client_request(encode(client_delta{})), error);
}

TEST(ClientProtocol, RejectsUnknownFinishReason) {
    std::string b = encode(client_delta{"r", {}, "", true, finish_reason::length, 1, 1});
    msgpack_writer w;
    w.str("tired");
    EXPECT_THROW(decode_client_reply(test::with_field_replaced(b, 6, w)), error);
}

TEST(ClientProtocol, RejectsPromptOfWrongElementType) {
    std::string b = encode(sample_generate());
    msgpack_writer w;
    w.array_header(2);
    w.sint(1);
    w.str("two");
    EXPECT_THROW(decode_client_request(test::with_field_replaced(b, 3, w)), error);
}

// A client in another language builds the message with a generic msgpack library: floats as float64, small
// ints in whatever width. The decoder must accept it.
TEST(ClientProtocol, AcceptsAGenericMsgpackEncoding) {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> pk(buf);
    pk.pack_array(24);
    pk.pack_uint32(kClientProtocolVersion);
    pk.pack_uint64(static_cast<uint8_t>(client_kind::generate));
    pk.pack(std::string("abc"));
    pk.pack(std::vector<int64_t>{5, 6, 7});
    pk.pack_int64(8);     // max_tokens
    pk.pack_double(0.0);  // temperature
    pk.pack_double(1.0);  // top_p
    pk.pack_int64(-1);    // top_k
    pk.pack_nil();        // seed
    pk.pack(std::vector<std::string>{"</s>"});
    pk.pack_false();
    pk.pack_true();
    pk.pack(std::string());            // chat
    pk.pack(std::vector<int64_t>{2});  // stop_token_ids
    pk.pack_uint8(3);                  // logprobs
    pk.pack_double(0.5);               // presence_penalty
    pk.pack_int64(0);                  // frequency_penalty, as an integer
    pk.pack_nil();                     // repetition_penalty
    pk.pack_double(0.1);               // min_p
    pk.pack_array(1);                  // logit_bias
    pk.pack_array(2);
    pk.pack_int64(9);
    pk.pack_double(-1.5);
    pk.pack_uint64(2);             // min_tokens
    pk.pack_uint8(3);              // n
    pk.pack(std::string("salt"));  // cache_salt
    pk.pack_array(2);              // structured
    pk.pack(std::string("regex"));
    pk.pack(std::string("[0-9]+"));
    auto req = decode_client_request({buf.data(), buf.size()});
    const auto& g = std::get<client_generate>(req);
    EXPECT_EQ(g.client_request_id, "abc");
    EXPECT_EQ(std::get<std::vector<int32_t>>(g.prompt), (std::vector<int32_t>{5, 6, 7}));
    EXPECT_EQ(g.max_tokens, 8u);
    EXPECT_EQ(g.temperature, 0.f);
    EXPECT_EQ(g.top_k, -1);
    EXPECT_FALSE(g.seed.has_value());
    EXPECT_EQ(g.stop, std::vector<std::string>{"</s>"});
    EXPECT_EQ(g.stop_token_ids, std::vector<int32_t>{2});
    EXPECT_EQ(g.logprobs, 3u);
    EXPECT_EQ(g.structured, (structured_output{structured_kind::regex, "[0-9]+"}));
    EXPECT_EQ(g.presence_penalty, 0.5f);
    EXPECT_EQ(g.frequency_penalty, 0.f);
    EXPECT_FALSE(g.repetition_penalty.has_value());
    EXPECT_EQ(g.min_p, 0.1f);
    EXPECT_EQ(g.logit_bias, (std::vector<std::pair<int32_t, float>>{{9, -1.5f}}));
    EXPECT_EQ(g.min_tokens, 2u);
    EXPECT_EQ(g.n, 3u);
    EXPECT_EQ(g.cache_salt, "salt");
}

TEST(ClientProtocol, RejectsOversizedFrameAndNonArrays) {
    EXPECT_THROW(decode_client_request(std::string(kMaxFrameBytes + 1, '\x90')), error);
    EXPECT_THROW(decode_client_request("\x81\x01\x02"), error);  // a map
    EXPECT_THROW(decode_client_request("hello"), error);         // not msgpack at all
    EXPECT_THROW(decode_client_request(""), error);
}

}  // namespace
}  // namespace zmoe
