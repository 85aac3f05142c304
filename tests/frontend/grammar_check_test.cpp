// The frontend's check of structured-output constraints: what does not compile is refused with invalid_argument
// naming the problem; what compiled once is remembered by its canonical key.

#include "frontend/grammar_check.hpp"

#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"

namespace zmoe {
namespace {

std::string refusal(grammar_check& c, const structured_output& s) {
    try {
        c.check(s);
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "accepted: " << s.text;
    return {};
}

TEST(GrammarCheck, WhatCompilesIsAcceptedAndRemembered) {
    grammar_check c(2);
    c.check({});  // no constraint: nothing to check
    c.check({structured_kind::json_schema, R"({"type": "object", "properties": {"a": {"type": "integer"}}})"});
    EXPECT_EQ(c.num_remembered(), 1u);
    // The same schema spelled with other whitespace has the same canonical key.
    c.check({structured_kind::json_schema, R"({"type":"object","properties":{"a":{"type":"integer"}}})"});
    EXPECT_EQ(c.num_remembered(), 1u);
    c.check({structured_kind::regex, "[a-z]+"});
    c.check({structured_kind::choice, R"(["a", "b"])"});
    EXPECT_EQ(c.num_remembered(), 2u);  // the least recently used went
    c.check({structured_kind::json_object, ""});
    c.check({structured_kind::grammar, "root ::= \"x\" [0-9]+"});
}

TEST(GrammarCheck, WhatDoesNotCompileIsRefusedNamingTheProblem) {
    grammar_check c;
    const auto has = [](const std::string& message, const std::string& part) {
        return message.find(part) != std::string::npos;
    };
    std::string m = refusal(c, {structured_kind::json_schema, R"({"type": "object", "patternProperties": {}})"});
    EXPECT_TRUE(has(m, "structured output (json_schema)")) << m;
    EXPECT_TRUE(has(m, "patternProperties")) << m;
    m = refusal(c, {structured_kind::json_schema, "{not json"});
    EXPECT_TRUE(has(m, "not valid JSON")) << m;
    m = refusal(c, {structured_kind::regex, "(a"});
    EXPECT_TRUE(has(m, "structured output (regex)")) << m;
    m = refusal(c, {structured_kind::regex, "a(?=b)"});
    EXPECT_TRUE(has(m, "look")) << m;
    m = refusal(c, {structured_kind::choice, "[]"});
    EXPECT_TRUE(has(m, "empty")) << m;
    m = refusal(c, {structured_kind::grammar, "root ::= missing"});
    EXPECT_TRUE(has(m, "missing")) << m;
    EXPECT_EQ(c.num_remembered(), 0u);  // failures are not remembered
}

}  // namespace
}  // namespace zmoe
