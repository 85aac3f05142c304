// Prefix caching end to end on CPU workers: greedy tokens with the cache on equal those with it off on every fixture
// family (MLA included), also with a KV pool small enough to force eviction and preemption, with chunked prefill,
// n > 1 and two data-parallel ranks; and a second turn through `zmoe serve` that reuses the first turn's prompt and
// answer, reported as cached tokens to the client.

#include <gtest/gtest.h>

#include <fstream>

#include "actors/zmoe_client.hpp"
#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;
using namespace std::chrono_literals;

namespace {

std::vector<int> ids_of(const nlohmann::json& p) { return p["token_ids"].get<std::vector<int>>(); }

std::vector<int> concat(std::vector<int> a, const std::vector<int>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

/// Requests that share prefixes of different lengths (whole blocks and not), an exact repeat, and n = 3, built from
/// the fixture's reference prompts.
void write_shared_prefix_requests(const std::string& model, const std::string& path) {
    const auto ref = read_json(kFixtures + "/models/" + model + "/reference.json");
    const auto& p = ref["prompts"];
    const std::vector<int> base = ids_of(p[5]);  // 64 tokens
    const std::vector<int> head(base.begin(), base.begin() + 40);
    const std::vector<std::vector<int>> prompts = {base,
                                                   concat(base, ids_of(p[4])),
                                                   concat(head, ids_of(p[3])),
                                                   concat(concat(base, ids_of(p[4])), ids_of(p[2])),
                                                   ids_of(p[4]),
                                                   base};
    std::ofstream out(path);
    for (const auto& prompt : prompts) {
        out << nlohmann::json{{"prompt_token_ids", prompt},
                              {"max_tokens", 10},
                              {"temperature", 0},
                              {"ignore_eos", true}}
                   .dump()
            << "\n";
    }
    out << nlohmann::json{{"prompt_token_ids", concat(head, ids_of(p[2]))},
                          {"max_tokens", 10},
                          {"temperature", 0},
                          {"ignore_eos", true},
                          {"n", 3}}
               .dump()
        << "\n";
}

struct run_result {
    std::vector<nlohmann::json> lines;
    nlohmann::json metrics;
};

run_result generate(const std::string& model, const std::string& input, const temp_dir& dir, const std::string& tag,
                    const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"generate", "--model",        kFixtures + "/models/" + model, "--input",
                                     input,      "--output",       dir / (tag + ".out.jsonl"),     "--threads",
                                     "1",        "--metrics-json", dir / (tag + ".metrics.json")};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run_zmoe(args), 0) << model << " " << tag;
    return {read_jsonl(dir / (tag + ".out.jsonl")), read_json(dir / (tag + ".metrics.json"))};
}

/// The token ids of every sequence of every line.
std::vector<nlohmann::json> tokens_of(const run_result& r) {
    std::vector<nlohmann::json> out;
    for (const auto& line : r.lines) {
        if (line.contains("choices")) {
            for (const auto& c : line["choices"]) out.push_back(c["token_ids"]);
        } else {
            out.push_back(line["token_ids"]);
        }
    }
    return out;
}

double engine_counter_sum(const nlohmann::json& metrics, const std::string& prefix) {
    double sum = 0;
    for (const auto& [name, v] : metrics["engine_core"]["counters"].items())
        if (name.rfind(prefix, 0) == 0) sum += v.get<double>();
    return sum;
}

uint64_t cached_tokens_total(const run_result& r) {
    uint64_t n = 0;
    for (const auto& line : r.lines) n += line["usage"]["prompt_tokens_details"]["cached_tokens"].get<uint64_t>();
    return n;
}

class PrefixCacheMatchesNoCache : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixCacheMatchesNoCache, GreedyTokens) {
    const std::string model = GetParam();
    temp_dir dir;
    const std::string input = dir / "in.jsonl";
    write_shared_prefix_requests(model, input);
    const run_result off = generate(model, input, dir, "off", {"--no-enable-prefix-caching"});
    ASSERT_EQ(off.lines.size(), 7u);
    EXPECT_EQ(cached_tokens_total(off), 0u);
    EXPECT_EQ(engine_counter_sum(off.metrics, "prefix_cache_hits"), 0);

    const run_result on = generate(model, input, dir, "on", {});
    EXPECT_EQ(tokens_of(on), tokens_of(off)) << model << ": caching changed the tokens";
    EXPECT_GT(cached_tokens_total(on), 0u) << model;
    EXPECT_GT(on.metrics["engine_core"]["counters"].value("prefix_cache_hits", 0.0), 0) << on.metrics.dump();

