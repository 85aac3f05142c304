// The JSON Schema compiler and the matcher on the real Qwen3 vocabulary, over the 20 schemas of
// bench/grammar/schemas: random valid instances are accepted; random mutations are accepted exactly when the
// validator says they are valid; random walks that sample only allowed tokens end, when they take the stop token,
// in a document that parses and validates; and the mask equals a brute-force check of every token at sampled
// positions.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "grammar/grammar_compiler.hpp"
#include "grammar_test_util.hpp"

namespace zmoe::grammar {
namespace {

using testing::json;

std::vector<std::string> schema_names() {
    std::vector<std::string> names;
    for (const auto& e :
         std::filesystem::directory_iterator(std::filesystem::path(ZMOE_SOURCE_DIR) / "bench/grammar/schemas"))
        if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

std::string schema_text(const std::string& name) {
    std::ifstream in(std::filesystem::path(ZMOE_SOURCE_DIR) / "bench/grammar/schemas" / (name + ".json"));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

grammar_compiler& qwen3_compiler() {
    static grammar_compiler c(testing::qwen3_info());
    return c;
}

/// Changes one random node of `v`: replaces it by a random value, drops an object member, adds one at the end,
/// or adds / drops an array element.
void mutate(json& v, std::mt19937& rng) {
    std::vector<json*> nodes;
    std::function<void(json&)> collect = [&](json& x) {
        nodes.push_back(&x);
        if (x.is_object())
            for (auto& [k, y] : x.items()) collect(y);
        if (x.is_array())
            for (auto& y : x) collect(y);
    };
    collect(v);
    json& target = *nodes[std::uniform_int_distribution<size_t>(0, nodes.size() - 1)(rng)];
    int op = std::uniform_int_distribution<int>(0, 3)(rng);
    if (op == 1 && target.is_object() && !target.empty()) {
        auto it = target.begin();
        std::advance(it, std::uniform_int_distribution<size_t>(0, target.size() - 1)(rng));
        target.erase(it.key());
    } else if (op == 2 && target.is_object()) {
        target["zz_extra"] = testing::random_value(rng, 2);
    } else if (op == 3 && target.is_array()) {
        if (!target.empty() && std::uniform_int_distribution<int>(0, 1)(rng))
            target.erase(target.size() - 1);
        else
            target.push_back(target.empty() ? testing::random_value(rng, 2) : target[0]);
    } else {
        target = testing::random_value(rng, 1);
    }
}

class JsonSchemaQwen3 : public ::testing::TestWithParam<std::string> {};

TEST_P(JsonSchemaQwen3, AcceptsValidInstancesAndExactlyTheValidMutations) {
    const std::string text = schema_text(GetParam());
    const json schema = json::parse(text);
    auto g = qwen3_compiler().compile(grammar_kind::json_schema, text);
    grammar_matcher m(g);
    const zmoe::tokenizer& tok = testing::qwen3_tokenizer();
    std::mt19937 rng(std::hash<std::string>{}(GetParam()));
    int valid_mutations = 0, invalid_mutations = 0;
    for (int i = 0; i < 40; ++i) {
        json v = testing::generate(schema, schema, rng);
        ASSERT_TRUE(testing::validate(v, schema, schema)) << testing::canonical(v);
        std::string doc = testing::canonical(v);
        EXPECT_TRUE(testing::accepts_all(m, tok.encode(doc))) << doc;
        json w = v;
        mutate(w, rng);
        std::string mdoc = testing::canonical(w);
        bool valid = testing::validate(w, schema, schema);
        (valid ? valid_mutations : invalid_mutations)++;
        EXPECT_EQ(testing::accepts_all(m, tok.encode(mdoc)), valid) << mdoc;
    }
    EXPECT_GT(invalid_mutations, 0);
}

TEST_P(JsonSchemaQwen3, RandomWalksOverTheMaskEndInValidDocuments) {
    const std::string text = schema_text(GetParam());
    const json schema = json::parse(text);
    auto g = qwen3_compiler().compile(grammar_kind::json_schema, text);
    const tokenizer_info& info = g->tokenizer();
    grammar_matcher m(g);
    std::mt19937 rng(7 + std::hash<std::string>{}(GetParam()));
    std::vector<uint32_t> mask(info.bitmask_words());
    int finished = 0, brute_checked = 0;
    for (int walk = 0; walk < 12; ++walk) {
        m.reset();
        std::string doc;
        for (int step = 0; step < 400; ++step) {
            m.fill_next_token_bitmask(mask.data());
            if (step == 0 || std::uniform_int_distribution<int>(0, 60)(rng) == 0) {
                // The mask against trying every token.
                ++brute_checked;
                for (int32_t id = 0; id < info.vocab_size(); ++id) {
                    bool ok = m.accept_token(id);
                    if (ok) m.rollback(1);
                    ASSERT_EQ(ok, testing::bit(mask, id))
                        << "token " << id << " '" << info.token_bytes(id) << "' after '" << doc << "'";
                }
            }
            std::vector<int32_t> allowed, closing;
            for (int32_t id = 0; id < info.vocab_size(); ++id) {
                if (!testing::bit(mask, id)) continue;
                allowed.push_back(id);
                const std::string& b = info.token_bytes(id);
                if (b.find_first_of("\"]}") != std::string::npos ||
                    (b.size() <= 2 && b.find_first_of("0123456789") != std::string::npos))
                    closing.push_back(id);
            }
            ASSERT_FALSE(allowed.empty()) << "empty mask after '" << doc << "'";
            int32_t stop = info.stop_ids()[0];
            int32_t pick;
            if (m.can_terminate() && std::uniform_int_distribution<int>(0, 2)(rng) == 0)
                pick = stop;
            else if (!closing.empty() && std::uniform_int_distribution<int>(0, 9)(rng) < 6)
                pick = closing[std::uniform_int_distribution<size_t>(0, closing.size() - 1)(rng)];
            else
                pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
            if (info.is_stop(pick) && !m.can_terminate()) pick = allowed[0];
            ASSERT_TRUE(m.accept_token(pick));
            if (info.is_stop(pick)) {
                json v;
                ASSERT_NO_THROW(v = json::parse(doc)) << doc;
                EXPECT_TRUE(testing::validate(v, schema, schema)) << doc;
                ++finished;
                break;
            }
            doc += info.token_bytes(pick);
        }
    }
    EXPECT_GT(finished, 0);
    EXPECT_GT(brute_checked, 0);
}

TEST(JsonSchemaAnyWhitespace, WalksEndInValidDocumentsAndMasksMatchBruteForce) {
    json_schema_options opt;
    opt.any_whitespace = true;
    grammar_compiler compiler(testing::qwen3_info(), 8, opt);
    const zmoe::tokenizer& tok = testing::qwen3_tokenizer();
    for (const std::string name : {"01_person", "07_linked_list", "19_ui_component"}) {
        const std::string text = schema_text(name);
        const json schema = json::parse(text);
        auto g = compiler.compile(grammar_kind::json_schema, text);
        const tokenizer_info& info = g->tokenizer();
        grammar_matcher m(g);
        std::mt19937 rng(23);
        // Pretty-printed valid instances are accepted.
        for (int i = 0; i < 10; ++i) {
            json v = testing::generate(schema, schema, rng);
            EXPECT_TRUE(testing::accepts_all(m, tok.encode(v.dump(2)))) << v.dump(2);
            EXPECT_TRUE(testing::accepts_all(m, tok.encode(v.dump()))) << v.dump();
        }
        std::vector<uint32_t> mask(info.bitmask_words());
        int finished = 0;
        for (int walk = 0; walk < 8; ++walk) {
            m.reset();
            std::string doc;
            for (int step = 0; step < 300; ++step) {
                m.fill_next_token_bitmask(mask.data());
                if (std::uniform_int_distribution<int>(0, 80)(rng) == 0) {
                    for (int32_t id = 0; id < info.vocab_size(); ++id) {
                        bool ok = m.accept_token(id);
                        if (ok) m.rollback(1);
                        ASSERT_EQ(ok, testing::bit(mask, id)) << name << ": token " << id << " after '" << doc << "'";
                    }
                }
                std::vector<int32_t> allowed, closing;
                for (int32_t id = 0; id < info.vocab_size(); ++id) {
                    if (!testing::bit(mask, id)) continue;
                    allowed.push_back(id);
                    if (info.token_bytes(id).find_first_of("\"]}") != std::string::npos) closing.push_back(id);
                }
                ASSERT_FALSE(allowed.empty());
                int32_t pick = m.can_terminate() ? info.stop_ids()[0]
                               : !closing.empty() && std::uniform_int_distribution<int>(0, 9)(rng) < 6
                                   ? closing[std::uniform_int_distribution<size_t>(0, closing.size() - 1)(rng)]
                                   : allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
                ASSERT_TRUE(m.accept_token(pick));
                if (info.is_stop(pick)) {
                    json v;
                    ASSERT_NO_THROW(v = json::parse(doc)) << doc;
                    EXPECT_TRUE(testing::validate(v, schema, schema)) << doc;
                    ++finished;
                    break;
                }
                doc += info.token_bytes(pick);
            }
        }
        EXPECT_GT(finished, 0) << name;
    }
}

INSTANTIATE_TEST_SUITE_P(BenchSchemas, JsonSchemaQwen3, ::testing::ValuesIn(schema_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(JsonObject, AcceptsObjectsOnly) {
    auto g = qwen3_compiler().compile(grammar_kind::json_object, "");
    grammar_matcher m(g);
    const zmoe::tokenizer& tok = testing::qwen3_tokenizer();
    std::mt19937 rng(3);
    for (int i = 0; i < 200; ++i) {
        json v = testing::random_value(rng, 0);
        EXPECT_EQ(testing::accepts_all(m, tok.encode(testing::canonical(v))), v.is_object()) << testing::canonical(v);
    }
    EXPECT_TRUE(testing::accepts_all(m, tok.encode("{\"a\": [1, 2.5e-3, {\"b\": null}], \"c\": \"\\u00e9\\ud7ff\"}")));
    EXPECT_FALSE(testing::accepts_all(m, tok.encode("{\"a\": \"\\ud800\"}")));  // a lone surrogate
    EXPECT_FALSE(testing::accepts_all(m, tok.encode("{\"a\": 01}")));
}

}  // namespace
}  // namespace zmoe::grammar

namespace zmoe::grammar {
namespace {

/// Random walks over the Qwen3 mask of a regex, choice or EBNF grammar: every finished walk matches the reference
/// recognizer; the mask equals a brute-force check at the start and at sampled steps.
void walk_real_vocabulary(grammar_kind kind, const std::string& text,
                          const std::function<bool(const std::string&)>& ok) {
    auto g = qwen3_compiler().compile(kind, text);
    const tokenizer_info& info = g->tokenizer();
    grammar_matcher m(g);
    std::mt19937 rng(17);
    std::vector<uint32_t> mask(info.bitmask_words());
    int finished = 0;
    for (int walk = 0; walk < 30; ++walk) {
        m.reset();
        std::string out;
        for (int step = 0; step < 100; ++step) {
            m.fill_next_token_bitmask(mask.data());
            if ((walk < 3 && step == 0) || std::uniform_int_distribution<int>(0, 40)(rng) == 0) {
                for (int32_t id = 0; id < info.vocab_size(); ++id) {
                    bool accepted = m.accept_token(id);
                    if (accepted) m.rollback(1);
                    ASSERT_EQ(accepted, testing::bit(mask, id)) << text << ": token " << id << " after '" << out << "'";
                }
            }
            std::vector<int32_t> allowed;
            for (int32_t id = 0; id < info.vocab_size(); ++id)
                if (testing::bit(mask, id)) allowed.push_back(id);
            ASSERT_FALSE(allowed.empty()) << text << " after '" << out << "'";
            int32_t pick = m.can_terminate() && std::uniform_int_distribution<int>(0, 3)(rng) == 0
                               ? info.stop_ids()[0]
                               : allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
            ASSERT_TRUE(m.accept_token(pick));
            if (info.is_stop(pick)) {
                EXPECT_TRUE(ok(out)) << text << ": '" << out << "'";
                ++finished;
                break;
            }
            out += info.token_bytes(pick);
        }
    }
    EXPECT_GT(finished, 5) << text;
}

TEST(RealVocabulary, RegexWalksMatchStdRegex) {
    for (const std::string re : {"[A-Z][a-z]{2,8}( [A-Z][a-z]+)?", "(\\d{1,3}\\.){3}\\d{1,3}",
                                 "(yes|no|maybe), because [a-z ]{0,30}\\.", "[0-9a-f]{8}-[0-9a-f]{4}"}) {
        walk_real_vocabulary(grammar_kind::regex, re,
                             [&](const std::string& s) { return std::regex_match(s, std::regex(re)); });
    }
}

TEST(RealVocabulary, ChoiceWalksGiveAChoice) {
    const std::vector<std::string> choices{"positive", "negative", "neutral", "mixed feelings", "pos"};
    walk_real_vocabulary(grammar_kind::choice, json(choices).dump(), [&](const std::string& s) {
        return std::find(choices.begin(), choices.end(), s) != choices.end();
    });
}

TEST(RealVocabulary, EbnfWalksAreBalanced) {
    walk_real_vocabulary(grammar_kind::ebnf, "root ::= item+\nitem ::= \"(\" item* \")\" | [ab] | \" \"",
                         [](const std::string& s) {
                             int depth = 0;
                             for (char c : s) {
                                 if (c == '(')
                                     ++depth;
                                 else if (c == ')' && --depth < 0)
                                     return false;
                                 else if (c != ')' && c != 'a' && c != 'b' && c != ' ')
                                     return false;
                             }
                             return depth == 0 && !s.empty();
                         });
}

}  // namespace
}  // namespace zmoe::grammar

namespace zmoe::grammar {
namespace {

TEST(CanonicalJson, IsPythonJsonDumpsSpelling) {
    // The expected text is what Python's json.dumps(v, ensure_ascii=False) writes for the same value: the spelling
    // `const` and `enum` values must take in the output.
    const auto v = nlohmann::ordered_json::parse(R"({"b":[1,2.5,"é\n\u0001"],"a":null,"c":{"x":true,"y":[]},"d":{}})");
    EXPECT_EQ(canonical_json(v),
              "{\"b\": [1, 2.5, \"é\\n\\u0001\"], \"a\": null, \"c\": {\"x\": true, \"y\": []}, "
              "\"d\": {}}");
}

}  // namespace
}  // namespace zmoe::grammar
