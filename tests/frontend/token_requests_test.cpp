// The frontend's answers to tokenize / detokenize requests, against the real Qwen3 tokenizer and chat template
// (scripts/fetch_tokenizers.sh): the ids equal the tokenizer's own encoding (text) and a chat request's prompt ids
// (conversation); decoding gives the text back and each id's bytes, which add up to it; failures are replies.

#include "frontend/token_requests.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "frontend/chat_prompt.hpp"

namespace zmoe {
namespace {

namespace fs = std::filesystem;

const fs::path kQwen3 = fs::path(ZMOE_SOURCE_DIR) / "third_party" / "tokenizers" / "qwen3";

class TokenRequests : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!fs::exists(kQwen3 / "tokenizer.json")) GTEST_SKIP() << "run scripts/fetch_tokenizers.sh";
        tok_.emplace(tokenizer::from_file(kQwen3));
        tmpl_ = chat_template::from_tokenizer(kQwen3.string());
    }
    std::optional<tokenizer> tok_;
    std::optional<chat_template> tmpl_;
};

TEST_F(TokenRequests, TokenizeTextAndChat) {
    const client_tokenize text{"t1", "Hello there, wörld", "", true};
    const client_tokens_reply r = answer_tokenize(text, &*tok_, tmpl_, 1 << 20);
    EXPECT_EQ(r.code, errc::ok) << r.message;
    EXPECT_EQ(r.tag, "t1");
    EXPECT_EQ(r.token_ids, tok_->encode("Hello there, wörld", true));
    ASSERT_TRUE(tmpl_.has_value());
    const std::string chat = R"({"messages": [{"role": "user", "content": "Name a colour."}]})";
    const client_tokens_reply c = answer_tokenize({"t2", "", chat, true}, &*tok_, tmpl_, 1 << 20);
    EXPECT_EQ(c.code, errc::ok) << c.message;
    EXPECT_EQ(c.token_ids, chat_prompt_ids(tmpl_, *tok_, chat));
    EXPECT_GT(c.token_ids.size(), r.token_ids.size());
}

TEST_F(TokenRequests, DetokenizeGivesTextAndPieces) {
    const std::vector<int32_t> ids = tok_->encode("Grüße, 世界! ok", false);
    const client_tokens_reply r = answer_detokenize({"d1", ids}, &*tok_);
    EXPECT_EQ(r.code, errc::ok) << r.message;
    EXPECT_EQ(r.text, "Grüße, 世界! ok");
    ASSERT_EQ(r.pieces.size(), ids.size());
    std::string joined;
    for (const auto& p : r.pieces) joined += p;
    EXPECT_EQ(joined, r.text);
}

TEST_F(TokenRequests, FailuresAreReplies) {
    EXPECT_EQ(answer_detokenize({"d", {tok_->vocab_size() + 5}}, &*tok_).code, errc::invalid_argument);
    EXPECT_EQ(answer_detokenize({"d", {-1}}, &*tok_).code, errc::invalid_argument);
    EXPECT_EQ(answer_tokenize({"t", std::string(100, 'a'), "", true}, &*tok_, tmpl_, 10).code, errc::invalid_argument);
    EXPECT_EQ(answer_tokenize({"t", "x", "{}", true}, &*tok_, tmpl_, 1 << 20).code, errc::invalid_argument);
    EXPECT_EQ(answer_tokenize({"t", "", "not json", true}, &*tok_, tmpl_, 1 << 20).code, errc::invalid_argument);
    EXPECT_EQ(answer_tokenize({"t", "x", "", true}, nullptr, tmpl_, 1 << 20).code, errc::unsupported);
    EXPECT_EQ(answer_detokenize({"d", {1}}, nullptr).code, errc::unsupported);
}

}  // namespace
}  // namespace zmoe
