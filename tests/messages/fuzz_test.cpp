// Malformed input at scale: random bytes and mutations of valid messages must, for every decoder, either decode
// or throw zmoe::error(errc::protocol) — never crash, hang or throw anything else. Run under ASan/UBSan to also
// catch out-of-bounds reads (cmake -DCMAKE_CXX_FLAGS=-fsanitize=address,undefined).

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "messages/client_protocol.hpp"
#include "messages/engine_protocol.hpp"
#include "messages/worker_protocol.hpp"

namespace zmoe {
namespace {

using decoder = std::function<void(std::string_view)>;

std::vector<std::pair<const char*, decoder>> all_decoders() {
    return {
        {"client_request", [](std::string_view b) { decode_client_request(b); }},
        {"client_reply", [](std::string_view b) { decode_client_reply(b); }},
        {"frontend_to_engine", [](std::string_view b) { decode_frontend_to_engine(b); }},
        {"engine_to_frontend", [](std::string_view b) { decode_engine_to_frontend(b); }},
        {"engine_to_worker", [](std::string_view b) { decode_engine_to_worker(b); }},
        {"worker_to_engine", [](std::string_view b) { decode_worker_to_engine(b); }},
    };
}

std::vector<std::string> seeds() {
    client_generate g;
    g.client_request_id = "r";
    g.prompt = std::vector<int32_t>{1, 2, 3};
    g.stop = {"x"};
    step_request s;
    s.step_id = 1;
    s.seqs.resize(2);
    s.seqs[0].token_ids = {1, 2, 3};
    s.seqs[0].block_table = {0};
    s.finished_ids = {9};
    step_result res;
    res.tokens = {{1, 2}};
    res.expert_counts = {1, 2, 3, 4};
    worker_welcome w;
    w.expert_placement = {{0, 1}, {1, 0}};
    w.peer_endpoints = {"a"};
    engine_outputs o;
    o.outputs.push_back({1, {2}, true, finish_reason::stop, errc::ok, "", 1});
    engine_add_request a;
    a.prompt_token_ids = {1, 2};
    return {encode(g),
            encode(client_delta{"r", {1}, "t", true, finish_reason::stop, 1, 1}),
            encode(client_error{"r", errc::aborted, "m"}),
            encode(client_health_reply{"t", "ok", "m", 1, 1, 0, 0, 1.0, "v", "", ""}),
            encode(s),
            encode(res),
            encode(w),
            encode(worker_expert_move{1, 2, {{1, 2, 3, 4, 5}}}),
            encode(o),
            encode(a)};
}

void expect_decodes_or_protocol_error(const decoder& d, const std::string& b, size_t& num_accepted) {
    try {
        d(b);
        ++num_accepted;
    } catch (const error& e) {
        ASSERT_EQ(e.code(), errc::protocol) << e.what();
    }
}

TEST(MessagesFuzz, RandomBytes) {
    std::mt19937_64 rng(12345);
    auto decoders = all_decoders();
    size_t num_accepted = 0;
    for (int i = 0; i < 10000; ++i) {
        std::string b(rng() % 64, '\0');
        for (auto& c : b) c = static_cast<char>(rng());
        // Bias some buffers to look like a message (an array header first) so decoding gets past the envelope.
        if (!b.empty() && i % 2 == 0) b[0] = static_cast<char>(0x90 | (rng() % 16));
        if (b.size() > 1 && i % 4 == 0) b[1] = 1;
        for (const auto& [name, d] : decoders) expect_decodes_or_protocol_error(d, b, num_accepted);
    }
    SUCCEED() << num_accepted << " random buffers happened to decode";
}

TEST(MessagesFuzz, MutatedValidMessages) {
    std::mt19937_64 rng(777);
    auto decoders = all_decoders();
    auto valid = seeds();
    size_t num_accepted = 0;
    for (int i = 0; i < 10000; ++i) {
        std::string b = valid[rng() % valid.size()];
        int num_mutations = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < num_mutations && !b.empty(); ++k) {
            size_t pos = rng() % b.size();
            switch (rng() % 5) {
                case 0:
                    b[pos] = static_cast<char>(rng());
                    break;  // flip a byte
                case 1:
                    b[pos] = static_cast<char>(b[pos] ^ (1 << (rng() % 8)));
                    break;  // flip a bit
                case 2:
                    b.erase(pos, 1 + rng() % 4);
                    break;  // delete bytes
                case 3:
                    b.insert(pos, 1, static_cast<char>(rng()));
                    break;  // insert a byte
                case 4:
                    b.resize(pos);
                    break;  // truncate
            }
        }
        for (const auto& [name, d] : decoders) expect_decodes_or_protocol_error(d, b, num_accepted);
    }
    // Mutations that keep a message valid exist (e.g. a changed integer), so some must decode; if none did, the
    // decoders would be rejecting everything and this test would prove nothing.
    EXPECT_GT(num_accepted, 100u);
}

}  // namespace
}  // namespace zmoe
