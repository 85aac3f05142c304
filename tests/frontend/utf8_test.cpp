#include "frontend/utf8.hpp"

#include <gtest/gtest.h>

namespace zmoe {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, FindInvalidReportsFirstBadOffset) {
    EXPECT_EQ(utf8::find_invalid(""), std::string_view::npos);
    EXPECT_EQ(utf8::find_invalid("plain ascii text that is longer than eight bytes"), std::string_view::npos);
    EXPECT_EQ(utf8::find_invalid("h\xC3\xA9llo \xE4\xB8\xAD \xF0\x9F\x98\x80"), std::string_view::npos);
    EXPECT_EQ(utf8::find_invalid("abcdefghij\xFFxyz"), 10u);
    EXPECT_EQ(utf8::find_invalid("ab\xC3"), 2u);              // truncated at the end
    EXPECT_EQ(utf8::find_invalid("ab\xC0\xAF"), 2u);          // overlong '/'
    EXPECT_EQ(utf8::find_invalid("x\xED\xA0\x80"), 1u);       // UTF-16 surrogate
    EXPECT_EQ(utf8::find_invalid("xy\xF4\x90\x80\x80"), 2u);  // above U+10FFFF
    EXPECT_EQ(utf8::find_invalid("\xE0\x9F\xBF"), 0u);        // overlong 3-byte form
    EXPECT_EQ(utf8::find_invalid("ok\x80"), 2u);              // lone continuation byte
}

TEST(Utf8, LossyFollowsMaximalSubpartRule) {
    // The example of Unicode 15, Table 3-8 ("U+FFFD for Non-Shortest Form Sequences" / maximal subparts).
    std::string out;
    utf8::append_lossy(out, "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64");
    EXPECT_EQ(out, "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
    out.clear();
    utf8::append_lossy(out, "\xF0\x80\x80");  // F0 80 is never valid: three separate subparts
    EXPECT_EQ(out, kFffd + kFffd + kFffd);
    out.clear();
    utf8::append_lossy(out, "ok \xF0\x9F\x98");  // truncated 4-byte sequence at the end: one replacement
    EXPECT_EQ(out, "ok " + kFffd);
    out.clear();
    utf8::append_lossy(out, "valid \xE4\xB8\xAD");
    EXPECT_EQ(out, "valid \xE4\xB8\xAD");
}

TEST(Utf8, IncompleteTailCountsOnlyCompletableBytes) {
    EXPECT_EQ(utf8::incomplete_tail(""), 0u);
    EXPECT_EQ(utf8::incomplete_tail("abc"), 0u);
    EXPECT_EQ(utf8::incomplete_tail("a\xE4"), 1u);
    EXPECT_EQ(utf8::incomplete_tail("a\xE4\xB8"), 2u);
    EXPECT_EQ(utf8::incomplete_tail("a\xE4\xB8\xAD"), 0u);  // complete
    EXPECT_EQ(utf8::incomplete_tail("\xF0\x9F\x98"), 3u);
    EXPECT_EQ(utf8::incomplete_tail("\xF0\x80"), 0u);  // already invalid
    EXPECT_EQ(utf8::incomplete_tail("\x80\x80"), 0u);  // continuation bytes without a lead
    EXPECT_EQ(utf8::incomplete_tail("\xC3\xA9\xC3"), 1u);
    EXPECT_EQ(utf8::incomplete_tail("\xFF"), 0u);
}

TEST(Utf8, AppendAndDecodeRoundTrip) {
    for (char32_t cp : {char32_t{0x24}, char32_t{0xA2}, char32_t{0x939}, char32_t{0x20AC}, char32_t{0xD55C},
                        char32_t{0x10348}, char32_t{0x10FFFF}}) {
        std::string s;
        utf8::append(s, cp);
        EXPECT_EQ(utf8::find_invalid(s), std::string_view::npos);
        size_t i = 0;
        EXPECT_EQ(utf8::decode(s, i), cp);
        EXPECT_EQ(i, s.size());
    }
}

}  // namespace
}  // namespace zmoe
