// `zmoe bench serve --dataset multi-turn | prefix-repetition` end to end against `zmoe serve --http-port` on the demo
// model (CPU, loopback), through the ZeroMQ and the HTTP doors in one run: every turn's prompt is the history so far
// plus the model's answer plus new user tokens as the server counted them, a turn goes only after the answer before
// it, a new conversation only when a slot frees, the prefix-repetition prompts have the asked lengths, and the
// server's own prompt-token counter agrees with all of it. Bad flags are refused by name. Nothing here asserts a
// time.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;
using namespace std::chrono_literals;

namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// The hit-rate keys are there: null while the server has no prefix-cache counters, else a rate in [0, 1].
void check_prefix_cache_keys(const nlohmann::json& r) {
    for (const char* k : {"prefix_cache_queries", "prefix_cache_hits", "prefix_cache_hit_rate", "request_cached_tokens",
                          "request_cached_token_rate"})
        EXPECT_TRUE(r.contains(k)) << k;
    const auto& rate = r["prefix_cache_hit_rate"];
    if (!rate.is_null()) {
        EXPECT_GE(rate.get<double>(), 0.0);
        EXPECT_LE(rate.get<double>(), 1.0);
        EXPECT_LE(r["prefix_cache_hits"].get<double>(), r["prefix_cache_queries"].get<double>());
    }
}

/// One multi-turn pass of C conversations x T turns: what the server counted of every turn's prompt, the order of
/// the turns and the concurrency cap. answer_exact: the answers are carried as the generated ids (ZeroMQ), else as
/// their text re-encoded (HTTP: any positive length). Returns the sum of the prompt tokens the server reported.
size_t check_multi_turn_pass(const nlohmann::json& r, int conversations, int turns, int system_len, int user_len,
                             int out_len, int cap, bool answer_exact) {
    const size_t n = static_cast<size_t>(conversations * turns);
    EXPECT_EQ(r["completed"].get<size_t>(), n) << r["errors"].dump();
    EXPECT_EQ(r["failed"].get<size_t>(), 0u);
    EXPECT_EQ(r["total_output_tokens"].get<size_t>(), n * out_len);
    for (const char* k :
         {"conversation_ids", "turn_ids", "send_times", "end_times", "prompt_tokens", "answer_lens", "input_lens"})
        if (!r.contains(k) || r[k].size() != n) {
            ADD_FAILURE() << "missing or short: " << k;
            return 0;
        }
    size_t prompt_sum = 0;
    for (int c = 0; c < conversations; ++c) {
        for (int t = 0; t < turns; ++t) {
            const size_t i = static_cast<size_t>(c * turns + t);
            EXPECT_EQ(r["conversation_ids"][i].get<int>(), c);
            EXPECT_EQ(r["turn_ids"][i].get<int>(), t);
            const size_t seen = r["prompt_tokens"][i].get<size_t>();
            prompt_sum += seen;
            EXPECT_EQ(seen, r["input_lens"][i].get<size_t>()) << "conversation " << c << " turn " << t;
            const size_t answer = r["answer_lens"][i].get<size_t>();
            if (answer_exact)
                EXPECT_EQ(answer, static_cast<size_t>(out_len));
            else
                EXPECT_GT(answer, 0u);
            if (t == 0) {
                // The shared system prompt and the first user tokens.
                EXPECT_EQ(seen, static_cast<size_t>(system_len + user_len));
                continue;
            }
            // The history so far (the previous prompt), the model's answer, then new user tokens: as the server
            // counted them.
            EXPECT_EQ(seen, r["prompt_tokens"][i - 1].get<size_t>() + r["answer_lens"][i - 1].get<size_t>() +
                                static_cast<size_t>(user_len))
                << "conversation " << c << " turn " << t;
            // Sent only once the answer before it had ended.
            EXPECT_GE(r["send_times"][i].get<double>(), r["end_times"][i - 1].get<double>())
                << "conversation " << c << " turn " << t;
        }
    }
    // Never more than `cap` requests in flight: at each send, fewer than `cap` others are open.
    for (size_t i = 0; i < n; ++i) {
        const double at = r["send_times"][i].get<double>();
        int open = 0;
        for (size_t j = 0; j < n; ++j)
            if (j != i && r["send_times"][j].get<double>() <= at && at < r["end_times"][j].get<double>()) ++open;
        EXPECT_LT(open, cap) << "request " << i;
    }
    // A conversation beyond the cap starts only when another has ended all its turns (a conversation keeps its
    // slot from turn to turn).
    double first_done = 1e30;
    for (int c = 0; c < cap; ++c)
        first_done = std::min(first_done, r["end_times"][static_cast<size_t>(c * turns + turns - 1)].get<double>());
    for (int c = cap; c < conversations; ++c)
        EXPECT_GE(r["send_times"][static_cast<size_t>(c * turns)].get<double>(), first_done) << "conversation " << c;
    // Per-turn TTFT: one row per turn, every turn complete, and the later turns' median.
    EXPECT_EQ(r["ttft_by_turn"].size(), static_cast<size_t>(turns));
    for (const auto& row : r["ttft_by_turn"]) {
        EXPECT_EQ(row["completed"].get<int>(), conversations);
        EXPECT_GT(row["median_ttft_ms"].get<double>(), 0.0);
        EXPECT_LE(row["median_ttft_ms"].get<double>(), row["p99_ttft_ms"].get<double>());
    }
    EXPECT_GT(r["median_ttft_ms_later_turns"].get<double>(), 0.0);
    check_prefix_cache_keys(r);
    return prompt_sum;
}

