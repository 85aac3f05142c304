#include "frontend/bpe_model.hpp"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "frontend/byte_level.hpp"
#include "tokenizer_test_util.hpp"

namespace zmoe {
namespace {

using nlohmann::json;

json make_model(const std::vector<std::string>& tokens, json merges) {
    json vocab = json::object();
    for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = static_cast<int>(i);
    return json{{"type", "BPE"}, {"vocab", vocab}, {"merges", std::move(merges)}};
}

std::vector<int32_t> encode(const bpe_model& m, std::string_view piece) {
    std::vector<int32_t> out;
    m.encode(piece, out);
    return out;
}

TEST(BpeModel, LowestRankMergesFirst) {
    const std::vector<std::string> toks{"a", "b", "c", "ab", "bc", "abc"};
    const auto bc_first = bpe_model::from_json(make_model(toks, {"b c", "a b"}), true);
    EXPECT_EQ(encode(bc_first, "abc"), (std::vector<int32_t>{0, 4}));  // a + bc
    const auto ab_first = bpe_model::from_json(make_model(toks, {"a b", "b c", "ab c"}), true);
    EXPECT_EQ(encode(ab_first, "abc"), (std::vector<int32_t>{5}));  // ab, then ab+c
    EXPECT_EQ(encode(ab_first, "cab"), (std::vector<int32_t>{2, 3}));
}

TEST(BpeModel, LeftmostWinsOnEqualRanks) {
    const auto m = bpe_model::from_json(make_model({"a", "aa"}, {"a a"}), true);
    EXPECT_EQ(encode(m, "aaa"), (std::vector<int32_t>{1, 0}));
    EXPECT_EQ(encode(m, "aaaaa"), (std::vector<int32_t>{1, 1, 0}));
}

TEST(BpeModel, BothMergeFormatsAgree) {
    const std::vector<std::string> toks{"a", "b", "c", "ab", "bc", "abc"};
    const auto strings = bpe_model::from_json(make_model(toks, {"b c", "a bc"}), true);
    const auto pairs = bpe_model::from_json(make_model(toks, json::array({{"b", "c"}, {"a", "bc"}})), true);
    for (std::string_view s : {"abc", "cba", "abcabc", "bbcc"}) EXPECT_EQ(encode(strings, s), encode(pairs, s)) << s;
    EXPECT_EQ(encode(pairs, "abc"), (std::vector<int32_t>{5}));
}

TEST(BpeModel, ByteLevelVocabularyIsReadAsBytes) {
    // "Ġ" spells the space byte; "Ġa" is space + 'a'.
    const auto m = bpe_model::from_json(make_model({"a", "\xC4\xA0",
                                                    "\xC4\xA0"
                                                    "a"},
                                                   {"\xC4\xA0 a"}),
                                        true);
    EXPECT_EQ(encode(m, " a"), (std::vector<int32_t>{2}));
    EXPECT_EQ(m.token_to_id("\xC4\xA0"), std::optional<int32_t>(1));
}

TEST(BpeModel, IgnoreMergesTakesWholePieceFromVocabulary) {
    json model = make_model({"a", "b", "c", "abc"}, json::array());
    EXPECT_EQ(encode(bpe_model::from_json(model, true), "abc"), (std::vector<int32_t>{0, 1, 2}));
    model["ignore_merges"] = true;
    EXPECT_EQ(encode(bpe_model::from_json(model, true), "abc"), (std::vector<int32_t>{3}));
}

TEST(BpeModel, LongRunMergesFully) {
    const auto m = bpe_model::from_json(make_model({"a", "aa", "aaaa"}, {"a a", "aa aa"}), true);
    const std::string run(200000, 'a');
    const auto ids = encode(m, run);  // its speed: bench/frontend/tokenizer_bench (no timing asserted here)
    ASSERT_EQ(ids.size(), 50000u);
    for (int32_t id : ids) ASSERT_EQ(id, 2);
}

TEST(BpeModel, MergeOutsideVocabularyIsRejected) {
    try {
        bpe_model::from_json(make_model({"a", "b"}, {"a b"}), true);
        FAIL() << "expected an error";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_checkpoint);
        EXPECT_NE(std::string(e.what()).find("merge 0"), std::string::npos) << e.what();
    }
}

TEST(BpeModel, UnsupportedOptionsAreNamed) {
    json model = make_model({"a"}, json::array());
    model["type"] = "Unigram";
    try {
        bpe_model::from_json(model, true);
        FAIL() << "expected an error";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::unsupported);
        EXPECT_NE(std::string(e.what()).find("Unigram"), std::string::npos);
    }
    model = make_model({"a"}, json::array());
    model["continuing_subword_prefix"] = "##";
    EXPECT_THROW(bpe_model::from_json(model, true), error);
}

