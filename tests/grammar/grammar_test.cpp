// Regular expressions, choices and EBNF grammars against independent recognizers (std::regex, hand-written ones);
// masks equal to a brute-force check of every token on a small vocabulary at every step of random walks; rollback;
// the compile cache; and the errors that name what is refused.

#include <gtest/gtest.h>

#include <regex>
#include <thread>

#include "base/error.hpp"
#include "grammar/ebnf.hpp"
#include "grammar/grammar_compiler.hpp"
#include "grammar/json_schema.hpp"
#include "grammar_test_util.hpp"

namespace zmoe::grammar {
namespace {

using testing::json;

std::shared_ptr<const compiled_grammar> small(grammar g) {
    return std::make_shared<const compiled_grammar>(std::move(g), testing::small_info());
}

/// Whether the grammar matches exactly `text`.
bool matches(const std::shared_ptr<const compiled_grammar>& g, const std::string& text) {
    grammar_matcher m(g);
    if (!text.empty() && !m.accept_bytes(text)) return false;
    return m.can_terminate();
}

std::string random_text(std::mt19937& rng, const std::string& alphabet, size_t max_len) {
    size_t n = std::uniform_int_distribution<size_t>(0, max_len)(rng);
    std::string s;
    for (size_t i = 0; i < n; ++i) s += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
    return s;
}

TEST(Regex, MatchesLikeStdRegex) {
    const std::vector<std::pair<std::string, std::string>> cases{
        {"[a-c]+(x|yz)?\\d{2,3}", "abcxyz0123"},
        {"(ab|a)*b?", "ab"},
        {"a{3}|b{1,}|c{0,2}d", "abcd"},
        {"[^ab]\\w*\\.", "abz_.9 "},
        {"(\\s|-)+[0-9]?", " -\t9a"},
        {"^x(y(z)?)+$", "xyz"},
        {"[a-]\\+.?", "a-+b\n"},
        {"(?:ab){2,4}c?", "abc"},
    };
    std::mt19937 rng(11);
    for (const auto& [pattern, alphabet] : cases) {
        auto g = small(compile_regex(pattern));
        std::regex re(pattern);
        int hits = 0;
        for (int i = 0; i < 3000; ++i) {
            std::string s = random_text(rng, alphabet, 8);
            bool expect = std::regex_match(s, re);
            hits += expect;
            ASSERT_EQ(matches(g, s), expect) << pattern << " on '" << s << "'";
        }
        EXPECT_GT(hits, 0) << pattern;
    }
}

TEST(Regex, UnicodeClassesAndDot) {
    auto g = small(compile_regex("[é-ë日]+.x"));
    EXPECT_TRUE(matches(g, "éë日😀x"));
    EXPECT_FALSE(matches(g, "ée\nx"));
    EXPECT_FALSE(matches(g, "ì日ax"));
    auto any = small(compile_regex("[^a]"));
    EXPECT_TRUE(matches(any, "\xf4\x8f\xbf\xbf"));  // U+10FFFF
    EXPECT_FALSE(matches(any, "\xed\xa0\x80"));     // a surrogate is not UTF-8
    EXPECT_FALSE(matches(any, "\xc0\x80"));         // overlong
}

TEST(Regex, RefusesWhatItDoesNotSupportByName) {
    auto message = [](const std::string& p) {
        try {
            compile_regex(p);
        } catch (const zmoe::error& e) {
            EXPECT_EQ(e.code(), errc::invalid_argument);
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(message("a(?=b)").find("lookahead"), std::string::npos);
    EXPECT_NE(message("(?<!a)b").find("lookbehind"), std::string::npos);
    EXPECT_NE(message("(a)\\1").find("backreference"), std::string::npos);
    EXPECT_NE(message("\\bword").find("word boundar"), std::string::npos);
    EXPECT_NE(message("(?i)abc").find("inline flags"), std::string::npos);
    EXPECT_NE(message("a^b").find("'^'"), std::string::npos);
    EXPECT_NE(message("(ab").find("missing ')'"), std::string::npos);
    EXPECT_NE(message("a{3,1}").find("n < m"), std::string::npos);
    EXPECT_NE(message("a{10001}").find("regex: repetition bound above 10000"), std::string::npos);
    EXPECT_NE(message("a*+").find("possessive"), std::string::npos);
    EXPECT_EQ(message("a{x}"), "accepted");  // not a bound: a literal '{'
    EXPECT_TRUE(matches(small(compile_regex("a{x}")), "a{x}"));
    EXPECT_TRUE(matches(small(compile_regex("a{2,}?b")), "aaab"));
    EXPECT_NE(message("((a|b){1000}){1000}").find("too large"), std::string::npos);
    EXPECT_NE(message("(a|b)*a(a|b){18}").find("too large"), std::string::npos);
}

TEST(Choice, AcceptsExactlyTheChoices) {
    auto g = small(compile_choice({"yes", "no", "maybe", "yes please", "日本"}));
    for (const char* s : {"yes", "no", "maybe", "yes please", "日本"}) EXPECT_TRUE(matches(g, s)) << s;
    for (const char* s : {"", "ye", "yes ", "No", "maybe!", "日"}) EXPECT_FALSE(matches(g, s)) << s;
    EXPECT_THROW(compile_choice({}), zmoe::error);
}

/// Balanced brackets with optional letters: a hand-written recognizer of the EBNF below.
bool balanced(const std::string& s) {
    // root ::= item+ ; item ::= "(" item* ")" | [ab]
    if (s.empty()) return false;
    int depth = 0;
    for (char c : s) {
        if (c == '(')
            ++depth;
        else if (c == ')') {
            if (--depth < 0) return false;
        } else if (c != 'a' && c != 'b')
            return false;
    }
    return depth == 0;
}

TEST(Ebnf, MatchesAHandWrittenRecognizer) {
    auto g = small(compile_ebnf(R"G(
        # items: letters or bracketed groups of items
        root ::= item+
        item ::= "(" item* ")"
               | [ab]
    )G"));
    std::mt19937 rng(5);
    int hits = 0;
    for (int i = 0; i < 5000; ++i) {
        std::string s = random_text(rng, "()ab", 10);
        hits += balanced(s);
        ASSERT_EQ(matches(g, s), balanced(s)) << s;
    }
    EXPECT_GT(hits, 100);
}

TEST(Ebnf, EquivalentToRegexOnAKeyValueGrammar) {
    auto e =
        small(compile_ebnf("root ::= pair (\", \" pair){0,2}\npair ::= key \"=\" val\nkey ::= [a-c]{1,2}\n"
                           "val ::= \"\\\"\" [^\"\\n]* \"\\\"\" | [0-9]+ | \"true\""));
    auto r = small(compile_regex(R"([a-c]{1,2}=("[^"\n]*"|[0-9]+|true)(, [a-c]{1,2}=("[^"\n]*"|[0-9]+|true)){0,2})"));
    std::mt19937 rng(9);
    for (int i = 0; i < 5000; ++i) {
        std::string s = random_text(rng, "abc=\"1 ,t", 12);
        if (i % 7 == 0) s = "a=1, bc=\"x y\", c=true";
        ASSERT_EQ(matches(e, s), matches(r, s)) << s;
    }
}

TEST(Ebnf, RefusesBadGrammarsByName) {
    auto message = [](const std::string& text) {
        try {
            compile_ebnf(text);
        } catch (const zmoe::error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(message("root ::= a\na ::= a \"x\" | \"y\"").find("left-recursive"), std::string::npos);
    EXPECT_NE(message("root ::= missing").find("undefined rule 'missing'"), std::string::npos);
    EXPECT_NE(message("start ::= \"x\"").find("no rule named 'root'"), std::string::npos);
    EXPECT_NE(message("root ::= \"x").find("unterminated string"), std::string::npos);
    EXPECT_NE(message("root ::= \"a\" root").find("accepts no string"), std::string::npos);
    EXPECT_NE(message("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
    // Quantifiers are the regex parser's (parse_quantifiers), errors with the EBNF line.
    EXPECT_NE(message("root ::= \"x\"\n  | \"a\"{3,1}").find("line 2: repetition {m,n} with n < m"), std::string::npos);
    EXPECT_NE(message("root ::= \"a\"{10001}").find("bound above 10000"), std::string::npos);
}

TEST(Ebnf, QuantifiersMatchTheRegexOnes) {
    // EBNF has no lazy or possessive forms: "{0,2}+" is a repetition of a repetition there.
    const std::vector<std::pair<std::string, std::string>> cases{{"?", "?"},
                                                                 {"*", "*"},
                                                                 {"+", "+"},
                                                                 {"{2}", "{2}"},
                                                                 {"{2,}", "{2,}"},
                                                                 {"{1,3}", "{1,3}"},
                                                                 {"{0,2}+", "{0,2})+"},
                                                                 {"{2}?", "{2})?"}};
    for (const auto& [q, rq] : cases) {
        auto e = small(compile_ebnf("root ::= (\"a\" | \"bc\")" + q + " \"c\""));
        const bool nested = rq.find(")") != std::string::npos;  // the regex closes a group around the first quantifier
        auto r = small(compile_regex((nested ? "(?:(?:a|bc)" : "(?:a|bc)") + rq + "c"));
        std::mt19937 rng(3);
        for (int i = 0; i < 2000; ++i) {
            const std::string s = random_text(rng, "abc", 8);
            ASSERT_EQ(matches(e, s), matches(r, s)) << q << " " << s;
        }
    }
}

TEST(JsonSchema, RefusesUnsupportedKeywordsByName) {
    auto message = [](const std::string& schema) {
        try {
            compile_json_schema(schema);
        } catch (const zmoe::error& e) {
            EXPECT_EQ(e.code(), errc::invalid_argument);
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(message(R"({"type": "object", "patternProperties": {"a": {}}})").find("'patternProperties'"),
              std::string::npos);
    EXPECT_NE(message(R"({"type": "array", "uniqueItems": true})").find("'uniqueItems'"), std::string::npos);
    EXPECT_NE(message(R"({"not": {"type": "string"}})").find("'not'"), std::string::npos);
    EXPECT_NE(message(R"({"type": "number", "multipleOf": 2})").find("'multipleOf'"), std::string::npos);
    EXPECT_NE(message(R"({"type": "number", "minimum": 0.5})").find("'minimum'"), std::string::npos);
    EXPECT_NE(message(R"({"type": "string", "format": "iri"})").find("'format'"), std::string::npos);
    EXPECT_NE(message(R"J({"type": "string", "pattern": "(?=a)"})J").find("lookahead"), std::string::npos);
    EXPECT_NE(message(R"({"$ref": "#/$defs/missing"})").find("does not resolve"), std::string::npos);
    EXPECT_NE(message(R"({"type": "strange"})").find("unknown type 'strange'"), std::string::npos);
    EXPECT_NE(message(R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]})").find("'b'"),
              std::string::npos);
    EXPECT_NE(message("{not json").find("not valid JSON"), std::string::npos);
    EXPECT_NE(
        message(R"({"properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}})").find("leave no value"),
        std::string::npos);
    // Annotations are fine.
    EXPECT_EQ(
        message(
            R"({"title": "t", "description": "d", "examples": [1], "default": 1, "$schema": "x", "type": "integer"})"),
        "accepted");
}

TEST(JsonSchema, IntegerAndNumberBounds) {
    struct c {
        std::string schema;
        std::vector<std::string> ok, bad;
    };
    const std::vector<c> cases{
        {R"({"type": "integer", "minimum": -15, "maximum": 123})",
         {"-15", "-9", "0", "7", "99", "100", "123"},
         {"-16", "124", "1000", "-0", "01", "1.0"}},
        {R"({"type": "integer", "exclusiveMinimum": 0})", {"1", "10", "987654321"}, {"0", "-1"}},
        {R"({"type": "integer", "maximum": -10})", {"-10", "-11", "-1000"}, {"-9", "0", "5"}},
        {R"({"type": "number", "minimum": 0, "maximum": 1})",
         {"0", "0.5", "1", "1.000", "0.999"},
         {"1.01", "-0.5", "2", "1e0"}},
        {R"({"type": "number", "minimum": -2})", {"-2", "-1.99", "-2.0", "3.5", "100"}, {"-2.01", "-3"}},
        {R"({"type": "number"})", {"-0.5e+10", "3", "1E5", "0.0"}, {".5", "1.", "+1", "01"}},
    };
    for (const auto& k : cases) {
        auto g = small(compile_json_schema(k.schema));
        for (const auto& s : k.ok) EXPECT_TRUE(matches(g, s)) << k.schema << " " << s;
        for (const auto& s : k.bad) EXPECT_FALSE(matches(g, s)) << k.schema << " " << s;
    }
    // Many integer ranges against arithmetic.
    std::mt19937 rng(1);
    for (int i = 0; i < 40; ++i) {
        int lo = std::uniform_int_distribution<int>(-300, 300)(rng),
            hi = lo + std::uniform_int_distribution<int>(0, 400)(rng);
        auto g = small(compile_json_schema(json{{"type", "integer"}, {"minimum", lo}, {"maximum", hi}}.dump()));
        for (int x = lo - 30; x <= hi + 30; x += 1 + (hi - lo) / 50)
            ASSERT_EQ(matches(g, std::to_string(x)), x >= lo && x <= hi) << lo << ".." << hi << " " << x;
    }
}

TEST(JsonSchema, StringsFormatsAndPatterns) {
    auto len = small(compile_json_schema(R"({"type": "string", "minLength": 2, "maxLength": 3})"));
    EXPECT_TRUE(matches(len, "\"ab\""));
    EXPECT_TRUE(matches(len, "\"日本\\n\""));
    EXPECT_FALSE(matches(len, "\"a\""));
    EXPECT_FALSE(matches(len, "\"abcd\""));
    auto date = small(compile_json_schema(R"({"type": "string", "format": "date-time"})"));
    EXPECT_TRUE(matches(date, "\"2024-02-29T12:30:00.123Z\""));
    EXPECT_FALSE(matches(date, "\"2024-13-01T00:00:00Z\""));
    // Calendar dates only (datetime libraries refuse the others): month lengths, leap years, year 0 and second 60.
    EXPECT_FALSE(matches(date, "\"2023-02-29T12:30:00Z\""));
    EXPECT_FALSE(matches(date, "\"1900-02-29T12:30:00Z\""));
    EXPECT_TRUE(matches(date, "\"2000-02-29T12:30:00Z\""));
    EXPECT_FALSE(matches(date, "\"2024-09-31T12:30:00Z\""));
    EXPECT_TRUE(matches(date, "\"2024-10-31T12:30:00Z\""));
    EXPECT_FALSE(matches(date, "\"0000-01-01T12:30:00Z\""));
    EXPECT_FALSE(matches(date, "\"2024-01-01T23:59:60Z\""));
    auto pat = small(compile_json_schema(R"({"type": "string", "pattern": "a\"b"})"));  // unanchored: a search
    EXPECT_TRUE(matches(pat, "\"xxa\\\"byy\""));
    EXPECT_FALSE(matches(pat, "\"ab\""));
    auto anchored = small(compile_json_schema(R"({"type": "string", "pattern": "^[0-9]+$"})"));
    EXPECT_TRUE(matches(anchored, "\"123\""));
    EXPECT_FALSE(matches(anchored, "\"x123\""));
}

TEST(JsonSchema, AdditionalPropertiesAndAnyWhitespace) {
    auto g = small(compile_json_schema(
        R"({"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}})"));
    EXPECT_TRUE(matches(g, "{\"id\": 1, \"x\": true}"));
    EXPECT_TRUE(matches(g, "{\"x\": true, \"y\": false}"));
    EXPECT_FALSE(matches(g, "{\"id\": 1, \"id\": true}"));  // a listed name is not an extra key
    EXPECT_FALSE(matches(g, "{\"id\": 1, \"x\": 1}"));
    json_schema_options ws;
    ws.any_whitespace = true;
    auto w = small(compile_json_schema(
        R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}})", ws));
    EXPECT_TRUE(matches(w, " {\n  \"a\" :[ 1 ,2\t]\n}"));
    EXPECT_FALSE(matches(w, "{\"a\": [1 2]}"));
}

/// For every step of random walks over the small vocabulary: the mask equals trying each token.
void check_masks_brute_force(const std::shared_ptr<const compiled_grammar>& g, int walks, uint32_t seed) {
    const tokenizer_info& info = g->tokenizer();
    grammar_matcher m(g);
    std::mt19937 rng(seed);
    std::vector<uint32_t> mask(info.bitmask_words());
    for (int w = 0; w < walks; ++w) {
        m.reset();
        for (int step = 0; step < 60 && !m.is_terminated(); ++step) {
            m.fill_next_token_bitmask(mask.data());
            std::vector<int32_t> allowed;
            for (int32_t id = 0; id < info.vocab_size(); ++id) {
                bool ok = m.accept_token(id);
                if (ok) m.rollback(1);
                ASSERT_EQ(ok, testing::bit(mask, id)) << "token " << id << " at step " << step;
                if (ok) allowed.push_back(id);
            }
            ASSERT_FALSE(allowed.empty());
            ASSERT_TRUE(m.accept_token(allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)]));
        }
    }
}

TEST(Matcher, MaskEqualsBruteForceOnASmallVocabulary) {
    check_masks_brute_force(small(compile_json_object()), 20, 1);
    check_masks_brute_force(
        small(compile_json_schema(
            R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 4}, "tags": {"type": "array", "items": {"enum": ["a", "b\"", 12]}}, "n": {"type": ["integer", "null"], "minimum": -5, "maximum": 40}}, "required": ["tags"]})")),
        20, 2);
    check_masks_brute_force(
        small(compile_json_schema(
            R"({"$ref": "#/$defs/t", "$defs": {"t": {"type": "object", "properties": {"v": {"type": "number"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/t"}, "maxItems": 2}}, "required": ["v"]}}})")),
        20, 3);
    check_masks_brute_force(small(compile_regex("(ab|\"a)+[0-9]{1,3}(null|nu)?")), 20, 4);
    check_masks_brute_force(small(compile_ebnf("root ::= \"[\" (item (\", \" item)*)? \"]\"\nitem ::= [0-9]+ | root")),
                            20, 5);
}

TEST(Matcher, RollbackRestoresMasks) {
    auto g = std::make_shared<const compiled_grammar>(compile_json_object(), testing::small_info());
    const tokenizer_info& info = g->tokenizer();
    grammar_matcher m(g);
    std::mt19937 rng(3);
    std::vector<std::vector<uint32_t>> masks;
    std::vector<int32_t> taken;
    std::vector<uint32_t> mask(info.bitmask_words());
    for (int step = 0; step < 30; ++step) {
        m.fill_next_token_bitmask(mask.data());
        masks.push_back(mask);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < info.vocab_size(); ++id)
            if (testing::bit(mask, id) && !info.is_stop(id)) allowed.push_back(id);
        int32_t id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        ASSERT_TRUE(m.accept_token(id));
        taken.push_back(id);
    }
    for (int k : {5, 1, 10}) {
        m.rollback(k);
        taken.resize(taken.size() - static_cast<size_t>(k));
        m.fill_next_token_bitmask(mask.data());
        EXPECT_EQ(mask, masks[taken.size()]);
        EXPECT_EQ(m.num_accepted(), static_cast<int32_t>(taken.size()));
    }
    EXPECT_THROW(m.rollback(100), zmoe::error);
    EXPECT_FALSE(m.accept_token(-1));
    EXPECT_FALSE(m.accept_token(info.stop_ids()[0]));  // the object is not finished
}

TEST(Matcher, StopOnlyWhereTheGrammarEnds) {
    auto g = small(compile_regex("ab|abc"));
    grammar_matcher m(g);
    int32_t stop = g->tokenizer().stop_ids()[0];
    EXPECT_FALSE(m.can_terminate());
    ASSERT_TRUE(m.accept_bytes("ab"));
    EXPECT_TRUE(m.can_terminate());
    ASSERT_TRUE(m.accept_bytes("c"));
    EXPECT_FALSE(m.accept_bytes("c"));
    ASSERT_TRUE(m.accept_token(stop));
    EXPECT_TRUE(m.is_terminated());
    EXPECT_FALSE(m.accept_bytes("c"));
    std::vector<uint32_t> mask(g->tokenizer().bitmask_words());
    m.fill_next_token_bitmask(mask.data());
    for (int32_t id = 0; id < g->tokenizer().vocab_size(); ++id) EXPECT_EQ(testing::bit(mask, id), id == stop);
}

TEST(GrammarCompiler, CachesByCanonicalKeyAndCompilesOnceUnderConcurrency) {
    grammar_compiler c(testing::small_info(), 4);
    auto a = c.compile(grammar_kind::json_schema, R"({"type": "object", "properties": {"b": {}, "a": {}}})");
    auto b = c.compile(grammar_kind::json_schema, "{\"type\":\"object\",\n \"properties\":{\"b\":{},\"a\":{}}}");
    auto d = c.compile(grammar_kind::json_schema,
                       R"({"type": "object", "properties": {"a": {}, "b": {}}})");  // order differs
    EXPECT_EQ(a, b);
    EXPECT_NE(a, d);
    EXPECT_EQ(c.compile(grammar_kind::choice, "[\"x\", \"y\"]"), c.compile(grammar_kind::choice, "[\"x\",\"y\"]"));
    EXPECT_THROW(c.compile(grammar_kind::regex, "(?=x)"), zmoe::error);
    EXPECT_THROW(c.compile(grammar_kind::regex, "(?=x)"), zmoe::error);  // failures are not cached
    std::vector<std::shared_ptr<const compiled_grammar>> got(8);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < got.size(); ++i)
        threads.emplace_back([&, i] { got[i] = c.compile(grammar_kind::regex, "[a-z]+@[a-z]+"); });
    for (auto& t : threads) t.join();
    for (const auto& g : got) EXPECT_EQ(g, got[0]);
    EXPECT_LE(c.num_cached(), 4u);
    for (int i = 0; i < 10; ++i) c.compile(grammar_kind::regex, "x{" + std::to_string(i + 1) + "}");
    EXPECT_EQ(c.num_cached(), 4u);
}

}  // namespace
}  // namespace zmoe::grammar