TEST(BenchDatasetServe, MultiTurnOverZeroMqAndHttp) {
    demo_http_server s;
    ASSERT_TRUE(s.proc.running());
    constexpr int kConversations = 3, kTurns = 4, kSystem = 24, kUser = 5, kOut = 4, kCap = 2;
    const std::string json = s.dir / "multi_turn.json";
    const std::string out = s.dir / "multi_turn.out";
    // The ZeroMQ endpoint is also where the HTTP pass's health check waits for the server: wait for it first.
    zmoe::zmoe_client probe(s.endpoint());
    for (int i = 0; i < 300; ++i) {
        try {
            if (probe.health(300ms).status == "ok") break;
        } catch (const zmoe::error&) {
        }
    }
    const double seen_before = s.prompt_tokens_seen();
    const std::string cmd = "'" + kZmoe + "' bench serve --endpoint " + s.endpoint() + " --base-url " + s.base_url() +
                            " --model '" + s.model() +
                            "' --dataset multi-turn --multi-turn-num-conversations 3 --multi-turn-num-turns 4"
                            " --multi-turn-system-prompt-len 24 --multi-turn-user-len 5 --multi-turn-output-len 4"
                            " --max-concurrency 2 --rank-sample-interval 0.02 --json '" +
                            json + "' > '" + out + "'";
    ASSERT_EQ(run_bounded({"/bin/sh", "-c", cmd}, 240s), 0) << slurp(out);
    const auto r = read_json(json);
    EXPECT_EQ(r["dataset_name"], "multi-turn");
    EXPECT_EQ(r["num_prompts"].get<int>(), kConversations * kTurns);
    EXPECT_EQ(r["multi_turn_num_turns"].get<int>(), kTurns);
    EXPECT_FALSE(r.contains("random_input_len"));
    const size_t zmq_sum = check_multi_turn_pass(r["zmq"], kConversations, kTurns, kSystem, kUser, kOut, kCap, true);
    const size_t http_sum = check_multi_turn_pass(r["http"], kConversations, kTurns, kSystem, kUser, kOut, kCap, false);
    // The same user tokens in both passes (same seed): the first turns are identical requests.
    EXPECT_EQ(r["zmq"]["prompt_tokens"][0], r["http"]["prompt_tokens"][0]);
    // The engine core counted exactly the prompt tokens the two passes say they sent.
    EXPECT_DOUBLE_EQ(s.prompt_tokens_seen() - seen_before, static_cast<double>(zmq_sum + http_sum));
    // The one-rank load was read during the run, and the terminal shows the per-turn table.
    EXPECT_GT(r["zmq"]["rank_samples"].get<int>(), 0);
    ASSERT_EQ(r["zmq"]["ranks"].size(), 1u);
    EXPECT_EQ(r["zmq"]["ranks"][0]["idle_while_others_wait_samples"].get<int>(), 0);
    const std::string text = slurp(out);
    EXPECT_NE(text.find("TTFT per turn"), std::string::npos) << text;
    EXPECT_NE(text.find("Prefix cache hit rate (%):"), std::string::npos) << text;
}

