// n sequences per request (client_generate.n) end to end through `zmoe serve` (frontend, engine core, CPU worker
// processes on loopback): n outputs by index, sequence i reproducing a single request seeded seed + i, greedy n
// giving n identical completions, one abort ending every sequence, usage per sequence; and the JSONL batch of
// `zmoe client` and the Python client with n.

#include <gtest/gtest.h>

#include <map>

#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;
using namespace std::chrono_literals;

namespace {

const std::string kModel = kFixtures + "/models/qwen3_moe";
const std::vector<int32_t> kPrompt = {17, 42, 311, 5, 90, 128};

zmoe::client_generate request(uint32_t n, std::optional<float> temperature, std::optional<uint64_t> seed,
                              uint32_t max_tokens) {
    zmoe::client_generate g;
    g.prompt = kPrompt;
    g.max_tokens = max_tokens;
    g.temperature = temperature;
    g.seed = seed;
    g.ignore_eos = true;
    g.n = n;
    return g;
}

TEST(NSequences, ServeFansOutReproduciblyAndAbortEndsEverySequence) {
    serve_process s({"--workers", "1"}, kModel);
    zmoe::zmoe_client client(s.endpoint());

    // Sampled, seeded: n outputs, sequence i equal to a request of n = 1 seeded 7 + i; usage per sequence.
    const auto three = client.collect_all(client.generate(request(3, 1.0f, 7, 8)), 60s);
    ASSERT_EQ(three.size(), 3u);
    for (uint32_t i = 0; i < 3; ++i) {
        EXPECT_EQ(three[i].index, i);
        EXPECT_EQ(three[i].token_ids.size(), 8u);
        EXPECT_EQ(three[i].completion_tokens, 8u);
        EXPECT_EQ(three[i].prompt_tokens, kPrompt.size());
        EXPECT_EQ(three[i].reason, zmoe::finish_reason::length);
        const auto one = client.collect(client.generate(request(1, 1.0f, 7 + i, 8)), 60s);
        EXPECT_EQ(three[i].token_ids, one.token_ids) << "sequence " << i << " is not the request seeded " << 7 + i;
    }
    EXPECT_FALSE(three[0].token_ids == three[1].token_ids && three[1].token_ids == three[2].token_ids)
        << "three sampled sequences with different seeds came out identical";
    // The same seeded request again: the same n outputs.
    const auto again = client.collect_all(client.generate(request(3, 1.0f, 7, 8)), 60s);
    for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(again[i].token_ids, three[i].token_ids) << i;

    // Greedy: n identical completions, the same as n = 1.
    const auto greedy = client.collect_all(client.generate(request(4, 0.0f, std::nullopt, 6)), 60s);
    const auto greedy_one = client.collect(client.generate(request(1, 0.0f, std::nullopt, 6)), 60s);
    ASSERT_EQ(greedy.size(), 4u);
    for (const auto& c : greedy) EXPECT_EQ(c.token_ids, greedy_one.token_ids) << "sequence " << c.index;

    // Cancellation: one abort of the request ends all of its sequences (each with its own finished delta).
    const auto before = s.frontend_counters();
    const std::string cid = client.generate(request(3, 1.0f, 1, 500 - static_cast<uint32_t>(kPrompt.size())));
    std::map<uint32_t, zmoe::finish_reason> ended;
    bool aborted = false;
    while (ended.size() < 3) {
        const auto ev = client.next(cid, 60s);
        ASSERT_TRUE(ev.has_value()) << "no event within 60 s";
        ASSERT_TRUE(std::holds_alternative<zmoe::client_delta>(*ev));
        const auto& d = std::get<zmoe::client_delta>(*ev);
        ASSERT_LT(d.index, 3u);
        if (d.finished) {
            EXPECT_FALSE(ended.count(d.index)) << "sequence " << d.index << " ended twice";
            ended[d.index] = d.reason;
        }
        if (!aborted) {
            client.abort(cid);
            aborted = true;
        }
    }
    for (const auto& [i, reason] : ended) EXPECT_EQ(reason, zmoe::finish_reason::abort) << "sequence " << i;
    EXPECT_EQ(client.num_live(), 0u);
    const auto after = s.frontend_counters();
    const auto aborts = [](const nlohmann::json& c) { return c.value("requests_finished{reason=\"abort\"}", 0.0); };
    EXPECT_EQ(aborts(after) - aborts(before), 3.0) << after.dump();
    // Nothing of it is left running: every sequence was aborted in the engine core too.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    zmoe::client_health_reply h;
    do {
        h = client.health(5s);
    } while (h.num_running + h.num_waiting > 0 && std::chrono::steady_clock::now() < deadline);
    EXPECT_EQ(h.num_running + h.num_waiting, 0u);

    // n out of range: refused, naming n.
    try {
        client.collect(client.generate(request(17, 1.0f, 1, 4)), 30s);
        ADD_FAILURE() << "n = 17 was accepted";
    } catch (const zmoe::error& e) {
        EXPECT_EQ(e.code(), zmoe::errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("n must be"), std::string::npos) << e.what();
    }

    // The JSONL batch of `zmoe client`: a line with n gets its n choices and usage over all of them.
    temp_dir dir;
    {
        std::ofstream in(dir / "n.in.jsonl");
        in << R"({"prompt_token_ids": [17, 42, 311, 5, 90, 128], "max_tokens": 8, "temperature": 1.0, "seed": 7,)"
           << R"( "ignore_eos": true, "n": 3})"
           << "\n";
        in << R"({"prompt_token_ids": [17, 42, 311, 5, 90, 128], "max_tokens": 4, "temperature": 0, "n": 0})"
           << "\n";
    }
    EXPECT_EQ(run_zmoe({"client", "--endpoint", s.endpoint(), "--input", dir / "n.in.jsonl", "--output",
                        dir / "n.out.jsonl"}),
              1);  // the second line is refused
    const auto lines = read_jsonl(dir / "n.out.jsonl");
    ASSERT_EQ(lines.size(), 2u);
    ASSERT_EQ(lines[0]["choices"].size(), 3u) << lines[0].dump();
    for (uint32_t i = 0; i < 3; ++i) {
        EXPECT_EQ(lines[0]["choices"][i]["index"], i);
        EXPECT_EQ(lines[0]["choices"][i]["token_ids"].get<std::vector<int32_t>>(), three[i].token_ids) << i;
    }
    EXPECT_EQ(lines[0]["usage"]["prompt_tokens"], kPrompt.size());
    EXPECT_EQ(lines[0]["usage"]["completion_tokens"], 24);
    EXPECT_EQ(lines[1]["finish_reason"], "error");

    // The Python client: the same three sequences by index.
    nlohmann::json expected = nlohmann::json::array();
    for (const auto& c : three) expected.push_back(c.token_ids);
    auto py =
        zmoe::child_process::spawn({ZMOE_PYTHON3, std::string(ZMOE_SOURCE_DIR) + "/tests/cli/python_client_e2e.py",
                                    s.endpoint(), expected.dump()});
    const auto st = py.wait_for(60s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(*st, 0);
}

}  // namespace
