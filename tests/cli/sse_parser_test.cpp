// The Server-Sent Events parser of `zmoe bench serve --base-url`: the same events whatever way the bytes are
// split, and the format's rules for line ends, comments, multi-line data and fields.

#include "cli/sse_parser.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using zmoe::cli::sse_event;
using zmoe::cli::sse_parser;

namespace {

std::vector<sse_event> parse_whole(const std::string& bytes) {
    sse_parser p;
    std::vector<sse_event> out;
    p.feed(bytes, out);
    return out;
}

void expect_same(const std::vector<sse_event>& a, const std::vector<sse_event>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].type, b[i].type) << what << " event " << i;
        EXPECT_EQ(a[i].data, b[i].data) << what << " event " << i;
    }
}

// A stream as OpenAI-compatible servers write it, with every feature of the format in it.
const std::string kStream =
    "\xEF\xBB\xBF"  // a byte order mark
    ": keep-alive comment\n\n"
    "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
    "data: {\"choices\":[{\"text\":\"b\"}]}\r\n\r\n"
    "event: error\r"
    "data: first line\r"
    "data:second line\r"
    "id: 7\r"
    "retry: 100\r\r"
    "data\n\n"
    "unknown: field\n"
    "data:  two spaces\n\n"
    "data: [DONE]\n\n";

TEST(SseParser, ParsesEveryFeatureOfTheFormat) {
    const auto ev = parse_whole(kStream);
    ASSERT_EQ(ev.size(), 6u);
    EXPECT_EQ(ev[0].type, "message");
    EXPECT_EQ(ev[0].data, "{\"choices\":[{\"text\":\"a\"}]}");
    EXPECT_EQ(ev[1].data, "{\"choices\":[{\"text\":\"b\"}]}");  // CR LF line ends
    EXPECT_EQ(ev[2].type, "error");                             // CR line ends, a named event
    EXPECT_EQ(ev[2].data, "first line\nsecond line");           // data lines joined; no space after ':' is fine
    EXPECT_EQ(ev[3].type, "message");                           // the event type does not carry over
    EXPECT_EQ(ev[3].data, "");                                  // "data" without a colon: an empty value
    EXPECT_EQ(ev[4].data, " two spaces");                       // only one space is dropped
    EXPECT_EQ(ev[5].data, "[DONE]");
}

TEST(SseParser, AnySplitGivesTheSameEvents) {
    const auto whole = parse_whole(kStream);
    // Every split in two, and byte by byte.
    for (size_t cut = 0; cut <= kStream.size(); ++cut) {
        sse_parser p;
        std::vector<sse_event> out;
        p.feed(std::string_view(kStream).substr(0, cut), out);
        p.feed(std::string_view(kStream).substr(cut), out);
        expect_same(out, whole, "cut at " + std::to_string(cut));
        EXPECT_FALSE(p.pending());
    }
    sse_parser p;
    std::vector<sse_event> out;
    for (char c : kStream) p.feed(std::string_view(&c, 1), out);
    expect_same(out, whole, "byte by byte");
}

TEST(SseParser, EventsAreDispatchedOnlyAtTheBlankLine) {
    sse_parser p;
    std::vector<sse_event> out;
    p.feed("data: {\"x\":1}\n", out);
    EXPECT_TRUE(out.empty());
    EXPECT_TRUE(p.pending());  // cut here, the stream would have lost an event
    p.feed("\n", out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].data, "{\"x\":1}");
    EXPECT_FALSE(p.pending());
    // A CR at the end of one piece and the LF at the start of the next are one line end, not two.
    p.feed("data: y\r", out);
    p.feed("\ndata: z\r\n", out);
    p.feed("\r\n", out);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[1].data, "y\nz");
}

TEST(SseParser, CommentsAndEventsWithoutDataDispatchNothing) {
    const auto ev = parse_whole(": ping\n\nevent: lonely\n\n:\n\nid: 3\n\n");
    EXPECT_TRUE(ev.empty());
}

}  // namespace
