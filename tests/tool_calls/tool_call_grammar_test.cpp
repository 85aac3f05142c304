// The grammars of tool_choice "required" / named, run through grammar/ (compile_ebnf and the matcher, byte by
// byte): random valid calls of every format (arguments generated from each schema, json.dumps' spelling) are
// accepted and parse back, with the format's parser, to the same names and arguments; calls that break the schema,
// name an unknown or other function, or come two where one is allowed are refused. And the other way round: random
// walks through the grammar's token masks (a small byte-level vocabulary, random choices, as random weights would
// sample) always end in outputs whose parse is one or more calls with a valid name and schema-valid arguments.

#include "tool_calls/tool_call_grammar.hpp"

#include <gtest/gtest.h>

#include "base/error.hpp"
#include "grammar/compiled_grammar.hpp"
#include "grammar/ebnf.hpp"
#include "grammar/grammar_matcher.hpp"
#include "tests/grammar/grammar_test_util.hpp"
#include "tool_calls/output_parser.hpp"

namespace zmoe::tool_calls {
namespace {

using ojson = nlohmann::ordered_json;
namespace gt = zmoe::grammar::testing;

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "minLength": 1, "maxLength": 12},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
      "days": {"type": "integer", "minimum": 1, "maximum": 14}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "book", "parameters": {"type": "object",
    "$defs": {"guest": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": ["integer", "null"]}},
                        "required": ["name", "age"]}},
    "properties": {"guests": {"type": "array", "items": {"$ref": "#/$defs/guest"}, "minItems": 1, "maxItems": 3},
                   "vip": {"type": "boolean"}, "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                   "price": {"type": "number", "nullable": true}},
    "required": ["guests", "vip"]}}},
  {"type": "function", "function": {"name": "now"}},
  {"type": "function", "function": {"name": "echo", "parameters": {"type": "object", "properties": {
    "payload": {}}, "required": ["payload"]}}}
])");

std::shared_ptr<const grammar::compiled_grammar> compile(const tool_call_grammar_request& r) {
    return std::make_shared<const grammar::compiled_grammar>(grammar::compile_ebnf(tool_call_ebnf(r)),
                                                             gt::small_info());
}

/// Byte by byte through the matcher; true when every byte fits and the grammar may end there.
bool accepts(const std::shared_ptr<const grammar::compiled_grammar>& g, const std::string& text) {
    grammar::grammar_matcher m(g);
    for (char c : text)
        if (!m.accept_bytes(std::string_view(&c, 1))) return false;
    return m.can_terminate();
}

ojson schema_of(const std::string& name) {
    for (const ojson& t : kTools)
        if (t["function"]["name"] == name)
            return t["function"].contains("parameters") ? t["function"]["parameters"]
                                                        : ojson::parse(
                                                              "{\"type\": "
                                                              "\"object\", "
                                                              "\"properties\": "
                                                              "{}}");
    return nullptr;
}

/// One call written as `format`'s template writes it.
std::string write_call(tool_call_format f, const std::string& name, const std::string& args) {
    switch (f) {
        case tool_call_format::hermes:
            return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>";
        case tool_call_format::deepseek_v3:
            return "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n" + args +
                   "\n```<｜tool▁call▁end｜>";
        case tool_call_format::llama3_json:
            return "{\"name\": \"" + name + "\", \"parameters\": " + args + "}";
        case tool_call_format::mistral:
            return "{\"name\": \"" + name + "\", \"arguments\": " + args + "}";
    }
    return {};
}

std::string write_calls(tool_call_format f, const std::vector<std::string>& calls) {
    const std::string sep = f == tool_call_format::hermes        ? "\n"
                            : f == tool_call_format::llama3_json ? "; "
                            : f == tool_call_format::mistral     ? ", "
                                                                 : "";
    std::string out;
    for (size_t i = 0; i < calls.size(); ++i) out += (i ? sep : "") + calls[i];
    if (f == tool_call_format::deepseek_v3) return "<｜tool▁calls▁begin｜>" + out + "<｜tool▁calls▁end｜>";
    if (f == tool_call_format::mistral) return "[TOOL_CALLS][" + out + "]";
    return out;
}

