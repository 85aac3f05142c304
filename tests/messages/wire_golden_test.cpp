// The wire format, pinned: every message kind of the three protocols, with every field set, must encode to exactly
// these bytes (written by the codecs before their field lists were shared by encoder and decoder, and unchanged
// since), and those bytes must decode to a message that encodes back to them. A field list edited in a way that
// changes the wire (a field moved, dropped, retyped, or a cap that refuses what the other side sends) fails here;
// only appending a field (and its bytes here) is allowed.

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <variant>

#include "messages/client_protocol.hpp"
#include "messages/engine_protocol.hpp"
#include "messages/worker_protocol.hpp"

namespace zmoe {
namespace {

std::string hex(const std::string& bytes) {
    static const char* kDigits = "0123456789abcdef";
    std::string out;
    for (const unsigned char c : bytes) {
        out += kDigits[c >> 4];
        out += kDigits[c & 15];
    }
    return out;
}

std::string unhex(const std::string& h) {
    std::string out;
    for (size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
    return out;
}

/// Every message kind, encoded now.
std::map<std::string, std::string> encoded_messages() {
    std::map<std::string, std::string> encoded;
    const auto add = [&](const char* name, const std::string& bytes) { encoded[name] = bytes; };
    sampling_params s;
    s.temperature = 0.5f;
    s.top_p = 0.9f;
    s.top_k = 7;
    s.seed = 1234567890123ull;
    s.min_p = 0.1f;
    s.presence_penalty = 0.25f;
    s.frequency_penalty = -0.5f;
    s.repetition_penalty = 1.5f;
    s.min_tokens = 3;
    s.min_tokens_stop_ids = {2, 5};
    s.logit_bias_ids = {9, 10};
    s.logit_bias_values = {1.5f, -2.f};
    s.logprobs = 2;
    token_logprobs lp;
    lp.logprob = -0.75f;
    lp.top_ids = {4, 8};
    lp.top_logprobs = {-0.5f, -1.25f};
    // worker protocol
    worker_hello h;
    h.rank = 3;
    h.device = "cuda:3";
    h.free_memory = 80ull << 30;
    h.pid = 4242;
    h.data_endpoint = "tcp://1.2.3.4:5";
    h.collective_id = std::string("\x00\x01\xff", 3);
    h.auth = "secret";
    add("worker_hello", encode(h));
    worker_welcome w;
    w.rank = 1;
    w.config.model = "/m";
    w.config.workers = 2;
    w.config.max_num_batched_tokens = 2048;  // pinned, whatever the default
    w.config.enable_eplb = true;
    w.config.eplb_min_gain = 0.5;
    w.expert_placement = {{0, 1, 2, 3}, {3, 2, 1, 0}};
    w.nccl_unique_id = "nccl";
    w.peer_endpoints = {"a", "b"};
    add("worker_welcome", encode(w));
    worker_ready rd;
    rd.rank = 1;
    rd.num_kv_blocks = 99999;
    rd.copy_bandwidth = 3.5e12;
    add("worker_ready", encode(rd));
    step_request st;
    st.step_id = 77;
    st.dual_batch = true;
    st.finished_ids = {5, 1ull << 40};
    scheduled_seq q;
    q.request_id = 12;
    q.token_ids = {1, -2, 300000};
    q.start_pos = 17;
    q.block_table = {4, 5};
    q.do_sample = true;
    q.sample_index = 6;
    q.sampling = s;
    q.structured = {structured_kind::regex, "a+"};
    q.output_token_ids = {7, 8};
    st.seqs = {q, scheduled_seq{}};
    add("step_request", encode(st));
    step_result res;
    res.step_id = 77;
    res.rank = -1;
    res.tokens = {{12, 99, std::nullopt}, {13, 100, lp}};
    res.expert_counts = {1, 0, 70000};
    res.compute_ms = 1.25;
    res.frames_dropped = 4;
    res.wait_ms = 0.5;
    res.exchange_steps_redone = 2;
    add("step_result", encode(res));
    add("worker_heartbeat", encode(worker_heartbeat{}));
    add("worker_shutdown", encode(worker_shutdown{}));
    worker_expert_move mv;
    mv.move_id = 2;
    mv.apply_at_step = 30;
    mv.moves = {{1, 5, 3, 0, 2}, {0, 1, -1, 1, 7}};
    add("worker_expert_move", encode(mv));
    worker_expert_move_done md;
    md.move_id = 2;
    md.rank = 1;
    md.bytes_moved = 1 << 20;
    md.switched_at_step = 30;
    md.transfer_ms = 2.5;
    md.transfer_done = false;
    md.switch_ms = 0.125;
    md.install_ms = 0.75;
    add("worker_expert_move_done", encode(md));
    add("worker_error", encode(worker_error{2, errc::out_of_memory, "no room"}));
    // engine protocol
    add("engine_hello", encode(engine_hello{"fe", -5, "k"}));
    engine_welcome ew;
    ew.num_workers = 2;
    ew.max_num_seqs = 64;
    ew.max_model_len = 4096;
    ew.block_size = 16;
    ew.num_kv_blocks = 1ull << 33;
    ew.heartbeat_interval_ms = 500;
    add("engine_welcome", encode(ew));
    engine_add_request ar;
    ar.request_id = 9;
    ar.prompt_token_ids = {1, 2, 3};
    ar.sampling = s;
    ar.max_tokens = 100;
    ar.stop_token_ids = {7};
    ar.ignore_eos = true;
    ar.cache_salt = "s1";
    ar.structured = {structured_kind::json_object, ""};
    add("engine_add_request", encode(ar));
    add("engine_abort", encode(engine_abort{123}));
    engine_outputs eo;
    eo.step_id = 5;
    engine_request_output o1;
    o1.request_id = 9;
    o1.new_token_ids = {4, 5};
    o1.finished = true;
    o1.reason = finish_reason::stop;
    o1.error_code = errc::ok;
    o1.num_prompt_tokens = 3;
    o1.new_logprobs = {lp, lp};
    o1.num_cached_tokens = 2;
    engine_request_output o2;
    o2.request_id = 10;
    o2.finished = true;
    o2.reason = finish_reason::error;
    o2.error_code = errc::peer_dead;
    o2.error_message = "dead";
    eo.outputs = {o1, o2};
    add("engine_outputs", encode(eo));
    add("engine_metrics", encode(engine_metrics{"t1"}));
    add("engine_metrics_reply", encode(engine_metrics_reply{"t1", "{\"a\":1}"}));
    add("engine_heartbeat", encode(engine_heartbeat{}));
    add("engine_shutdown", encode(engine_shutdown{}));
    add("engine_error", encode(engine_error{errc::protocol, "bad"}));
    // client protocol
    client_generate g;
    g.client_request_id = "r1";
    g.prompt = std::string("hello");
    g.max_tokens = 20;
    g.temperature = 0.7f;
    g.top_k = 40;
    g.seed = 5;
    g.stop = {"\n", "END"};
    g.ignore_eos = true;
    g.stream = false;
    g.chat = "[]";
    g.stop_token_ids = {2};
    g.logprobs = 3;
    g.presence_penalty = 0.5f;
    g.frequency_penalty = 0.25f;
    g.repetition_penalty = 1.1f;
    g.logit_bias = {{5, 1.f}, {6, -1.f}};
    g.min_tokens = 2;
    g.n = 3;
    g.cache_salt = "s1";
    g.structured = {structured_kind::choice, "[\"x\"]"};
    add("client_generate_text", encode(g));
    client_generate g2;
    g2.client_request_id = "r2";
    g2.prompt = std::vector<int32_t>{1, 2, 3};
    add("client_generate_ids", encode(g2));
    add("client_abort", encode(client_abort{"r1"}));
    add("client_health", encode(client_health{"h"}));
    add("client_metrics", encode(client_metrics{"m"}));
    add("client_heartbeat", encode(client_heartbeat{}));
    add("client_hello", encode(client_hello{"key"}));
    client_tokenize tk;
    tk.tag = "t";
    tk.text = "abc";
    tk.chat = "";
    tk.add_special_tokens = false;
    add("client_tokenize", encode(tk));
    client_detokenize dt;
    dt.tag = "d";
    dt.token_ids = {1, 2};
    add("client_detokenize", encode(dt));
    client_delta d;
    d.client_request_id = "r1";
    d.token_ids = {4};
    d.text = "x";
    d.finished = true;
    d.reason = finish_reason::length;
    d.prompt_tokens = 3;
    d.completion_tokens = 1;
    d.logprobs = {lp};
    d.index = 2;
    d.cached_tokens = 16;
    add("client_delta", encode(d));
    add("client_error", encode(client_error{"r1", errc::overloaded, "busy"}));
    client_health_reply hr;
    hr.tag = "h";
    hr.status = "ok";
    hr.model = "m";
    hr.num_workers = 2;
    hr.num_workers_alive = 2;
    hr.num_running = 1;
    hr.num_waiting = 4;
    hr.uptime_s = 12.5;
    hr.version = "0.1";
    hr.detail = "";
    hr.run_id = "run";
    add("client_health_reply", encode(hr));
    add("client_metrics_reply", encode(client_metrics_reply{"m", "{}"}));
    client_tokens_reply tr;
    tr.tag = "t";
    tr.token_ids = {1};
    tr.text = "a";
    tr.pieces = {"a", "b"};
    tr.max_model_len = 100;
    tr.code = errc::invalid_argument;
    tr.message = "no";
    add("client_tokens_reply", encode(tr));
    return encoded;
}

const std::map<std::string, std::string> kGolden = {
    {"worker_hello",
     "9a020103a6637564613a33cf000000140000000002cd1092af7463703a2f2f312e322e332e343a35c4030001ffa67365"
     "63726574"},
    // The engine configuration travels as [name, value] pairs (one per engine flag): a new flag adds a pair,
    // here "ep-transport" ("auto"), which decoders read by name.
    {"worker_welcome",
     "97020201dc002392a56d6f64656ca22f6d92a6646576696365a363707592a7776f726b6572730292a96e756d2d6e6f64"
     "65730192b66d61782d6e756d2d626174636865642d746f6b656e73cd080092ac6d61782d6e756d2d736571734092aa62"
     "6c6f636b2d73697a651092ad6e756d2d6b762d626c6f636b730092ad6d61782d6d6f64656c2d6c656e0092b8616c6c6f"
     "772d6c6f6e672d6d61782d6d6f64656c2d6c656ec292a86e6f2d6173796e63c292b86e6f2d656e61626c652d70726566"
     "69782d63616368696e67c292ac64702d706c6163656d656e74ab63616368652d617761726592ba64702d706c6163656d"
     "656e742d6d61782d696d62616c616e63650492ab656e61626c652d65706c62c392ad65706c622d696e74657276616c20"
     "92ab65706c622d77696e646f774092b56e756d2d726564756e64616e742d657870657274730092b065706c622d737461"
     "67652d73746570730492ad65706c622d6d696e2d6761696ecb3fe000000000000092aa656e61626c652d64626fc292ba"
     "64626f2d6465636f64652d746f6b656e2d7468726573686f6c64ce4000000092bb64626f2d70726566696c6c2d746f6b"
     "656e2d7468726573686f6c640092ac6865617274626561742d6d73cd03e892b46865617274626561742d6d61782d6d69"
     "737365640392a7746872656164730092ab6b762d63616368652d6d62cd010092b66770752d6d656d6f72792d7574696c"
     "697a6174696f6ecb3feccccccccccccd92ab6c6f61642d666f726d6174a46175746f92ac7175616e74697a6174696f6e"
     "a092ad656e666f7263652d6561676572c292b164756d6d792d726f757465722d736b65770092ab74726163652d737465"
     "7073c292b16772616d6d61722d746f6b656e697a6572a092ac65702d7472616e73706f7274a46175746f929400010203"
     "9403020100c4046e63636c92a161a162"},
    {"worker_ready", "95020301ce0001869fcf0000032ee841b800"},
    {"step_request",
     "9602044d92990cc40c01000000feffffffe093040011c4080400000005000000c3069dca3f000000ca3f66666607cf00"
     "00011f71fb04cbca3dcccccdca3e800000cabf000000ca3fc000000392020592090a92ca3fc00000fe0292a572656765"
     "78a2612bc40807000000080000009900c40000c400c2009d000100000000000100909090ff92a0a0c4009205cf000001"
     "0000000000c3"},
    {"step_result",
     "9a02054dff92920c63930d6493cabf40000092040892cabf000000cabfa00000c40c010000000000000070110100cb3f"
     "f400000000000004cb3fe000000000000002"},
    {"worker_heartbeat", "920206"},
    {"worker_shutdown", "920207"},
    {"worker_expert_move", "950208021e92950105030002950001ff0107"},
    {"worker_expert_move_done", "9a02090201ce001000001ecb4004000000000000c2cb3fc0000000000000cb3fe8000000000000"},
    {"worker_error", "95020a0205a76e6f20726f6f6d"},
    {"engine_hello", "950101a26665fba16b"},
    {"engine_welcome", "9801020240cd100010cf0000000200000000cd01f4"},
    {"engine_add_request",
     "9a010309930102039dca3f000000ca3f66666607cf0000011f71fb04cbca3dcccccdca3e800000cabf000000ca3fc000"
     "000392020592090a92ca3fc00000fe02649107c3a2733192ab6a736f6e5f6f626a656374a0"},
    {"engine_abort", "9301047b"},
    {"engine_outputs",
     "94010505929909920405c30200a0039293cabf40000092040892cabf000000cabfa0000093cabf40000092040892cabf"
     "000000cabfa0000002990a90c30406a464656164009000"},
    {"engine_metrics", "930106a27431"},
    {"engine_metrics_reply", "940107a27431a77b2261223a317d"},
    {"engine_heartbeat", "920108"},
    {"engine_shutdown", "920109"},
    {"engine_error", "94010a08a3626164"},
    {"client_generate_text",
     "dc00180101a27231a568656c6c6f14ca3f333333c0280592a10aa3454e44c3c2a25b5d910203ca3f000000ca3e800000"
     "ca3f8ccccdc0929205019206ff0203a2733192a663686f696365a55b2278225d"},
    {"client_generate_ids", "dc00180101a272329301020310c0c0c0c090c2c3a090c00000c0c0900001a092a0a0"},
    {"client_abort", "930102a27231"},
    {"client_health", "930103a168"},
    {"client_metrics", "930104a16d"},
    {"client_heartbeat", "920105"},
    {"client_hello", "930106a36b6579"},
    {"client_tokenize", "960107a174a3616263a0c2"},
    {"client_detokenize", "940108a164920102"},
    {"client_delta", "9c0110a272319104a178c3a66c656e67746803019193cabf40000092040892cabf000000cabfa000000210"},
    {"client_error", "950111a272310ba462757379"},
    {"client_health_reply", "9d0112a168a26f6ba16d02020104cb4029000000000000a3302e31a0a372756e"},
    {"client_metrics_reply", "940113a16da27b7d"},
    {"client_tokens_reply", "990114a1749101a16192a161a1626401a26e6f"},
};

std::string reencode(const std::string& name, const std::string& bytes) {
    const auto again = [](const auto& decoded) { return std::visit([](const auto& m) { return encode(m); }, decoded); };
    if (name == "worker_hello" || name == "worker_ready" || name == "step_result" || name == "worker_heartbeat" ||
        name == "worker_expert_move_done" || name == "worker_error")
        return again(decode_worker_to_engine(bytes));
    if (name == "worker_welcome" || name == "step_request" || name == "worker_shutdown" || name == "worker_expert_move")
        return again(decode_engine_to_worker(bytes));
    if (name == "engine_hello" || name == "engine_add_request" || name == "engine_abort" || name == "engine_metrics" ||
        name == "engine_shutdown")
        return again(decode_frontend_to_engine(bytes));
    if (name == "engine_welcome" || name == "engine_outputs" || name == "engine_metrics_reply" ||
        name == "engine_heartbeat" || name == "engine_error")
        return again(decode_engine_to_frontend(bytes));
    if (name == "client_generate_text" || name == "client_generate_ids" || name == "client_abort" ||
        name == "client_health" || name == "client_metrics" || name == "client_heartbeat" || name == "client_hello" ||
        name == "client_tokenize" || name == "client_detokenize")
        return again(decode_client_request(bytes));
    if (name == "client_delta" || name == "client_error" || name == "client_health_reply" ||
        name == "client_metrics_reply" || name == "client_tokens_reply")
        return again(decode_client_reply(bytes));
    ADD_FAILURE() << "no decoder for " << name;
    return {};
}

TEST(WireGolden, EveryMessageEncodesToItsPinnedBytes) {
    const auto encoded = encoded_messages();
    ASSERT_EQ(encoded.size(), kGolden.size());
    for (const auto& [name, want] : kGolden) {
        ASSERT_TRUE(encoded.contains(name)) << name;
        EXPECT_EQ(hex(encoded.at(name)), want) << name;
    }
}

TEST(WireGolden, PinnedBytesDecodeAndEncodeBackUnchanged) {
    for (const auto& [name, want] : kGolden) EXPECT_EQ(hex(reencode(name, unhex(want))), want) << name;
}

}  // namespace
}  // namespace zmoe