TEST(BpeModel, CharacterModeUnknownsAndByteFallback) {
    // Not byte-level: units are characters; unknown ones become <unk> (fused if asked) or byte tokens.
    json model = make_model({"<unk>", "a", "b", "ab", "<0xC3>", "<0xA9>"}, {"a b"});
    model["unk_token"] = "<unk>";
    EXPECT_EQ(encode(bpe_model::from_json(model, false),
                     "ab\xE4\xB8\xAD\xE4\xB8\xAD"
                     "a"),
              (std::vector<int32_t>{3, 0, 0, 1}));
    model["fuse_unk"] = true;
    EXPECT_EQ(encode(bpe_model::from_json(model, false),
                     "ab\xE4\xB8\xAD\xE4\xB8\xAD"
                     "a"),
              (std::vector<int32_t>{3, 0, 1}));
    model["byte_fallback"] = true;
    EXPECT_EQ(encode(bpe_model::from_json(model, false),
                     "\xC3\xA9"
                     "ab"),
              (std::vector<int32_t>{4, 5, 3}));
}

// Cross-check against a naive BPE (rescan all pairs after every merge) on a real vocabulary: random byte
// strings and text fragments must give the same ids.
TEST(BpeModel, MatchesNaiveBpeOnRealVocabulary) {
    const auto text = testing::read_text_file(testing::vocabulary_dir("qwen3") / "tokenizer.json");
    ASSERT_FALSE(text.empty()) << "run scripts/fetch_tokenizers.sh";
    const json j = json::parse(text);
    const auto m = bpe_model::from_json(j["model"], true);
    std::map<std::pair<std::string, std::string>, size_t> ranks;
    const auto& merges = j["model"]["merges"];
    for (size_t r = 0; r < merges.size(); ++r) {
        auto key =
            merges[r].is_array()
                ? std::make_pair(merges[r][0].get<std::string>(), merges[r][1].get<std::string>())
                : std::make_pair(merges[r].get<std::string>().substr(0, merges[r].get<std::string>().find(' ')),
                                 merges[r].get<std::string>().substr(merges[r].get<std::string>().find(' ') + 1));
        ranks.emplace(std::move(key), r);
    }
    auto naive = [&](std::string_view piece) {
        std::vector<std::string> syms;
        for (char c : piece) syms.push_back(byte_level::to_chars(std::string(1, c)));
        for (;;) {
            size_t best = syms.size(), best_rank = SIZE_MAX;
            for (size_t i = 0; i + 1 < syms.size(); ++i) {
                auto it = ranks.find({syms[i], syms[i + 1]});
                if (it != ranks.end() && it->second < best_rank) best_rank = it->second, best = i;
            }
            if (best == syms.size()) break;
            syms[best] += syms[best + 1];
            syms.erase(syms.begin() + static_cast<ptrdiff_t>(best) + 1);
        }
        std::vector<int32_t> ids;
        for (const auto& s : syms) ids.push_back(*m.token_to_id(s));
        return ids;
    };
    uint64_t state = 12345;
    auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull, state >> 33; };
    const std::vector<std::string> words{
        " the",   "ing",           " tokenization", "aaaaaaaaaaaa",    "    ", "\xE4\xB8\xAD\xE6\x96\x87",
        "123456", " unbelievably", "Straße",        "\xF0\x9F\x98\x80"};
    for (int trial = 0; trial < 400; ++trial) {
        std::string piece;
        const int len = 1 + static_cast<int>(next() % 24);
        for (int k = 0; k < len; ++k) {
            if (next() % 3 == 0)
                piece += words[next() % words.size()];
            else
                piece.push_back(static_cast<char>(next() % 256));
        }
        ASSERT_EQ(encode(m, piece), naive(piece)) << "trial " << trial;
    }
}

}  // namespace
}  // namespace zmoe