const std::vector<tool_call_format> kFormats = {tool_call_format::hermes, tool_call_format::deepseek_v3,
                                                tool_call_format::llama3_json, tool_call_format::mistral};
const std::vector<std::string> kNames = {"get_weather", "book", "now", "echo"};

TEST(ToolCallGrammar, ValidCallsAreAcceptedAndParseBack) {
    std::mt19937 rng(7);
    int checked = 0;
    for (tool_call_format f : kFormats) {
        for (bool parallel : {false, true}) {
            for (const std::string& only : {std::string(), std::string("book")}) {
                const auto g = compile({.format = f, .tools = kTools, .only_function = only, .parallel = parallel});
                for (int i = 0; i < 60; ++i) {
                    const size_t n = parallel ? 1 + rng() % 3 : 1;
                    std::vector<std::string> calls, names, args;
                    for (size_t k = 0; k < n; ++k) {
                        const std::string name = only.empty() ? kNames[rng() % kNames.size()] : only;
                        const ojson schema = schema_of(name);
                        const std::string a = gt::canonical(gt::generate(schema, schema, rng));
                        calls.push_back(write_call(f, name, a));
                        names.push_back(name);
                        args.push_back(a);
                    }
                    const std::string text = write_calls(f, calls);
                    ASSERT_TRUE(accepts(g, text)) << tool_call_format_name(f) << ": " << text;
                    const parsed_output p = output_parser::parse(text, {.tools = f, .reasoning = {}, .make_id = {}});
                    ASSERT_EQ(p.calls.size(), n) << text;
                    EXPECT_EQ(p.content, "");
                    for (size_t k = 0; k < n; ++k) {
                        EXPECT_EQ(p.calls[k].name, names[k]);
                        EXPECT_EQ(p.calls[k].arguments, args[k]);
                    }
                    ++checked;
                }
            }
        }
    }
    EXPECT_EQ(checked, 4 * 2 * 2 * 60);
}

TEST(ToolCallGrammar, InvalidCallsAreRefused) {
    for (tool_call_format f : kFormats) {
        const auto any = compile({.format = f, .tools = kTools, .only_function = {}, .parallel = false});
        const auto named = compile({.format = f, .tools = kTools, .only_function = "get_weather", .parallel = true});
        const std::string ok = write_call(f, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}");
        EXPECT_TRUE(accepts(any, write_calls(f, {ok})));
        EXPECT_TRUE(accepts(named, write_calls(f, {ok, ok})));
        for (const std::string& bad : {
                 write_call(f, "get_weather", "{\"city\": \"Paris\", \"unit\": \"kelvin\"}"),  // not in the enum
                 write_call(f, "get_weather", "{\"unit\": \"celsius\"}"),                      // required missing
                 write_call(f, "get_weather", "{\"city\": \"\"}"),                             // minLength
                 write_call(f, "get_weather", "{\"city\": \"Paris\", \"extra\": 1}"),          // another key
                 write_call(f, "get_weather", "{\"city\": 3}"),                                // wrong type
                 write_call(f, "get_weather", "{\"city\": \"P\", \"days\": 15}"),              // maximum
                 write_call(f, "get_weather", "{\"days\": 2, \"city\": \"P\"}"),               // out of order
                 write_call(f, "book", "{\"guests\": [], \"vip\": true}"),                     // minItems
                 write_call(f, "book", "{\"guests\": [{\"name\": \"a\"}], \"vip\": true}"),    // nested required
                 write_call(f, "launch", "{}"),                                                // unknown function
                 write_call(f, "now", "{\"x\": 1}"),                                           // no parameters
             }) {
            EXPECT_FALSE(accepts(any, write_calls(f, {bad}))) << tool_call_format_name(f) << ": " << bad;
        }
        EXPECT_FALSE(accepts(any, write_calls(f, {ok, ok}))) << "parallel off";
        EXPECT_FALSE(accepts(named, write_calls(f, {write_call(f, "now", "{}")}))) << "named: another function";
        EXPECT_FALSE(accepts(any, "")) << "at least one call";
        EXPECT_FALSE(accepts(any, "Sure! " + write_calls(f, {ok}))) << "no free text";
        const std::string whole = write_calls(f, {ok});
        EXPECT_FALSE(accepts(any, whole.substr(0, whole.size() - 1))) << "cut short";
    }
}

