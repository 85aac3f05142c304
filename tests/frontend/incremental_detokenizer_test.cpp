#include "frontend/incremental_detokenizer.hpp"

#include <gtest/gtest.h>

#include "base/error.hpp"
#include "frontend/byte_level.hpp"
#include "frontend/utf8.hpp"
#include "tokenizer_test_util.hpp"

namespace zmoe {
namespace {

// Streams `ids` one by one and checks the invariants: every chunk is valid UTF-8, at most three bytes are ever
// held back, and the chunks add up to decode(ids).
void expect_streams_like_decode(const tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
    incremental_detokenizer detok(tok, skip_special);
    std::string streamed;
    for (size_t i = 0; i < ids.size(); ++i) {
        const std::string chunk = detok.push(ids[i]);
        ASSERT_EQ(utf8::find_invalid(chunk), std::string_view::npos) << "broken UTF-8 after id #" << i;
        ASSERT_LE(detok.pending_bytes(), 3u);
        streamed += chunk;
    }
    const std::string tail = detok.flush();
    ASSERT_EQ(utf8::find_invalid(tail), std::string_view::npos);
    streamed += tail;
    EXPECT_EQ(streamed, tok.decode(ids, skip_special));
    EXPECT_EQ(detok.pending_bytes(), 0u);
}

class IncrementalDetokenizer : public ::testing::TestWithParam<std::string> {
  protected:
    const tokenizer& tok() { return testing::real_tokenizer(GetParam()); }
};

TEST_P(IncrementalDetokenizer, MatchesDecodeOnText) {
    for (const std::string s :
         {"Hello, world!", "中文分词器测试，日本語のテキスト、한국어 텍스트",
          "emoji 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵 and combining e\xCC\x81",
          "<|im_start|>user\nhi<|im_end|>", "<｜begin▁of▁sentence｜>hello<|endoftext|>", "ไทย हिन्दी العربية"}) {
        const auto ids = tok().encode(s);
        expect_streams_like_decode(tok(), ids, false);
        expect_streams_like_decode(tok(), ids, true);
    }
}

TEST_P(IncrementalDetokenizer, HoldsBackSplitCharactersAndEmitsThemWhole) {
    // A 4-byte emoji spread over single-byte tokens: nothing comes out until the last byte.
    const std::string emoji = "\xF0\x9F\x98\x80";
    std::vector<int32_t> byte_ids;
    for (char c : emoji) byte_ids.push_back(*tok().token_to_id(byte_level::to_chars(std::string(1, c))));
    incremental_detokenizer detok(tok());
    EXPECT_EQ(detok.push(byte_ids[0]), "");
    EXPECT_EQ(detok.push(byte_ids[1]), "");
    EXPECT_EQ(detok.push(byte_ids[2]), "");
    EXPECT_EQ(detok.pending_bytes(), 3u);
    EXPECT_EQ(detok.push(byte_ids[3]), emoji);
    // An incomplete sequence broken by ASCII becomes U+FFFD as soon as that is certain.
    EXPECT_EQ(detok.push(byte_ids[0]), "");
    EXPECT_EQ(detok.push(*tok().token_to_id("a")),
              "\xEF\xBF\xBD"
              "a");
    // One left open at the end comes out of flush() as U+FFFD, as decode() would.
    EXPECT_EQ(detok.push(byte_ids[0]), "");
    EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD");
    EXPECT_EQ(detok.flush(), "");
}

TEST_P(IncrementalDetokenizer, MatchesDecodeOnArbitraryIds) {
    // Random ids, biased towards byte tokens and truncated multi-byte tokens, produce invalid UTF-8 often.
    std::vector<int32_t> pool;
    for (int b = 0x80; b < 0x100; ++b)
        pool.push_back(*tok().token_to_id(byte_level::to_chars(std::string(1, static_cast<char>(b)))));
    for (int32_t id : tok().encode("中文日本語한국어 emoji 😀👍🏽 text ÄÖÜ")) pool.push_back(id);
    uint64_t state = 99;
    auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull, state >> 33; };
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<int32_t> ids;
        const int n = 1 + static_cast<int>(next() % 30);
        for (int k = 0; k < n; ++k) {
            if (next() % 4 == 0)
                ids.push_back(static_cast<int32_t>(next() % static_cast<uint64_t>(tok().vocab_size())));
            else
                ids.push_back(pool[next() % pool.size()]);
            if (!tok().is_valid_id(ids.back())) ids.pop_back();
        }
        expect_streams_like_decode(tok(), ids, trial % 2 == 0);
    }
}

TEST_P(IncrementalDetokenizer, BadIdThrowsAndKeepsState) {
    incremental_detokenizer detok(tok());
    const std::string first_byte = "\xE4";
    EXPECT_EQ(detok.push(*tok().token_to_id(byte_level::to_chars(first_byte))), "");
    EXPECT_THROW(detok.push(-5), error);
    EXPECT_THROW(detok.push(tok().vocab_size()), error);
    EXPECT_EQ(detok.pending_bytes(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, IncrementalDetokenizer, ::testing::ValuesIn(testing::vocabulary_names()),
                         testing::vocabulary_param_name());

}  // namespace
}  // namespace zmoe
