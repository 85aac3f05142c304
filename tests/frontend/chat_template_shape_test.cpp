// The message shape a chat template reads, found in its syntax (frontend/chat_template_shape.hpp).

#include "frontend/chat_template_shape.hpp"

#include <gtest/gtest.h>

#include <string>

#include "frontend/jinja_template.hpp"

namespace zmoe {
namespace {

chat_message_shape shape_of(const std::string& source) {
    return detect_message_shape(jinja::jinja_template(source).statements());
}

TEST(ChatTemplateShape, ContentFormatIsOpenAIOnlyForALoopOverAMessagesContent) {
    EXPECT_EQ(shape_of("{% for m in messages %}{{ m['content'] }}{% endfor %}").content, chat_content_format::string);
    EXPECT_EQ(
        shape_of("{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}").content,
        chat_content_format::openai);
    EXPECT_EQ(shape_of("{% for m in messages %}{% for p in m.content | reverse %}{% endfor %}{% endfor %}").content,
              chat_content_format::openai);
    // The messages through a variable set from a slice of them, the content through a slice.
    EXPECT_EQ(shape_of("{% set rest = messages[1:] %}{% set again = rest %}{% for m in again %}"
                       "{% for p in m.content[1:] %}{% endfor %}{% endfor %}")
                  .content,
              chat_content_format::openai);
    // messages[0] is not a messages variable (vLLM's rule), nor is a loop over something else.
    EXPECT_EQ(shape_of("{% set first = messages[0] %}{% for p in first.content %}{% endfor %}").content,
              chat_content_format::string);
    EXPECT_EQ(shape_of("{% for m in tools %}{% for p in m.content %}{% endfor %}{% endfor %}").content,
              chat_content_format::string);
    // A macro taking the content as a parameter is not seen (as in vLLM).
    EXPECT_EQ(shape_of("{% macro r(c) %}{% for p in c %}{% endfor %}{% endmacro %}"
                       "{% for m in messages %}{{ r(m.content) }}{% endfor %}")
                  .content,
              chat_content_format::string);
    // Inside a macro body, an if and a loop's else: still found.
    EXPECT_EQ(shape_of("{% macro r() %}{% for m in messages %}{% if m %}{% for p in m['content'] %}{% endfor %}"
                       "{% endif %}{% endfor %}{% endmacro %}")
                  .content,
              chat_content_format::openai);
}

TEST(ChatTemplateShape, NullContentIsKeptWhenTheTemplateTestsItForNone) {
    EXPECT_TRUE(shape_of("{% for m in messages %}{% if m['content'] is none %}x{% endif %}{% endfor %}").null_content);
    EXPECT_TRUE(shape_of("{% for m in messages %}{{ 1 if m.content is not none }}{% endfor %}").null_content);
    EXPECT_FALSE(shape_of("{% for m in messages %}{% if m.content is string %}x{% endif %}{% endfor %}").null_content);
    EXPECT_FALSE(shape_of("{% for m in messages %}{% if m.reasoning is none %}x{% endif %}{% endfor %}").null_content);
}

TEST(ChatTemplateShape, ArgumentsStayTextWhenTheTemplateConcatenatesThem) {
    EXPECT_TRUE(shape_of("{% for m in messages %}{% for t in m.tool_calls %}{{ 'a' + t['function']['arguments'] }}"
                         "{% endfor %}{% endfor %}")
                    .string_arguments);
    EXPECT_TRUE(shape_of("{{ x.arguments ~ '!' }}").string_arguments);
    EXPECT_TRUE(shape_of("{{ 'a' ~ 'b' ~ x.arguments }}").string_arguments);
    // A filter binds tighter than +: `'a' + x.arguments | tojson` concatenates tojson's text.
    EXPECT_FALSE(shape_of("{{ 'a' + x.arguments | tojson }}").string_arguments);
    EXPECT_FALSE(shape_of("{% for k, v in x.arguments | items %}{{ k }}{% endfor %}").string_arguments);
}

}  // namespace
}  // namespace zmoe
