// Exact agreement with Hugging Face `tokenizers` on the reference fixtures written by
// scripts/make_tokenizer_fixtures.py: ids of every corpus string, decode with and without special tokens, and
// streaming detokenization token by token, for every vocabulary (llama2 only once its fixture is in the tree).

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "frontend/incremental_detokenizer.hpp"
#include "frontend/tokenizer.hpp"
#include "tokenizer_test_util.hpp"

namespace zmoe {
namespace {

using nlohmann::json;

class TokenizerFixture : public ::testing::TestWithParam<std::string> {
  protected:
    // The fixture file, or a skip when the reference fixtures have not been generated into the tree yet.
    json load(const std::string& suffix) {
        const auto path = testing::fixture_dir() / (GetParam() + suffix + ".json");
        if (!std::filesystem::exists(path)) return json();
        return json::parse(testing::read_text_file(path));
    }
    const tokenizer& tok() { return testing::real_tokenizer(GetParam()); }
};

std::string show(const std::string& s) { return json(s).dump().substr(0, 120); }

std::string stream(const tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
    incremental_detokenizer detok(tok, skip_special);
    std::string out;
    for (int32_t id : ids) out += detok.push(id);
    return out + detok.flush();
}

TEST_P(TokenizerFixture, EncodeMatchesHuggingFace) {
    const json items = load("");
    if (items.is_null()) FAIL() << "no fixtures in " << testing::fixture_dir();
    ASSERT_GT(items.size(), 300u);
    size_t failures = 0;
    for (size_t i = 0; i < items.size(); ++i) {
        const auto& text = items[i]["text"].get_ref<const std::string&>();
        const auto expected = items[i]["ids"].get<std::vector<int32_t>>();
        const auto got = tok().encode(text);
        if (got != expected && ++failures <= 10) {
            size_t k = 0;
            while (k < got.size() && k < expected.size() && got[k] == expected[k]) ++k;
            ADD_FAILURE() << "item " << i << " " << show(text) << ": first difference at id #" << k << " of "
                          << expected.size() << " (got " << (k < got.size() ? got[k] : -1) << ", want "
                          << (k < expected.size() ? expected[k] : -1) << ")";
        }
    }
    EXPECT_EQ(failures, 0u) << "of " << items.size() << " strings";
}

TEST_P(TokenizerFixture, DecodeMatchesHuggingFace) {
    const json items = load("");
    if (items.is_null()) FAIL() << "no fixtures in " << testing::fixture_dir();
    size_t failures = 0;
    for (size_t i = 0; i < items.size(); ++i) {
        const auto ids = items[i]["ids"].get<std::vector<int32_t>>();
        const auto& decoded = items[i]["decoded"].get_ref<const std::string&>();
        if (tok().decode(ids) != decoded && ++failures <= 10)
            ADD_FAILURE() << "decode of item " << i << " " << show(decoded);
        if (stream(tok(), ids, false) != decoded && ++failures <= 10)
            ADD_FAILURE() << "streamed decode of item " << i << " " << show(decoded);
        if (items[i].contains("decoded_skip_special")) {
            const auto& skipped = items[i]["decoded_skip_special"].get_ref<const std::string&>();
            if (tok().decode(ids, true) != skipped && ++failures <= 10)
                ADD_FAILURE() << "decode(skip_special) of item " << i << " " << show(skipped);
            if (stream(tok(), ids, true) != skipped && ++failures <= 10)
                ADD_FAILURE() << "streamed decode(skip_special) of item " << i;
        }
    }
    EXPECT_EQ(failures, 0u);
}

TEST_P(TokenizerFixture, DecodeOfArbitraryIdsMatchesHuggingFace) {
    const json cases = load("_decode");
    if (cases.is_null()) FAIL() << "no decode fixtures in " << testing::fixture_dir();
    size_t failures = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const auto ids = cases[i]["ids"].get<std::vector<int32_t>>();
        for (bool skip : {false, true}) {
            const auto& want = cases[i][skip ? "decoded_skip_special" : "decoded"].get_ref<const std::string&>();
            if (tok().decode(ids, skip) != want && ++failures <= 10)
                ADD_FAILURE() << "case " << i << " skip=" << skip << ": want " << show(want) << ", got "
                              << show(tok().decode(ids, skip));
            if (stream(tok(), ids, skip) != want && ++failures <= 10)
                ADD_FAILURE() << "streamed case " << i << " skip=" << skip;
        }
    }
    EXPECT_EQ(failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerFixture, ::testing::ValuesIn(testing::fixture_vocabulary_names()),
                         testing::vocabulary_param_name());

}  // namespace
}  // namespace zmoe
