#include "frontend/tokenizer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/error.hpp"
#include "frontend/byte_level.hpp"
#include "frontend/utf8.hpp"
#include "tokenizer_test_util.hpp"

namespace zmoe {
namespace {

using nlohmann::json;
using ids = std::vector<int32_t>;

// A small byte-level tokenizer: id b is byte b, 256 is "ab", and added tokens from 300 up.
json synthetic_json() {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_level::to_chars(std::string(1, static_cast<char>(b)))] = b;
    vocab["ab"] = 256;
    auto added = [](int id, const std::string& content, bool special, bool normalized, bool lstrip = false,
                    bool rstrip = false, bool single_word = false) {
        return json{{"id", id},         {"content", content}, {"special", special},        {"normalized", normalized},
                    {"lstrip", lstrip}, {"rstrip", rstrip},   {"single_word", single_word}};
    };
    return json{{"version", "1.0"},
                {"added_tokens",
                 {added(300, "<s>", true, false), added(301, "[X]", false, false, true),
                  added(302, "[Y]", false, false, false, true), added(303, "[W]", false, false, false, false, true),
                  added(304, "\xC3\xB1\xC3\xB3", false, true), added(305, "\xC3\x85\xC3\x85", false, false),
                  added(306, "<s>x", false, false), added(307, "\xC3\xA9", false, true)}},
                {"normalizer", {{"type", "NFC"}}},
                {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                {"post_processor", nullptr},
                {"decoder", {{"type", "ByteLevel"}}},
                {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}}}};
}

tokenizer synthetic(const json& j = synthetic_json(), const std::string& config = "") {
    return tokenizer::from_json(j.dump(), config);
}

TEST(Tokenizer, MergesAndBytes) {
    const auto tok = synthetic();
    EXPECT_EQ(tok.encode("ab"), (ids{256}));
    EXPECT_EQ(tok.encode("ba"), (ids{'b', 'a'}));
    EXPECT_EQ(tok.encode("x ab"), (ids{'x', ' ', 256}));
    EXPECT_EQ(tok.vocab_size(), 307);
}

TEST(Tokenizer, EmptyTextGivesNoIds) {
    EXPECT_TRUE(synthetic().encode("").empty());
    EXPECT_TRUE(testing::real_tokenizer("qwen3").encode("").empty());
}

TEST(Tokenizer, AddedTokensLeftmostLongest) {
    const auto tok = synthetic();
    EXPECT_EQ(tok.encode("x<s>y"), (ids{'x', 300, 'y'}));
    EXPECT_EQ(tok.encode("<s>xy"), (ids{306, 'y'}));  // "<s>x" is longer than "<s>"
    EXPECT_EQ(tok.encode("<<s>"), (ids{'<', 300}));
    EXPECT_EQ(tok.encode("<s<s>"), (ids{'<', 's', 300}));
}

TEST(Tokenizer, AddedTokenStripAndWordFlags) {
    const auto tok = synthetic();
    EXPECT_EQ(tok.encode("a  [X]b"), (ids{'a', 301, 'b'}));  // lstrip swallows the spaces before
    EXPECT_EQ(tok.encode("a[Y]  b"), (ids{'a', 302, 'b'}));  // rstrip swallows the spaces after
    EXPECT_EQ(tok.encode("a [W] b"), (ids{'a', ' ', 303, ' ', 'b'}));
    const auto inside_word = tok.encode("a[W]b");  // single_word: not a match inside a word
    EXPECT_EQ(std::count(inside_word.begin(), inside_word.end(), 303), 0);
    EXPECT_EQ(tok.decode(inside_word), "a[W]b");
}