TEST(ToolCallGrammar, ThinkingMayComeFirst) {
    const std::string call = write_call(tool_call_format::hermes, "now", "{}");
    const auto qwen3 = compile({.format = tool_call_format::hermes,
                                .tools = kTools,
                                .only_function = {},
                                .parallel = true,
                                .reasoning = reasoning_format::qwen3});
    EXPECT_TRUE(accepts(qwen3, call));
    EXPECT_TRUE(accepts(qwen3, "<think>\nI should call now.\n</think>\n\n" + call));
    EXPECT_FALSE(accepts(qwen3, "<think>\nhm\n</think>\n\nno call"));
    const auto r1 = compile({.format = tool_call_format::deepseek_v3,
                             .tools = kTools,
                             .only_function = {},
                             .parallel = true,
                             .reasoning = reasoning_format::deepseek_r1});
    const std::string r1_call =
        write_calls(tool_call_format::deepseek_v3, {write_call(tool_call_format::deepseek_v3, "now", "{}")});
    EXPECT_TRUE(accepts(r1, "Let me think.</think>\n\n" + r1_call));
    EXPECT_FALSE(accepts(r1, r1_call)) << "R1's output starts inside the thinking";
}

TEST(ToolCallGrammar, RandomWalksAlwaysYieldValidCalls) {
    std::mt19937 rng(3);
    const auto info = gt::small_info();
    std::vector<uint32_t> mask(info->bitmask_words());
    int walks = 0;
    for (tool_call_format f : kFormats) {
        for (bool parallel : {false, true}) {
            const auto g = compile({.format = f, .tools = kTools, .only_function = {}, .parallel = parallel});
            for (int w = 0; w < 40; ++w) {
                grammar::grammar_matcher m(g);
                std::string text;
                bool ended = false;
                for (int step = 0; step < 4000 && !ended; ++step) {
                    m.fill_next_token_bitmask(mask.data());
                    std::vector<int32_t> allowed;
                    for (int32_t id = 0; id < info->vocab_size(); ++id)
                        if (mask[static_cast<size_t>(id) / 32] >> (id % 32) & 1) allowed.push_back(id);
                    ASSERT_FALSE(allowed.empty());
                    // Random weights pick any allowed token; end as soon as allowed half of the time, so walks stay
                    // short, and steer away from deep nesting late in a long walk.
                    int32_t id = allowed[rng() % allowed.size()];
                    const bool can_stop = m.can_terminate();
                    if (can_stop && rng() % 2 == 0) id = info->stop_ids()[0];
                    if (id == info->stop_ids()[0]) {
                        ended = true;
                        break;
                    }
                    ASSERT_TRUE(m.accept_token(id));
                    text += info->token_bytes(id);
                }
                if (!ended) continue;  // too long: not judged
                ++walks;
                const parsed_output p = output_parser::parse(text, {.tools = f, .reasoning = {}, .make_id = {}});
                ASSERT_FALSE(p.calls.empty()) << text;
                if (!parallel) {
                    ASSERT_EQ(p.calls.size(), 1u) << text;
                }
                EXPECT_EQ(p.content, "") << text;
                for (const tool_call& c : p.calls) {
                    const ojson schema = schema_of(c.name);
                    ASSERT_FALSE(schema.is_null()) << c.name;
                    const ojson args = ojson::parse(c.arguments);
                    EXPECT_TRUE(gt::validate(args, schema, schema)) << c.name << " " << c.arguments;
                }
            }
        }
    }
    EXPECT_GT(walks, 100);
}

