#include "frontend/normalizer.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace zmoe {
namespace {

using nlohmann::json;

std::string normalize(const normalizer& n, std::string_view text) {
    std::string storage;
    return std::string(n.normalize(text, storage));
}

const std::string kMeta = "\xE2\x96\x81";  // "▁"

// Llama 2 / Mistral / Mixtral's normalizer.
json sentencepiece_json() {
    return json{{"type", "Sequence"},
                {"normalizers",
                 {{{"type", "Prepend"}, {"prepend", kMeta}},
                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}}}};
}

TEST(Normalizer, PrependThenReplace) {
    const auto n = normalizer::from_json(sentencepiece_json());
    EXPECT_EQ(normalize(n, "Hello world"), kMeta + "Hello" + kMeta + "world");
    EXPECT_EQ(normalize(n, " Hello"), kMeta + kMeta + "Hello");  // the prepended one and the space
    EXPECT_EQ(normalize(n, "\n"), kMeta + "\n");
    EXPECT_EQ(normalize(n, ""), "");  // Prepend leaves empty text alone
}

TEST(Normalizer, ReplaceWithRegexAndStringPatterns) {
    const auto regex =
        normalizer::from_json(json{{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "_"}});
    EXPECT_EQ(normalize(regex, "a  b c   "), "a_b_c_");
    const auto literal =
        normalizer::from_json(json{{"type", "Replace"}, {"pattern", {{"String", "aa"}}}, {"content", "b"}});
    EXPECT_EQ(normalize(literal, "aaaaa"), "bba");  // non-overlapping, left to right
    EXPECT_EQ(normalize(literal, "xyz"), "xyz");
    // Nothing matched: the text itself comes back, not a copy.
    std::string storage;
    const std::string_view text = "xyz";
    EXPECT_EQ(literal.normalize(text, storage).data(), text.data());
}

TEST(Normalizer, PrependAfterAnotherStepSeesItsResult) {
    const auto n =
        normalizer::from_json(json{{"type", "Sequence"},
                                   {"normalizers",
                                    {{{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "bb"}},
                                     {{"type", "Prepend"}, {"prepend", "<"}},
                                     {{"type", "Replace"}, {"pattern", {{"String", "<b"}}}, {"content", "["}}}}});
    EXPECT_EQ(normalize(n, "ab"), "[bb");
}

TEST(Normalizer, MalformedAndUnsupportedAreErrors) {
    auto expect_error = [](const json& j, errc code) {
        try {
            normalizer::from_json(j);
            FAIL() << "expected an error for " << j.dump();
        } catch (const error& e) {
            EXPECT_EQ(e.code(), code) << e.what();
        }
    };
    expect_error(json{{"type", "Prepend"}}, errc::invalid_checkpoint);
    expect_error(json{{"type", "Replace"}, {"content", "x"}}, errc::invalid_checkpoint);
    expect_error(json{{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", "x"}}, errc::unsupported);
    expect_error(json{{"type", "Replace"}, {"pattern", {{"Regex", "(unclosed"}}}, {"content", "x"}},
                 errc::invalid_checkpoint);
    expect_error(json{{"type", "Lowercase"}}, errc::unsupported);
}

}  // namespace
}  // namespace zmoe
