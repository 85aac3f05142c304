// Property tests of the output parsers: for every format, >= 1 000 random outputs (random text with unicode and
// marker-like pieces around zero or more well-formed calls whose arguments are random JSON with escapes, some
// malformed calls, reasoning before) are parsed whole and streamed in random deltas (markers and UTF-8 sequences
// split anywhere). The whole-text result must equal what the generator built, and the concatenated stream must
// equal the whole-text result exactly; truncated outputs (cut at a random byte) must stream as they parse.

#include "tool_calls/output_parser.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace zmoe::tool_calls {
namespace {

using ojson = nlohmann::ordered_json;
using rng_t = std::mt19937_64;

const std::vector<std::string> kAllMarkers = {"<tool_call>",
                                              "</tool_call>",
                                              "<think>",
                                              "</think>",
                                              "<｜tool▁calls▁begin｜>",
                                              "<｜tool▁calls▁end｜>",
                                              "<｜tool▁call▁begin｜>",
                                              "<｜tool▁call▁end｜>",
                                              "<｜tool▁sep｜>",
                                              "[TOOL_CALLS]",
                                              "<|python_tag|>"};

size_t pick(rng_t& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }
bool coin(rng_t& rng, double p = 0.5) { return std::bernoulli_distribution(p)(rng); }

bool has_marker(const std::string& s, const std::vector<std::string>& markers = kAllMarkers) {
    for (const std::string& m : markers)
        if (s.find(m) != std::string::npos) return true;
    return false;
}

/// Random free text: words, whitespace, unicode, and pieces that look like the start of markers.
std::string random_text(rng_t& rng, size_t max_pieces = 12, const std::vector<std::string>& forbid = kAllMarkers) {
    static const std::vector<std::string> kPieces = {
        "hello", "the",        " ",        "  ",      "\n",     "\n\n",      "\t",       "é",        "日本語",
        "🙂",  "<",          ">",        "{",       "}",      "[",         "]",        "\"",       "\\",
        ";",     ",",          ":",        "<tool",   "</tool", "<think",    "</thi",    "<｜tool▁", "<｜",
        "[TOOL", "[TOOL_CALL", "<|python", "```json", "`",      "{\"name\"", "function", "x",        "42"};
    for (;;) {
        std::string s;
        const size_t n = pick(rng, max_pieces + 1);
        for (size_t i = 0; i < n; ++i) s += kPieces[pick(rng, kPieces.size())];
        if (!has_marker(s, forbid)) return s;
    }
}

std::string ws(rng_t& rng) {
    static const std::vector<std::string> kWs = {"", "", " ", "\n", "\n  ", "\t"};
    return kWs[pick(rng, kWs.size())];
}

/// A JSON string literal of random text, each character escaped one of the ways JSON allows.
std::string json_string(rng_t& rng) {
    static const std::vector<std::pair<std::string, std::vector<std::string>>> kChars = {
        {"a", {"a"}},
        {"Z", {"Z", "\\u005A"}},
        {" ", {" "}},
        {"\"", {"\\\""}},
        {"\\", {"\\\\"}},
        {"\n", {"\\n", "\\u000a"}},
        {"\t", {"\\t"}},
        {"/", {"/", "\\/"}},
        {"<", {"<", "\\u003c"}},
        {"{", {"{"}},
        {"}", {"}"}},
        {"]", {"]"}},
        {"é", {"é", "\\u00e9"}},
        {"日", {"日", "\\u65e5"}},
        {"🙂", {"🙂", "\\ud83d\\ude42"}},
    };
    std::string s = "\"";
    const size_t n = pick(rng, 10);
    for (size_t i = 0; i < n; ++i) {
        const auto& alts = kChars[pick(rng, kChars.size())].second;
        s += alts[pick(rng, alts.size())];
    }
    return s + "\"";
}

std::string json_value(rng_t& rng, int depth);

std::string json_object(rng_t& rng, int depth) {
    std::string s = "{" + ws(rng);
    const size_t n = pick(rng, depth > 2 ? 2 : 4);
    for (size_t i = 0; i < n; ++i) {
        if (i) s += "," + ws(rng);
        s += json_string(rng) + ws(rng) + ":" + ws(rng) + json_value(rng, depth + 1);
    }
    return s + ws(rng) + "}";
}

std::string json_value(rng_t& rng, int depth) {
    switch (pick(rng, depth > 2 ? 5 : 7)) {
        case 0:
            return json_string(rng);
        case 1:
            return std::to_string(static_cast<int64_t>(rng() % 2001) - 1000);
        case 2:
            return coin(rng) ? "-1.5e3" : "0.25";
        case 3:
            return coin(rng) ? "true" : "false";
        case 4:
            return "null";
        case 5: {
            std::string s = "[" + ws(rng);
            const size_t n = pick(rng, 4);
            for (size_t i = 0; i < n; ++i) s += (i ? "," + ws(rng) : "") + json_value(rng, depth + 1);
            return s + ws(rng) + "]";
        }
        default:
            return json_object(rng, depth);
    }
}

std::string random_name(rng_t& rng) {
    static const std::string kFirst = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_";
    static const std::string kRest = kFirst + "0123456789";
    std::string s(1, kFirst[pick(rng, kFirst.size())]);
    const size_t n = pick(rng, 12);
    for (size_t i = 0; i < n; ++i) s += kRest[pick(rng, kRest.size())];
    return s;
}

/// Random arguments: an object's text with no marker inside.
std::string random_arguments(rng_t& rng) {
    for (;;) {
        std::string a = json_object(rng, 0);
        if (!has_marker(a) && a.find("\n```") == std::string::npos) return a;
    }
}

std::string rtrim_space(std::string s) {
    while (!s.empty() && is_space(s.back())) s.pop_back();
    return s;
}
std::string ltrim_space(std::string s) {
    size_t i = 0;
    while (i < s.size() && is_space(s[i])) ++i;
    return s.substr(i);
}

/// One generated output and what parsing it must give.
struct sample {
    std::string text;
    parsed_output expected;
};

void add_call(parsed_output& out, const std::string& name, const std::string& arguments) {
    out.calls.push_back({.id = "call_" + std::to_string(out.calls.size()), .name = name, .arguments = arguments});
}

/// Content with calls between text pieces: whitespace next to a call is layout. `call` appends one call's text to
/// the output and its expectation (or a malformed call's text to the content when it returns false).
template <typename CallFn>
void text_and_calls(rng_t& rng, sample& s, CallFn call) {
    const size_t n = pick(rng, 4);
    bool after_call = false;
    std::string pending = random_text(rng);  // text not yet added to the expected content
    for (size_t i = 0; i < n; ++i) {
        std::string before = s.text;
        s.text += pending;
        std::string piece = after_call ? ltrim_space(pending) : pending;
        std::string call_text;
        parsed_output trial = s.expected;
        const bool real = call(rng, call_text, trial);
        if (real) {
            s.expected.content += rtrim_space(piece);
            s.expected.calls = trial.calls;
        } else {
            s.expected.content += piece + call_text;
        }
        s.text += call_text;
        after_call = real;
        pending = random_text(rng);
    }
    s.text += pending;
    s.expected.content += after_call ? ltrim_space(pending) : pending;
}

bool hermes_call(rng_t& rng, std::string& text, parsed_output& out) {
    const std::string name = random_name(rng);
    const std::string args = random_arguments(rng);
    switch (pick(rng, 5)) {
        case 0:  // arguments first: read whole, arguments re-serialised compactly
            text = "<tool_call>" + ws(rng) + "{\"arguments\": " + args + ", \"name\": \"" + name + "\"}" + ws(rng) +
                   "</tool_call>";
            add_call(out, name, ojson::parse(args).dump());
            return true;
        case 1: {  // not a call: content, verbatim
            std::string body;
            do body = random_text(rng);
            while (body.find('{') != std::string::npos);
            text = "<tool_call>" + body + "</tool_call>";
            return false;
        }
        default:
            text = "<tool_call>" + ws(rng) + "{" + ws(rng) + "\"name\"" + ws(rng) + ":" + ws(rng) + "\"" + name +
                   "\"," + ws(rng) + "\"arguments\"" + ws(rng) + ":" + ws(rng) + args + ws(rng) + "}" + ws(rng) +
                   "</tool_call>";
            add_call(out, name, args);
            return true;
    }
}

sample hermes_sample(rng_t& rng) {
    sample s;
    text_and_calls(rng, s, hermes_call);
    return s;
}

sample deepseek_sample(rng_t& rng) {
    sample s;
    text_and_calls(rng, s, [](rng_t& r, std::string& text, parsed_output& out) {
        text = "<｜tool▁calls▁begin｜>";
        const size_t n = 1 + pick(r, 3);
        for (size_t i = 0; i < n; ++i) {
            const std::string name = random_name(r), args = random_arguments(r);
            text += (coin(r, 0.2) ? "\n" : "") + std::string("<｜tool▁call▁begin｜>function<｜tool▁sep｜>") + name +
                    "\n```json\n" + args + "\n```<｜tool▁call▁end｜>";
            add_call(out, name, args);
        }
        text += ws(r) + "<｜tool▁calls▁end｜>";
        return true;
    });
    return s;
}

sample mistral_sample(rng_t& rng) {
    sample s;
    text_and_calls(rng, s, [](rng_t& r, std::string& text, parsed_output& out) {
        text = "[TOOL_CALLS]" + ws(r) + "[";
        const size_t n = 1 + pick(r, 3);
        for (size_t i = 0; i < n; ++i) {
            const std::string name = random_name(r), args = random_arguments(r);
            text += (i ? "," + ws(r) : ws(r)) + "{\"name\": \"" + name + "\", \"arguments\": " + args + "}";
            add_call(out, name, args);
        }
        text += ws(r) + "]";
        return true;
    });
    return s;
}

sample llama3_sample(rng_t& rng) {
    sample s;
    if (coin(rng, 0.3)) {  // plain text: content
        do s.text = random_text(rng);
        while (ltrim_space(s.text).rfind('{', 0) == 0 || ltrim_space(s.text).rfind("<|python", 0) == 0 ||
               std::string("<|python_tag|>").rfind(ltrim_space(s.text), 0) == 0);
        s.expected.content = s.text;
        return s;
    }
    s.text = ws(rng) + (coin(rng) ? "<|python_tag|>" : "");
    const size_t n = 1 + pick(rng, 3);
    for (size_t i = 0; i < n; ++i) {
        const std::string name = random_name(rng), args = random_arguments(rng);
        if (i) s.text += ws(rng) + ";" + ws(rng);
        s.text += "{\"name\": \"" + name + "\", \"parameters\": " + args + "}";
        add_call(s.expected, name, args);
    }
    if (coin(rng, 0.3)) {  // text after the calls: content from its first byte on
        std::string tail;
        do tail = random_text(rng);
        while (tail.empty() || is_space(tail[0]) || tail[0] == ';' || tail[0] == '{');
        s.text += ws(rng) + tail;
        s.expected.content = tail;
    }
    return s;
}

/// Prepends reasoning as `format` writes it (the calls in the content stay calls; markers in the thinking do not).
void add_reasoning(rng_t& rng, sample& s, std::optional<reasoning_format> format) {
    if (!format) return;
    const std::vector<std::string> forbid = {"<think>", "</think>"};
    std::string thinking = random_text(rng, 12, forbid);
    if (coin(rng, 0.3)) thinking += "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>[TOOL_CALLS]";
    if (*format == reasoning_format::qwen3) {
        if (coin(rng, 0.2)) return;  // no thinking: all content (already so unless it starts with "<think")
        s.text = "<think>" + thinking + "</think>" + s.text;
    } else {
        if (coin(rng, 0.1)) {  // never closed: all reasoning, no calls
            s.text = "x" + thinking + s.text;
            s.expected = {.content = "", .reasoning = s.text, .calls = {}};
            return;
        }
        s.text = (coin(rng) ? "<think>" : "x") + thinking + "</think>" + s.text;
        if (s.text[0] == 'x') thinking = "x" + thinking;
    }
    s.expected.reasoning = thinking;
}

/// The output streamed in random deltas (1 to 24 bytes, cut anywhere, UTF-8 sequences included).
parsed_output stream(const std::string& text, const output_parser_options& options, rng_t& rng,
                     std::vector<parse_event>* events = nullptr) {
    output_parser p(options);
    parsed_output out;
    for (size_t at = 0; at < text.size();) {
        const size_t n = std::min(text.size() - at, 1 + pick(rng, 24));
        for (const parse_event& e : p.feed(std::string_view(text).substr(at, n))) {
            add_events(out, e);
            if (events) events->push_back(e);
        }
        at += n;
    }
    for (const parse_event& e : p.finish()) {
        add_events(out, e);
        if (events) events->push_back(e);
    }
    return out;
}

std::string show(const parsed_output& p) {
    ojson calls = ojson::array();
    for (const tool_call& c : p.calls) calls.push_back({c.id, c.name, c.arguments});
    return ojson{{"content", p.content}, {"reasoning", p.reasoning}, {"calls", calls}}.dump(
        1, ' ', false, ojson::error_handler_t::replace);
}

void run_property(tool_call_format format, sample (*gen)(rng_t&), uint64_t seed) {
    rng_t rng(seed);
    constexpr int kOutputs = 1500;
    int with_calls = 0, with_reasoning = 0;
    for (int i = 0; i < kOutputs; ++i) {
        const std::optional<reasoning_format> reasoning = std::array<std::optional<reasoning_format>, 3>{
            std::nullopt, reasoning_format::qwen3, reasoning_format::deepseek_r1}[pick(rng, 3)];
        sample s = gen(rng);
        // Qwen3 without thinking: content that happens to start like <think> is still content (the generator
        // never writes the whole marker), so the expectation holds.
        add_reasoning(rng, s, reasoning);
        const output_parser_options options{.tools = format, .reasoning = reasoning, .make_id = {}};
        const parsed_output whole = output_parser::parse(s.text, options);
        ASSERT_EQ(show(whole), show(s.expected)) << "output " << i << ": " << ojson(s.text).dump();
        std::vector<parse_event> events;
        const parsed_output streamed = stream(s.text, options, rng, &events);
        ASSERT_EQ(show(streamed), show(whole)) << "output " << i << ": " << ojson(s.text).dump();
        // Each call's start comes before its arguments; ids are the whole parse's.
        std::vector<bool> started(whole.calls.size(), false);
        for (const parse_event& e : events) {
            if (e.kind == event_kind::call_start) started[e.call_index] = true;
            if (e.kind == event_kind::call_arguments) {
                ASSERT_TRUE(started[e.call_index]);
            }
        }
        // Cut anywhere (max_tokens): the stream still equals the whole parse of the cut text.
        const std::string cut = s.text.substr(0, pick(rng, s.text.size() + 1));
        ASSERT_EQ(show(stream(cut, options, rng)), show(output_parser::parse(cut, options)))
            << "cut output " << i << ": " << ojson(cut).dump();
        with_calls += !whole.calls.empty();
        with_reasoning += !whole.reasoning.empty();
    }
    // The generator exercises what it claims to.
    EXPECT_GT(with_calls, kOutputs / 3);
    EXPECT_GT(with_reasoning, kOutputs / 4);
}

TEST(OutputParserProperty, Hermes) { run_property(tool_call_format::hermes, hermes_sample, 1); }
TEST(OutputParserProperty, DeepSeekV3) { run_property(tool_call_format::deepseek_v3, deepseek_sample, 2); }
TEST(OutputParserProperty, Llama3Json) { run_property(tool_call_format::llama3_json, llama3_sample, 3); }
TEST(OutputParserProperty, Mistral) { run_property(tool_call_format::mistral, mistral_sample, 4); }

/// Random soup of markers, marker pieces, call headers and JSON fragments: mostly malformed calls of every kind.
/// No expectation of its own; the stream must equal the whole parse exactly, for every parser and reasoning mode.
TEST(OutputParserProperty, MalformedSoupStreamsAsItParses) {
    static const std::vector<std::string> kPieces = {"<tool_call>",
                                                     "</tool_call>",
                                                     "<tool_",
                                                     "</tool",
                                                     "<think>",
                                                     "</think>",
                                                     "<thi",
                                                     "[TOOL_CALLS]",
                                                     "[TOOL",
                                                     "<|python_tag|>",
                                                     "<｜tool▁calls▁begin｜>",
                                                     "<｜tool▁calls▁end｜>",
                                                     "<｜tool▁call▁begin｜>",
                                                     "<｜tool▁call▁end｜>",
                                                     "<｜tool▁sep｜>",
                                                     "<｜tool▁",
                                                     "function",
                                                     "\n```json\n",
                                                     "\n```",
                                                     "```",
                                                     "{\"name\": \"f\", \"arguments\": {",
                                                     "{\"name\": \"g\", \"parameters\": ",
                                                     "{\"arguments\": ",
                                                     "{",
                                                     "}",
                                                     "[",
                                                     "]",
                                                     "\"",
                                                     "\\",
                                                     "\\\"",
                                                     ":",
                                                     ",",
                                                     ";",
                                                     " ",
                                                     "\n",
                                                     "x",
                                                     "é",
                                                     "🙂",
                                                     "null",
                                                     "42",
                                                     "\"name\"",
                                                     "\"k\": \"v\""};
    rng_t rng(6);
    for (tool_call_format f : {tool_call_format::hermes, tool_call_format::deepseek_v3, tool_call_format::llama3_json,
                               tool_call_format::mistral}) {
        for (int i = 0; i < 2500; ++i) {
            std::string text;
            const size_t n = pick(rng, 40);
            for (size_t k = 0; k < n; ++k) text += kPieces[pick(rng, kPieces.size())];
            const std::optional<reasoning_format> reasoning = std::array<std::optional<reasoning_format>, 3>{
                std::nullopt, reasoning_format::qwen3, reasoning_format::deepseek_r1}[pick(rng, 3)];
            const output_parser_options options{.tools = f, .reasoning = reasoning, .make_id = {}};
            const parsed_output whole = output_parser::parse(text, options);
            ASSERT_EQ(show(stream(text, options, rng)), show(whole))
                << tool_call_format_name(f) << ": " << ojson(text).dump();
            // Nothing is lost: every byte is content, reasoning, a call's arguments, or layout and markers.
            size_t kept = whole.content.size() + whole.reasoning.size();
            for (const tool_call& c : whole.calls) kept += c.arguments.size();
            ASSERT_LE(kept, text.size() + 2 * whole.calls.size()) << ojson(text).dump();  // "{}" for no arguments
        }
    }
}

TEST(OutputParserProperty, ReasoningOnly) {
    rng_t rng(5);
    for (int i = 0; i < 1000; ++i) {
        const reasoning_format f = coin(rng) ? reasoning_format::qwen3 : reasoning_format::deepseek_r1;
        sample s;
        s.text = random_text(rng);
        s.expected.content = s.text;
        add_reasoning(rng, s, f);
        const output_parser_options options{.tools = std::nullopt, .reasoning = f, .make_id = {}};
        const parsed_output whole = output_parser::parse(s.text, options);
        ASSERT_EQ(show(whole), show(s.expected)) << ojson(s.text).dump();
        ASSERT_EQ(show(stream(s.text, options, rng)), show(whole)) << ojson(s.text).dump();
    }
}

}  // namespace
}  // namespace zmoe::tool_calls