// Integer bounds: every candidate around each bound (and random ones) is accepted exactly when it is in range.
TEST(ToolCallGrammar, IntegerBoundsAreExact) {
    struct range {
        std::string keywords;
        int64_t lo, hi;
    };
    constexpr int64_t kMax = 9999999999999999;
    const std::vector<range> ranges = {
        {R"("minimum": 0, "maximum": 0)", 0, 0},
        {R"("minimum": -5, "maximum": 5)", -5, 5},
        {R"("minimum": 7, "maximum": 1234)", 7, 1234},
        {R"("minimum": -1000, "maximum": -37)", -1000, -37},
        {R"("minimum": 1)", 1, kMax},
        {R"("maximum": -1)", -kMax, -1},
        {R"("exclusiveMinimum": 0, "exclusiveMaximum": 10)", 1, 9},
        {R"("minimum": 2.5, "maximum": 99.5)", 3, 99},
        {R"("minimum": -999999999999, "maximum": 123456789012345)", -999999999999, 123456789012345},
    };
    std::mt19937_64 rng(9);
    for (const range& r : ranges) {
        const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": )"
                                         R"({"type": "object", "properties": {"n": {"type": "integer", )" +
                                         r.keywords + R"(}}, "required": ["n"]}}}])");
        const auto g =
            compile({.format = tool_call_format::hermes, .tools = tools, .only_function = {}, .parallel = false});
        std::vector<int64_t> candidates = {0, 1, -1, 9, 10, 99, 100, -10, -100, kMax, -kMax};
        for (int64_t b : {r.lo, r.hi})
            for (int64_t d = -12; d <= 12; ++d)
                if (std::abs(b) < kMax - 20) candidates.push_back(b + d);
        for (int i = 0; i < 300; ++i) {
            const int64_t span = std::min<int64_t>(r.hi - r.lo, 1'000'000'000'000);
            candidates.push_back(r.lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(span + 1)));
            candidates.push_back(static_cast<int64_t>(rng() % 2000001) - 1000000);
        }
        for (int64_t x : candidates) {
            const std::string text =
                "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": " + std::to_string(x) + "}}\n</tool_call>";
            EXPECT_EQ(accepts(g, text), x >= r.lo && x <= r.hi) << r.keywords << ": " << x;
        }
        // Leading zeros and "-0" are not JSON integers.
        EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 007}}\n</tool_call>"));
        EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": -0}}\n</tool_call>"));
    }
}

TEST(ToolCallGrammar, RefusesWhatItCannotConstrainByName) {
    const auto message = [](const std::string& schema) {
        try {
            tool_call_ebnf({.format = tool_call_format::hermes,
                            .tools = ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": )" +
                                                  schema + "}}]"),
                            .only_function = {},
                            .parallel = true});
        } catch (const zmoe::error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(message(R"({"type": "string", "pattern": "a+"})").find("'pattern'"), std::string::npos);
    EXPECT_NE(message(R"({"type": "number", "minimum": 1})").find("'minimum'"), std::string::npos);
    EXPECT_NE(message(R"({"type": "integer", "minimum": 3, "maximum": 2})").find("no integer"), std::string::npos);
    EXPECT_NE(message(R"({"$ref": "#/$defs/missing"})").find("does not resolve"), std::string::npos);
    EXPECT_NE(message(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})").find("'required'"),
              std::string::npos);
    EXPECT_EQ(message(R"({"type": "object"})"), "accepted");  // any object
    EXPECT_THROW(
        tool_call_ebnf(
            {.format = tool_call_format::hermes, .tools = kTools, .only_function = "launch", .parallel = true}),
        zmoe::error);
}

}  // namespace
}  // namespace zmoe::tool_calls
