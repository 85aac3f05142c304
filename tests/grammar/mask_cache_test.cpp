// The token mask cache (positions sharing walks by class, bounded repetitions reusing a longer position's walk)
// against brute force on the real Qwen3 vocabulary: along random walks that sample uniformly among the allowed tokens
// (so they go deep into strings and bounded repetitions), the mask equals pushing every token's bytes through the
// matcher, for the 20 schemas of bench/grammar/schemas and for regex, EBNF and choice grammars. Also: positions
// that differ only past a quote or far into a bounded string agree where they should.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "grammar/ebnf.hpp"
#include "grammar/grammar_compiler.hpp"
#include "grammar_test_util.hpp"

namespace zmoe::grammar {
namespace {

std::string schema_text(const std::string& name) {
    std::ifstream in(std::filesystem::path(ZMOE_SOURCE_DIR) / "bench/grammar/schemas" / (name + ".json"));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<std::string> schema_names() {
    std::vector<std::string> names;
    for (const auto& e :
         std::filesystem::directory_iterator(std::filesystem::path(ZMOE_SOURCE_DIR) / "bench/grammar/schemas"))
        if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

/// Random walks of up to `steps` tokens; at `checks` steps chosen at random (and at the first), the mask against
/// accepting each token of the vocabulary on the matcher and rolling it back.
void check_against_brute_force(const std::shared_ptr<const compiled_grammar>& g, uint32_t seed, int walks, int steps,
                               int checks) {
    const tokenizer_info& info = g->tokenizer();
    grammar_matcher m(g);
    std::mt19937 rng(seed);
    std::vector<uint32_t> mask(info.bitmask_words());
    const double p_check = static_cast<double>(checks) / (walks * steps);
    int checked = 0;
    for (int w = 0; w < walks; ++w) {
        m.reset();
        std::string text;
        for (int step = 0; step < steps && !m.is_terminated(); ++step) {
            m.fill_next_token_bitmask(mask.data());
            if ((w == 0 && step == 0) || std::uniform_real_distribution<double>(0, 1)(rng) < p_check) {
                ++checked;
                for (int32_t id = 0; id < info.vocab_size(); ++id) {
                    const bool ok = m.accept_token(id);
                    if (ok) m.rollback(1);
                    ASSERT_EQ(ok, testing::bit(mask, id))
                        << "token " << id << " '" << info.token_bytes(id) << "' after '" << text << "'";
                }
            }
            std::vector<int32_t> allowed;
            for (int32_t id = 0; id < info.vocab_size(); ++id)
                if (testing::bit(mask, id) && !info.is_stop(id)) allowed.push_back(id);
            if (allowed.empty() || (m.can_terminate() && std::uniform_int_distribution<int>(0, 3)(rng) == 0)) {
                ASSERT_TRUE(m.can_terminate()) << "empty mask after '" << text << "'";
                ASSERT_TRUE(m.accept_token(info.stop_ids()[0]));
                break;
            }
            const int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
            ASSERT_TRUE(m.accept_token(pick));
            text += info.token_bytes(pick);
        }
    }
    EXPECT_GT(checked, 0);
}

grammar_compiler& compiler() {
    static grammar_compiler c(testing::qwen3_info());
    return c;
}

class MaskCacheQwen3 : public ::testing::TestWithParam<std::string> {};

TEST_P(MaskCacheQwen3, EqualsBruteForceAlongUniformRandomWalks) {
    auto g = compiler().compile(grammar_kind::json_schema, schema_text(GetParam()));
    check_against_brute_force(g, 11 + static_cast<uint32_t>(std::hash<std::string>{}(GetParam()) % 1000), 4, 120, 24);
}

INSTANTIATE_TEST_SUITE_P(BenchSchemas, MaskCacheQwen3, ::testing::ValuesIn(schema_names()),
                         [](const auto& info) { return info.param; });

TEST(MaskCacheQwen3Grammars, RegexEbnfAndChoiceEqualBruteForce) {
    const std::vector<std::pair<grammar_kind, std::string>> cases{
        {grammar_kind::regex, R"([a-z0-9._]{1,30}@(gmail|example)\.(com|org))"},
        {grammar_kind::regex, R"((\w+ ?){1,12}[.!?])"},
        {grammar_kind::regex, R"("([^"\\]|\\["\\n]){0,40}")"},
        {grammar_kind::regex, R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?Z)"},
        {grammar_kind::ebnf,
         "root ::= \"{\" ws pair (\",\" ws pair)* \"}\"\npair ::= [a-z_]+ \":\" ws value\n"
         "value ::= \"true\" | \"false\" | [0-9]+ | \"\\\"\" ([^\"\\\\] | \"\\\\\" .)* \"\\\"\"\nws ::= [ \\t\\n]*"},
        {grammar_kind::ebnf,
         "root ::= \"[\" (item (\", \" item)*)? \"]\"\nitem ::= [0-9]+ | root | \"\\\"\" [a-z ]{0,20} \"\\\"\""},
        {grammar_kind::choice, R"(["yes", "no", "maybe later", "\"quoted\"", "a\\b"])"},
        {grammar_kind::json_object, ""},
    };
    uint32_t seed = 100;
    for (const auto& [kind, text] : cases) {
        SCOPED_TRACE(std::string(grammar_kind_name(kind)) + ": " + text);
        check_against_brute_force(compiler().compile(kind, text), seed++, 3, 80, 16);
    }
}

TEST(MaskCache, PositionsThatDifferOnlyPastAQuoteOrALengthBoundAgree) {
    // A bounded string: one position per character, far fewer distinct entries and walks.
    auto g = compiler().compile(
        grammar_kind::json_schema,
        R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 160}, "b": {"type": "string"}, "c": {"type": "string"}}, "required": ["a", "b", "c"]})");
    EXPECT_GT(g->num_scan_positions(), 160 * 4);
    EXPECT_LT(g->num_distinct_masks(), g->num_scan_positions());
    EXPECT_LT(g->num_common_walks(), g->num_scan_positions() / 2);
    // The insides of "b" and "c" differ only past their closing quotes: their masks differ only on tokens with a
    // quote or a backslash (and the walk of the others is shared).
    const tokenizer_info& info = g->tokenizer();
    grammar_matcher mb(g), mc(g);
    ASSERT_TRUE(mb.accept_bytes("{\"a\": \"\", \"b\": \"x"));
    ASSERT_TRUE(mc.accept_bytes("{\"a\": \"\", \"b\": \"\", \"c\": \"x"));
    std::vector<uint32_t> kb(info.bitmask_words()), kc(kb.size());
    mb.fill_next_token_bitmask(kb.data());
    mc.fill_next_token_bitmask(kc.data());
    int differ_bc = 0;
    for (int32_t id = 0; id < info.vocab_size(); ++id) {
        if (testing::bit(kb, id) == testing::bit(kc, id)) continue;
        ++differ_bc;
        EXPECT_NE(info.token_bytes(id).find_first_of("\"\\"), std::string::npos) << "token " << id;
    }
    EXPECT_GT(differ_bc, 0);  // '", "' fits inside "b" only, '"}' inside "c" only
    // Deep in "a" (100 characters in) and at its start, the masks agree on every short token.
    grammar_matcher m0(g), m100(g);
    ASSERT_TRUE(m0.accept_bytes("{\"a\": \""));
    ASSERT_TRUE(m100.accept_bytes("{\"a\": \"" + std::string(100, 'x')));
    std::vector<uint32_t> k0(info.bitmask_words()), k100(k0.size());
    m0.fill_next_token_bitmask(k0.data());
    m100.fill_next_token_bitmask(k100.data());
    int differ = 0;
    for (int32_t id = 0; id < info.vocab_size(); ++id) {
        if (testing::bit(k0, id) == testing::bit(k100, id)) continue;
        ++differ;
        EXPECT_GT(info.token_bytes(id).size(), 60u) << "token " << id << " '" << info.token_bytes(id) << "'";
    }
    EXPECT_GT(differ, 0);  // tokens of more than 60 characters fit at the start only
}

}  // namespace
}  // namespace zmoe::grammar