TEST(Tokenizer, NormalizedAndRawAddedTokens) {
    const auto tok = synthetic();
    // normalized=true ("ñó"): matched after NFC, so the decomposed form matches too.
    EXPECT_EQ(tok.encode("a\xC3\xB1\xC3\xB3"), (ids{'a', 304}));
    EXPECT_EQ(tok.encode("an\xCC\x83o\xCC\x81"), (ids{'a', 304}));
    // normalized=false ("ÅÅ"): only the raw text matches; the NFD form is normalized and then encoded as bytes.
    EXPECT_EQ(tok.encode("\xC3\x85\xC3\x85"), (ids{305}));
    EXPECT_EQ(tok.encode("A\xCC\x8A"
                         "A\xCC\x8A"),
              (ids{0xC3, 0x85, 0xC3, 0x85}));
    // An added token the model vocabulary already has ("é" spells byte 0xE9) keeps the model's id, as in HF.
    EXPECT_EQ(tok.token_to_id("\xC3\xA9"), std::optional<int32_t>(0xE9));
    EXPECT_EQ(tok.encode("\xC3\xA9"), (ids{0xE9}));
}

TEST(Tokenizer, InvalidUtf8NamesTheOffset) {
    try {
        synthetic().encode(
            "abc\xFF"
            "def");
        FAIL() << "expected an error";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("offset 3"), std::string::npos) << e.what();
    }
}

TEST(Tokenizer, DecodeAndSkipSpecial) {
    const auto tok = synthetic();
    const ids in{'a', 300, 256, 301};
    EXPECT_EQ(tok.decode(in), "a<s>ab[X]");
    EXPECT_EQ(tok.decode(in, true), "aab[X]");  // [X] is added but not special
    EXPECT_TRUE(tok.is_special(300));
    EXPECT_FALSE(tok.is_special(301));
    EXPECT_EQ(tok.decode(ids{0xE4, 0xB8}), "\xEF\xBF\xBD");
    EXPECT_EQ(tok.decode(ids{0xE4, 'A', 0xB8}),
              "\xEF\xBF\xBD"
              "A\xEF\xBF\xBD");
    EXPECT_EQ(tok.id_to_token(' '), std::optional<std::string_view>("\xC4\xA0"));
    EXPECT_EQ(tok.token_to_id("<s>"), std::optional<int32_t>(300));
}

TEST(Tokenizer, DecodeRejectsIdsWithoutToken) {
    const auto tok = synthetic();
    for (int32_t bad : {-1, 257, 299, 307, 1 << 30}) {
        try {
            tok.decode(ids{'a', bad});
            FAIL() << "expected an error for id " << bad;
        } catch (const error& e) {
            EXPECT_EQ(e.code(), errc::invalid_argument);
            EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
        }
    }
}

TEST(Tokenizer, UnsupportedComponentsAreNamed) {
    auto expect_unsupported = [](json j, const std::string& name) {
        try {
            synthetic(j);
            FAIL() << "expected an error naming " << name;
        } catch (const error& e) {
            EXPECT_EQ(e.code(), errc::unsupported);
            EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
        }
    };
    json j = synthetic_json();
    j["normalizer"] = {{"type", "Lowercase"}};
    expect_unsupported(j, "Lowercase");
    j = synthetic_json();
    j["pre_tokenizer"] = {{"type", "Whitespace"}};
    expect_unsupported(j, "Whitespace");
    j = synthetic_json();
    j["decoder"] = {{"type", "CTC"}};
    expect_unsupported(j, "CTC");
    j = synthetic_json();
    j["model"]["type"] = "WordPiece";
    expect_unsupported(j, "WordPiece");
}

TEST(Tokenizer, MalformedFilesAreErrorsNotCrashes) {
    EXPECT_THROW(tokenizer::from_json("{not json"), error);
    EXPECT_THROW(tokenizer::from_json("[]"), error);
    EXPECT_THROW(tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": [], "merges": []}})"), error);
    EXPECT_THROW(tokenizer::from_file("/nonexistent/tokenizer.json"), error);
    json j = synthetic_json();
    j["added_tokens"][0].erase("content");
    EXPECT_THROW(synthetic(j), error);
}