    // 10 blocks of 16 slots for requests of up to 122 KV slots: blocks are evicted and requests preempted; chunks
    // of 32 tokens make every long prompt a chunked prefill, hits included.
    const run_result tiny =
        generate(model, input, dir, "tiny", {"--num-kv-blocks", "10", "--max-num-batched-tokens", "32"});
    EXPECT_EQ(tokens_of(tiny), tokens_of(off)) << model << ": caching under a small pool changed the tokens";
    EXPECT_GT(tiny.metrics["engine_core"]["gauges"].value("preemptions", 0.0), 0) << model;
    EXPECT_GT(engine_counter_sum(tiny.metrics, "prefix_cache_evictions"), 0) << model;
    EXPECT_GT(engine_counter_sum(tiny.metrics, "prefix_cache_hits{"), 0) << model;

    // Two data-parallel ranks, cache-aware placement.
    const run_result two = generate(model, input, dir, "w2", {"--workers", "2"});
    EXPECT_EQ(tokens_of(two), tokens_of(off)) << model << ": caching on two ranks changed the tokens";
    EXPECT_GT(engine_counter_sum(two.metrics, "dp_placements{decision=\"cache_hit\"}"), 0) << two.metrics.dump();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixCacheMatchesNoCache,
                         ::testing::Values("qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "deepseek_v3",
                                           "deepseek_v3_flat", "deepseek_v2"),
                         [](const auto& info) { return info.param; });

// EPLB moves experts between ranks while cached blocks are reused: expert placement does not change KV, so the tokens
// stay those of the run without the cache.
TEST(PrefixCache, EplbRebalancesKeepCachedTokens) {
    temp_dir dir;
    const std::string input = dir / "in.jsonl";
    write_shared_prefix_requests("olmoe", input);
    const std::vector<std::string> eplb = {
        "--workers",          "4", "--enable-eplb", "--eplb-interval", "4", "--num-redundant-experts", "4",
        "--eplb-stage-steps", "0"};
    std::vector<std::string> off_flags = eplb;
    off_flags.push_back("--no-enable-prefix-caching");
    const run_result off = generate("olmoe", input, dir, "off", off_flags);
    const run_result on = generate("olmoe", input, dir, "on", eplb);
    EXPECT_EQ(tokens_of(on), tokens_of(off));
    EXPECT_GT(on.metrics["engine_core"]["counters"].value("eplb_rebalances", 0.0), 0) << on.metrics.dump();
    EXPECT_GT(on.metrics["engine_core"]["counters"].value("prefix_cache_hits", 0.0), 0);
}

// A second turn (the first turn's prompt and answer, then new tokens) sent after the first ended: its prefix,
// the answer's computed tokens included, comes from the cache, and the client is told how many tokens that was.
TEST(PrefixCache, SecondTurnReusesTheFirstTurnsPromptAndAnswer) {
    const std::string model = kFixtures + "/models/qwen3_moe";
    const auto ref = read_json(kFixtures + "/models/qwen3_moe/reference.json");
    const std::vector<int32_t> turn1 = ref["prompts"][5]["token_ids"].get<std::vector<int32_t>>();
    auto ask = [](zmoe::zmoe_client& client, const std::vector<int32_t>& prompt, const std::string& salt) {
        zmoe::client_generate g;
        g.prompt = prompt;
        g.max_tokens = 20;
        g.temperature = 0.f;
        g.ignore_eos = true;
        g.cache_salt = salt;
        return client.collect(client.generate(g), 60s);
    };
    std::vector<int32_t> answer_off, second_off;
    {
        serve_process s({"--workers", "1", "--no-enable-prefix-caching"}, model);
        zmoe::zmoe_client client(s.endpoint());
        answer_off = ask(client, turn1, "").token_ids;
        std::vector<int32_t> turn2 = turn1;
        turn2.insert(turn2.end(), answer_off.begin(), answer_off.end());
        turn2.insert(turn2.end(), {5, 6, 7});
        const auto second = ask(client, turn2, "");
        EXPECT_EQ(second.cached_tokens, 0u);
        second_off = second.token_ids;
    }
    serve_process s({"--workers", "1"}, model);
    zmoe::zmoe_client client(s.endpoint());
    const auto first = ask(client, turn1, "");
    EXPECT_EQ(first.token_ids, answer_off);
    EXPECT_EQ(first.cached_tokens, 0u);
    std::vector<int32_t> turn2 = turn1;
    turn2.insert(turn2.end(), first.token_ids.begin(), first.token_ids.end());
    turn2.insert(turn2.end(), {5, 6, 7});
    // Another salt sees nothing of it.
    const auto salted = ask(client, turn2, "other-tenant");
    EXPECT_EQ(salted.cached_tokens, 0u);
    EXPECT_EQ(salted.token_ids, second_off);
    const auto second = ask(client, turn2, "");
    EXPECT_EQ(second.token_ids, second_off);
    // 64 prompt tokens + 19 fed answer tokens = 83 computed: 5 full blocks of 16, the last holding answer tokens.
    EXPECT_EQ(second.cached_tokens, 80u);
    EXPECT_EQ(second.prompt_tokens, turn2.size());
}

}  // namespace
