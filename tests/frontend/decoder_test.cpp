#include "frontend/decoder.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "frontend/utf8.hpp"

namespace zmoe {
namespace {

using nlohmann::json;
using strings = std::vector<std::string>;

// Expected outputs below were checked against Hugging Face `tokenizers` 0.23 (its decoders on the same tokens).

json replace_step(const std::string& from, const std::string& to) {
    return json{{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

// Llama 2 / Mistral / Mixtral's decoder.
json sentencepiece_json(int strip_start = 1) {
    return json{{"type", "Sequence"},
                {"decoders",
                 {replace_step("\xE2\x96\x81", " "),
                  {{"type", "ByteFallback"}},
                  {{"type", "Fuse"}},
                  {{"type", "Strip"}, {"content", " "}, {"start", strip_start}, {"stop", 0}}}}};
}

json metaspace_json(const std::string& scheme) {
    return json{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", scheme}, {"split", true}};
}

// A decoder over a vocabulary made of exactly `tokens` (id i is tokens[i]); returns the decode of all of them and
// checks on the way that streaming them one by one gives the same text, valid UTF-8 at every step.
std::string decode_all(const json& j, const strings& tokens) {
    decoder d = decoder::from_json(j);
    d.set_vocabulary(tokens);
    std::vector<int32_t> ids;
    for (size_t i = 0; i < tokens.size(); ++i) ids.push_back(static_cast<int32_t>(i));
    const std::string whole = d.decode(ids);
    decoder::stream s(d);
    std::string streamed;
    for (int32_t id : ids) {
        std::string chunk;
        s.push(id, chunk);
        EXPECT_EQ(utf8::find_invalid(chunk), std::string_view::npos) << "broken UTF-8 after id " << id;
        streamed += chunk;
    }
    s.finish(streamed);
    EXPECT_EQ(streamed, whole);
    return whole;
}

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Decoder, ByteFallbackRunIsAllOrNothing) {
    const json bf{{"type", "ByteFallback"}};
    EXPECT_EQ(decode_all(bf, {"<0xE4>", "<0xB8>", "<0xAD>"}), "\xE4\xB8\xAD");
    // One invalid byte makes the whole run U+FFFD, one per byte, even its valid "A".
    EXPECT_EQ(decode_all(bf, {"<0x41>", "<0xFF>"}), kFffd + kFffd);
    // A run is ended by any other token; a truncated character at the end is invalid too.
    EXPECT_EQ(decode_all(bf, {"<0x41>", "<0xFF>", "x", "<0xE4>", "<0xB8>"}), kFffd + kFffd + "x" + kFffd + kFffd);
    // HF parses the two digits with from_str_radix: lowercase and "+d" count as bytes, other spellings do not.
    EXPECT_EQ(decode_all(bf, {"<0x+1>", "<0xab>", "<0xZZ>", "<0x4>"}), kFffd + kFffd + "<0xZZ><0x4>");
    EXPECT_EQ(decode_all(bf, {"<0x61>", "<0x+1>"}), "a\x01");
}

TEST(Decoder, SentencePieceSequence) {
    EXPECT_EQ(decode_all(sentencepiece_json(), {"\xE2\x96\x81Hello", "\xE2\x96\x81world"}), "Hello world");
    // The Strip removes one space of the whole text: a byte token's space counts, a second space stays.
    EXPECT_EQ(decode_all(sentencepiece_json(), {"<0x20>", "\xE2\x96\x81\xE2\x96\x81x", "<0xE2>", "<0x96>", "<0x81>"}),
              "  x\xE2\x96\x81");  // bytes of "▁" stay "▁": Replace runs before ByteFallback
    EXPECT_EQ(decode_all(sentencepiece_json(), {"\xE2\x96\x81"}), "");
    EXPECT_EQ(decode_all(sentencepiece_json(), {}), "");
    EXPECT_EQ(decode_all(sentencepiece_json(), {"<s>", "\xE2\x96\x81Hi"}), "<s> Hi");
    EXPECT_EQ(decode_all(sentencepiece_json(2), {"\xE2\x96\x81", "\xE2\x96\x81\xE2\x96\x81", "a"}), " a");
    // Without Strip nothing is removed.
    json no_strip = sentencepiece_json();
    no_strip["decoders"].erase(3);
    EXPECT_EQ(decode_all(no_strip, {"\xE2\x96\x81Hi", "\xE2\x96\x81there"}), " Hi there");
}

TEST(Decoder, MetaspaceDropsEveryReplacementOfTheFirstToken) {
    const strings tokens{
        "\xE2\x96\x81\xE2\x96\x81"
        "a\xE2\x96\x81"
        "b",
        "\xE2\x96\x81"
        "c\xE2\x96\x81",
        "\xE2\x96\x81"};
    EXPECT_EQ(decode_all(metaspace_json("always"), tokens), "ab c  ");
    EXPECT_EQ(decode_all(metaspace_json("first"), tokens), "ab c  ");
    EXPECT_EQ(decode_all(metaspace_json("never"), tokens), "  a b c  ");
    EXPECT_EQ(decode_all(metaspace_json("always"), {"<s>",
                                                    "\xE2\x96\x81"
                                                    "c"}),
              "<s> c");
}

TEST(Decoder, NoDecoderJoinsWithSpaces) {
    EXPECT_EQ(decode_all(json(), {"a", "b", "<0x41>"}), "a b <0x41>");
    EXPECT_EQ(decoder::from_json(json()).separator(), " ");
}

TEST(Decoder, StreamHoldsAByteRunOnlyWhileItCanStillBeValid) {
    decoder d = decoder::from_json(sentencepiece_json());
    d.set_vocabulary({"\xE2\x96\x81Hi", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "<0x41>", "<0xFF>", "x"});
    decoder::stream s(d);
    std::string out;
    s.push(0, out);
    EXPECT_EQ(out, "Hi");  // the leading space is stripped as soon as it comes
    out.clear();
    for (int32_t id : {1, 2, 3, 4, 5}) s.push(id, out);
    EXPECT_EQ(out, "");  // a valid run so far: a later invalid byte could still turn it into U+FFFD
    EXPECT_EQ(s.pending_bytes(), 5u);
    s.push(7, out);
    EXPECT_EQ(out,
              "\xF0\x9F\x98\x80"
              "Ax");
    out.clear();
    s.push(5, out);
    s.push(6, out);  // invalid: final at once, one U+FFFD per byte of the run
    EXPECT_EQ(out, kFffd + kFffd);
    s.push(5, out);  // the same run goes on: still invalid
    EXPECT_EQ(out, kFffd + kFffd + kFffd);
    EXPECT_EQ(s.pending_bytes(), 0u);
    out.clear();
    s.push(1, out);
    s.finish(out);  // a truncated character at the end
    EXPECT_EQ(out, kFffd);
    // After finish() a new sequence starts: its leading space is stripped again.
    out.clear();
    s.push(0, out);
    EXPECT_EQ(out, "Hi");
}

TEST(Decoder, StreamMatchesDecodeOnRandomSequences) {
    decoder d = decoder::from_json(sentencepiece_json());
    strings vocab{"\xE2\x96\x81", "\xE2\x96\x81the", "x", "<s>", "\xE2\x96\x81\xE2\x96\x81"};
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        vocab.emplace_back(name);
    }
    d.set_vocabulary(vocab);
    uint64_t state = 7;
    auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull, state >> 33; };
    // Byte tokens of valid characters and stray bytes, mixed with word tokens.
    const std::vector<int32_t> pool{0,        1,        2,        3,        4,        5 + 0x20,
                                    5 + 0x41, 5 + 0xC3, 5 + 0xA9, 5 + 0xE4, 5 + 0xB8, 5 + 0xAD,
                                    5 + 0xF0, 5 + 0x9F, 5 + 0x98, 5 + 0x80, 5 + 0xFF, 5 + 0xC0};
    for (int trial = 0; trial < 500; ++trial) {
        std::vector<int32_t> ids;
        const int n = static_cast<int>(next() % 24);
        for (int k = 0; k < n; ++k) ids.push_back(pool[next() % pool.size()]);
        decoder::stream s(d);
        std::string streamed;
        for (int32_t id : ids) {
            std::string chunk;
            s.push(id, chunk);
            ASSERT_EQ(utf8::find_invalid(chunk), std::string_view::npos);
            streamed += chunk;
        }
        s.finish(streamed);
        ASSERT_EQ(streamed, d.decode(ids)) << "trial " << trial;
    }
}

TEST(Decoder, UnsupportedShapesAreNamed) {
    auto expect_error = [](const json& j, errc code, const std::string& name) {
        try {
            decoder::from_json(j);
            FAIL() << "expected an error naming " << name << " for " << j.dump();
        } catch (const error& e) {
            EXPECT_EQ(e.code(), code);
            EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
        }
    };
    expect_error(json{{"type", "WordPiece"}}, errc::unsupported, "WordPiece");
    expect_error(json{{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, {{"type", "CTC"}}}}}, errc::unsupported,
                 "CTC");
    // Without Fuse, HF strips every token; zmoe refuses rather than decode differently.
    expect_error(json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}, errc::unsupported, "Strip");
    json stop = sentencepiece_json();
    stop["decoders"][3]["stop"] = 1;
    expect_error(stop, errc::unsupported, "stop");
    expect_error(json{{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, {{"type", "ByteFallback"}}}}},
                 errc::unsupported, "ByteFallback after Fuse");
    expect_error(json{{"type", "Metaspace"}}, errc::invalid_checkpoint, "replacement");
    json bad_scheme = metaspace_json("sometimes");
    expect_error(bad_scheme, errc::invalid_checkpoint, "sometimes");
    json legacy = metaspace_json("first");
    legacy["add_prefix_space"] = false;  // HF refuses this combination
    expect_error(legacy, errc::invalid_checkpoint, "add_prefix_space");
}

}  // namespace
}  // namespace zmoe