TEST(BenchDatasetServe, PrefixRepetitionOverZeroMqAndHttp) {
    demo_http_server s;
    ASSERT_TRUE(s.proc.running());
    constexpr int kPrompts = 8, kPrefix = 32, kSuffix = 8, kOut = 3;
    const std::string json = s.dir / "prefix.json";
    zmoe::zmoe_client probe(s.endpoint());
    for (int i = 0; i < 300; ++i) {
        try {
            if (probe.health(300ms).status == "ok") break;
        } catch (const zmoe::error&) {
        }
    }
    const double seen_before = s.prompt_tokens_seen();
    ASSERT_EQ(run_zmoe({"bench",
                        "serve",
                        "--endpoint",
                        s.endpoint(),
                        "--base-url",
                        s.base_url(),
                        "--model",
                        s.model(),
                        "--dataset-name",
                        "prefix_repetition",
                        "--num-prompts",
                        std::to_string(kPrompts),
                        "--prefix-repetition-prefix-len",
                        std::to_string(kPrefix),
                        "--prefix-repetition-suffix-len",
                        std::to_string(kSuffix),
                        "--prefix-repetition-num-prefixes",
                        "2",
                        "--prefix-repetition-output-len",
                        std::to_string(kOut),
                        "--max-concurrency",
                        "3",
                        "--json",
                        json}),
              0);
    const auto r = read_json(json);
    EXPECT_EQ(r["dataset_name"], "prefix-repetition");
    EXPECT_EQ(r["prefix_repetition_num_prefixes"].get<int>(), 2);
    for (const char* path : {"zmq", "http"}) {
        const auto& p = r[path];
        EXPECT_EQ(p["completed"].get<int>(), kPrompts) << path << p["errors"].dump();
        EXPECT_EQ(p["total_input_tokens"].get<int>(), kPrompts * (kPrefix + kSuffix)) << path;
        EXPECT_EQ(p["total_output_tokens"].get<int>(), kPrompts * kOut) << path;
        for (const auto& len : p["input_lens"]) EXPECT_EQ(len.get<int>(), kPrefix + kSuffix) << path;
        EXPECT_FALSE(p.contains("ttft_by_turn")) << path;
        check_prefix_cache_keys(p);
    }
    EXPECT_DOUBLE_EQ(s.prompt_tokens_seen() - seen_before, 2.0 * kPrompts * (kPrefix + kSuffix));
}

/// Runs `zmoe ARGS` (bounded) and returns {exit status, stderr}.
std::pair<int, std::string> zmoe_stderr(const temp_dir& dir, const std::string& args) {
    const std::string err = dir / "err";
    const int rc = run_bounded({"/bin/sh", "-c", "'" + kZmoe + "' " + args + " 2> '" + err + "'"}, 60s);
    return {rc, slurp(err)};
}

TEST(BenchDatasetServe, BadFlagsAreRefusedByName) {
    // No server needed: the options are checked before anything is sent.
    temp_dir dir;
    const std::string base = "bench serve --endpoint tcp://127.0.0.1:1 --vocab-size 100 --ready-timeout 0 ";
    const struct {
        std::string args;
        std::string named;
    } cases[] = {
        {base + "--dataset nope", "--dataset"},
        {base + "--dataset random --dataset-name random", "--dataset-name"},
        {base + "--dataset-name sharegpt", "--dataset-name"},
        {base + "--dataset multi-turn --num-prompts 5", "--num-prompts"},
        {base + "--dataset multi-turn --random-input-len 5", "--random-input-len"},
        {base + "--dataset prefix-repetition --multi-turn-num-turns 2", "--multi-turn-num-turns"},
        {base + "--prefix-repetition-num-prefixes 3", "--prefix-repetition-num-prefixes"},
        {base + "--dataset prefix-repetition --num-prompts 2 --prefix-repetition-num-prefixes 5",
         "--prefix-repetition-num-prefixes"},
        {base + "--dataset prefix-repetition --prefix-repetition-prefix-len 0 --prefix-repetition-suffix-len 0",
         "--prefix-repetition-prefix-len"},
        {base + "--dataset multi-turn --multi-turn-num-turns 0", "--multi-turn-num-turns"},
        {base + "--dataset multi-turn --multi-turn-num-conversations 0", "--multi-turn-num-conversations"},
        {base + "--dataset multi-turn --multi-turn-output-len 0", "--multi-turn-output-len"},
        {base + "--dataset multi-turn --max-concurrency 1,2", "--max-concurrency"},
        {base + "--dataset multi-turn --base-url http://127.0.0.1:1", "--tokenizer"},
        {base + "--dataset prefix-repetition --base-url http://127.0.0.1:1 --endpoint-type chat --tokenizer x",
         "--endpoint-type"},
        {"bench serve --vocab-size 100 --base-url http://127.0.0.1:1 --rank-sample-interval 1", "--endpoint"},
        {base + "--rank-sample-interval -1", "--rank-sample-interval"},
        {"bench sweep --vocab-size 100 --dataset multi-turn", "--dataset"},
    };
    for (const auto& c : cases) {
        const auto [rc, err] = zmoe_stderr(dir, c.args);
        EXPECT_NE(rc, 0) << c.args;
        EXPECT_NE(err.find(c.named), std::string::npos) << c.args << "\n" << err;
    }
}

}  // namespace
