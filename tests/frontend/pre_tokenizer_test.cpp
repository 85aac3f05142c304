#include "frontend/pre_tokenizer.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace zmoe {
namespace {

using nlohmann::json;

std::vector<std::string> split(const pre_tokenizer& p, std::string_view text) {
    std::vector<std::string_view> pieces;
    std::deque<std::string> storage;
    p.split(text, pieces, storage);
    return {pieces.begin(), pieces.end()};
}

json split_json(const std::string& behavior, bool invert = false, const std::string& regex = "-") {
    return json{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", behavior}, {"invert", invert}};
}

using strings = std::vector<std::string>;

// The examples of HF's NormalizedString::split documentation ("the-final--countdown" split on '-'); empty
// pieces never reach the model.
TEST(PreTokenizer, SplitBehaviors) {
    const std::string text = "the-final--countdown";
    EXPECT_EQ(split(pre_tokenizer::from_json(split_json("Removed")), text), (strings{"the", "final", "countdown"}));
    EXPECT_EQ(split(pre_tokenizer::from_json(split_json("Isolated")), text),
              (strings{"the", "-", "final", "-", "-", "countdown"}));
    EXPECT_EQ(split(pre_tokenizer::from_json(split_json("MergedWithPrevious")), text),
              (strings{"the-", "final-", "-", "countdown"}));
    EXPECT_EQ(split(pre_tokenizer::from_json(split_json("MergedWithNext")), text),
              (strings{"the", "-final", "-", "-countdown"}));
    EXPECT_EQ(split(pre_tokenizer::from_json(split_json("Contiguous")), text),
              (strings{"the", "-", "final", "--", "countdown"}));
}

TEST(PreTokenizer, InvertKeepsOnlyMatchesWithRemoved) {
    // GPT-4o's style: the regex describes the pieces, everything else (nothing, for a full-coverage pattern) goes.
    const auto p = pre_tokenizer::from_json(split_json("Removed", true, R"(\p{L}+|\p{N}{1,3})"));
    EXPECT_EQ(split(p, "abc 12345!xyz"), (strings{"abc", "123", "45", "xyz"}));
}

TEST(PreTokenizer, StringPattern) {
    const json j{{"type", "Split"}, {"pattern", {{"String", ", "}}}, {"behavior", "Removed"}, {"invert", false}};
    EXPECT_EQ(split(pre_tokenizer::from_json(j), "a, b, , c"), (strings{"a", "b", "c"}));
}

TEST(PreTokenizer, SequenceAppliesEachStageToEachPiece) {
    // DeepSeek-V3's first two stages: digits in groups of three, then CJK runs, each applied to earlier pieces.
    const json j{{"type", "Sequence"},
                 {"pretokenizers",
                  {split_json("Isolated", false, R"(\p{N}{1,3})"),
                   split_json("Isolated", false, "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"),
                   {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    const auto p = pre_tokenizer::from_json(j);
    EXPECT_TRUE(p.byte_level());
    EXPECT_EQ(split(p, "ab1234567中文cd"), (strings{"ab", "123", "456", "7", "中文", "cd"}));
}

TEST(PreTokenizer, ByteLevelRegexAndPrefixSpace) {
    const auto gpt2 = pre_tokenizer::from_json(json{{"type", "ByteLevel"}, {"add_prefix_space", false}});
    EXPECT_EQ(split(gpt2, "Hello world's  2024!!"), (strings{"Hello", " world", "'s", " ", " 2024", "!!"}));
    const auto prefixed = pre_tokenizer::from_json(json{{"type", "ByteLevel"}, {"add_prefix_space", true}});
    EXPECT_EQ(split(prefixed, "Hello world"), (strings{" Hello", " world"}));
    EXPECT_EQ(split(prefixed, " Hello"), (strings{" Hello"}));
}

TEST(PreTokenizer, LookaheadLeavesLastSpaceForNextWord) {
    const auto p = pre_tokenizer::from_json(split_json(
        "Isolated", false,
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"));
    EXPECT_EQ(split(p, "a   b\n\n  c"), (strings{"a", "  ", " b", "\n\n", " ", " c"}));
    EXPECT_EQ(split(p, "I'M 42"), (strings{"I", "'M", " ", "4", "2"}));
}

TEST(PreTokenizer, UnsupportedTypesAreNamed) {
    for (const json& j : {json{{"type", "Whitespace"}},
                          json{{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}}}}}, split_json("Bogus")}) {
        try {
            pre_tokenizer::from_json(j);
            FAIL() << "expected an error for " << j.dump();
        } catch (const error& e) {
            EXPECT_EQ(e.code(), errc::unsupported);
            const std::string what = e.what();
            EXPECT_TRUE(what.find("Whitespace") != std::string::npos || what.find("Digits") != std::string::npos ||
                        what.find("Bogus") != std::string::npos)
                << what;
        }
    }
}

json metaspace_json(const std::string& scheme, bool split_pieces) {
    return json{
        {"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", scheme}, {"split", split_pieces}};
}

std::vector<std::string> split_at(const pre_tokenizer& p, std::string_view text, bool at_input_start) {
    std::vector<std::string_view> pieces;
    std::deque<std::string> storage;
    p.split(text, pieces, storage, at_input_start);
    return {pieces.begin(), pieces.end()};
}

// Checked against HF `tokenizers` 0.23's Metaspace pre-tokenizer.
TEST(PreTokenizer, MetaspaceReplacesPrependsAndSplits) {
    const std::string m = "\xE2\x96\x81";  // "▁"
    const auto always = pre_tokenizer::from_json(metaspace_json("always", true));
    EXPECT_EQ(split(always, "hi  there" + m + "x"), (strings{m + "hi", m, m + "there", m + "x"}));
    // A leading space is the prepended replacement already.
    EXPECT_EQ(split(always, " Hello  world " + m + "x"), (strings{m + "Hello", m, m + "world", m, m + "x"}));
    const auto never = pre_tokenizer::from_json(metaspace_json("never", true));
    EXPECT_EQ(split(never, "hi there"), (strings{"hi", m + "there"}));
    const auto first = pre_tokenizer::from_json(metaspace_json("first", false));
    EXPECT_EQ(split_at(first, "hi there", true), (strings{m + "hi" + m + "there"}));
    EXPECT_EQ(split_at(first, "hi there", false), (strings{"hi" + m + "there"}));  // text after an added token
    EXPECT_EQ(split_at(first, m + m + "a b", true), (strings{m + m + "a" + m + "b"}));
    // In a Sequence, "first" means the piece that starts the text, not the first piece of every earlier piece.
    const auto seq = pre_tokenizer::from_json(json{
        {"type", "Sequence"}, {"pretokenizers", {split_json("Isolated", false, ","), metaspace_json("first", true)}}});
    EXPECT_EQ(split(seq, "a,b c"), (strings{m + "a", ",", "b", m + "c"}));
}

TEST(PreTokenizer, MetaspaceLegacyAddPrefixSpace) {
    const std::string m = "\xE2\x96\x81";
    json legacy{{"type", "Metaspace"}, {"replacement", m}, {"add_prefix_space", true}};
    EXPECT_EQ(split(pre_tokenizer::from_json(legacy), "a b"), (strings{m + "a", m + "b"}));
    legacy["add_prefix_space"] = false;  // HF refuses false unless prepend_scheme is never
    EXPECT_THROW(pre_tokenizer::from_json(legacy), error);
    legacy["prepend_scheme"] = "never";
    EXPECT_EQ(split(pre_tokenizer::from_json(legacy), "a b"), (strings{"a", m + "b"}));
}

TEST(PreTokenizer, BadRegexIsAnError) {
    EXPECT_THROW(pre_tokenizer::from_json(split_json("Isolated", false, "(unclosed")), error);
}

}  // namespace
}  // namespace zmoe