TEST(Tokenizer, BosEosFromConfig) {
    const std::string config =
        R"({"add_bos_token": true, "add_eos_token": true, "bos_token": {"content": "<s>"}, "eos_token": "[X]"})";
    const auto tok = synthetic(synthetic_json(), config);
    EXPECT_EQ(tok.bos_id(), std::optional<int32_t>(300));
    EXPECT_EQ(tok.eos_id(), std::optional<int32_t>(301));
    EXPECT_EQ(tok.encode("ab", true), (ids{300, 256, 301}));
    EXPECT_EQ(tok.encode("ab", false), (ids{256}));
    const auto plain = synthetic();
    EXPECT_FALSE(plain.bos_id().has_value());
    EXPECT_FALSE(plain.add_bos());
    EXPECT_EQ(plain.encode("ab", true), (ids{256}));
}

TEST(Tokenizer, BosFromTemplateProcessing) {
    json j = synthetic_json();
    j["post_processor"] = {
        {"type", "Sequence"},
        {"processors",
         {{{"type", "ByteLevel"}},
          {{"type", "TemplateProcessing"},
           {"single",
            {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}}}};
    const auto tok = synthetic(j);
    EXPECT_TRUE(tok.add_bos());
    EXPECT_FALSE(tok.add_eos());
    EXPECT_EQ(tok.encode("ab", true), (ids{300, 256}));
}

// --- The real vocabularies -------------------------------------------------------------------------------------

class RealTokenizer : public ::testing::TestWithParam<std::string> {
  protected:
    const tokenizer& tok() { return testing::real_tokenizer(GetParam()); }
    int32_t id(std::string_view spelling) {
        auto v = tok().token_to_id(spelling);
        EXPECT_TRUE(v.has_value()) << "no token " << spelling;
        return v.value_or(-1);
    }
};

TEST_P(RealTokenizer, HelloWorld) {
    EXPECT_EQ(tok().encode("Hello world"), (ids{id("Hello"), id("\xC4\xA0world")}));
    EXPECT_EQ(tok().encode(" Hello"), (ids{id("\xC4\xA0Hello")}));
}

TEST_P(RealTokenizer, RoundTripsText) {
    // NFC text only: Qwen3 normalizes, so decomposed input would legitimately come back composed.
    for (const std::string s :
         {"The quick brown fox jumps over the lazy dog.", "  leading and trailing  ", "tabs\tand\nnewlines\r\n",
          "Привет, мир! Γειά σου Κόσμε. مرحبا بالعالم", "你好，世界！こんにちは。안녕하세요",
          "emoji 👍🏽 👨‍👩‍👧‍👦 🇫🇷", "code: for (int i = 0; i < n; ++i) { x += a[i]; }",
          "numbers 3.14159 1234567890 +1 (555) 123-4567", "I'm you're he's we've they'll I'd DON'T",
          "<|im_start|>user\nhi<|im_end|>", "<｜begin▁of▁sentence｜>x<|begin_of_text|>y<|endoftext|>"}) {
        const auto v = tok().encode(s);
        EXPECT_EQ(tok().decode(v), s);
        for (int32_t i : v) EXPECT_TRUE(tok().is_valid_id(i));
    }
}

TEST_P(RealTokenizer, DigitGrouping) {
    const auto v = tok().encode("1234567");
    std::vector<std::string> pieces;
    for (int32_t i : v) pieces.emplace_back(*tok().id_to_token(i));
    if (GetParam() == "qwen3") {
        EXPECT_EQ(pieces, (std::vector<std::string>{"1", "2", "3", "4", "5", "6", "7"}));
    } else {
        EXPECT_EQ(pieces, (std::vector<std::string>{"123", "456", "7"}));
    }
}

TEST_P(RealTokenizer, OwnSpecialTokensAreSingleIds) {
    const std::map<std::string, std::vector<std::string>> specials{
        {"qwen3", {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>"}},
        {"deepseek_v3", {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"}},
        {"llama3", {"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|reserved_special_token_5|>"}},
        {"gpt4o", {"<|endoftext|>", "<|endofprompt|>"}}};
    for (const auto& s : specials.at(GetParam())) {
        EXPECT_EQ(tok().encode(s), (ids{id(s)})) << s;
        EXPECT_EQ(tok().encode("a" + s + "b"), (ids{id("a"), id(s), id("b")})) << s;
        EXPECT_EQ(tok().decode(ids{id(s)}), s);
    }
}

TEST_P(RealTokenizer, BosEosSettings) {
    const auto& t = tok();
    if (GetParam() == "qwen3") {
        EXPECT_FALSE(t.bos_id().has_value());
        EXPECT_EQ(t.eos_id(), t.token_to_id("<|im_end|>"));
        EXPECT_FALSE(t.add_bos());
    } else if (GetParam() == "deepseek_v3") {
        EXPECT_EQ(t.bos_id(), std::optional<int32_t>(0));
        EXPECT_EQ(t.eos_id(), std::optional<int32_t>(1));
        EXPECT_TRUE(t.add_bos());
        EXPECT_EQ(t.encode("hi", true).front(), 0);
    } else if (GetParam() == "llama3") {
        EXPECT_EQ(t.bos_id(), std::optional<int32_t>(128000));
        EXPECT_EQ(t.eos_id(), std::optional<int32_t>(128001));
    } else {
        EXPECT_EQ(t.eos_id(), t.token_to_id("<|endoftext|>"));
    }
    EXPECT_EQ(t.encode("hi", false), t.encode("hi"));  // never anything added by default
}

// Megabyte-sized inputs and long runs of one character (the shapes that make naive BPE quadratic) encode and
// round-trip exactly; their speed is measured by bench/frontend/tokenizer_bench, not asserted here.
TEST_P(RealTokenizer, HugeInputsRoundTrip) {
    std::string mixed;
    const std::string parts[] = {"The quick brown fox jumps over the lazy dog. ",
                                 "数据 1234567 ",
                                 "    \n\t",
                                 "Привет мир! ",
                                 "x = f(y) + 3.14; ",
                                 "😀👍🏽 "};
    for (size_t i = 0; mixed.size() < (1u << 20); ++i) mixed += parts[(i * 7) % 6];
    const std::vector<std::string> inputs{mixed, std::string(100000, ' '), std::string(300000, 'a'),
                                          std::string(100000, '\n'), std::string(200000, '7')};
    for (const auto& s : inputs) {
        const auto v = tok().encode(s);
        EXPECT_FALSE(v.empty());
        EXPECT_LE(v.size(), s.size()) << s.size() << " bytes starting with '" << s.substr(0, 8) << "'";
        EXPECT_EQ(tok().decode(v), s);
    }
}

TEST_P(RealTokenizer, ConcurrentEncodesMatchSerial) {
    std::vector<std::string> texts;
    for (int i = 0; i < 200; ++i)
        texts.push_back("request " + std::to_string(i * 7919) + ": The " + std::string(i % 13, ' ') +
                        "answer is \xE4\xB8\xAD" + std::to_string(i) + " tokens" + std::string(i % 5, '!'));
    std::vector<ids> serial;
    for (const auto& t : texts) serial.push_back(tok().encode(t));
    std::vector<std::thread> threads;
    std::atomic<int> mismatches{0};
    for (int th = 0; th < 4; ++th)
        threads.emplace_back([&, th] {
            for (int rep = 0; rep < 5; ++rep)
                for (size_t i = th; i < texts.size(); i += 1 + th % 2)
                    if (tok().encode(texts[i]) != serial[i]) ++mismatches;
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(mismatches.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, RealTokenizer, ::testing::ValuesIn(testing::vocabulary_names()),
                         testing::vocabulary_param_name());

TEST(Tokenizer, LoadsFromFileOrDirectory) {
    const auto dir = testing::vocabulary_dir("qwen3");
    const auto a = tokenizer::from_file(dir);
    const auto b = tokenizer::from_file(dir / "tokenizer.json");
    EXPECT_EQ(a.vocab_size(), b.vocab_size());
    EXPECT_EQ(a.vocab_size(), 151669);
    EXPECT_EQ(a.eos_id(), b.eos_id());
}

}  // namespace
}  // namespace zmoe
