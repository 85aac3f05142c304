#include "frontend/byte_level.hpp"

#include <gtest/gtest.h>

namespace zmoe {
namespace {

TEST(ByteLevel, KnownCharacters) {
    EXPECT_EQ(byte_level::byte_to_char(' '), char32_t{0x120});   // 'Ġ'
    EXPECT_EQ(byte_level::byte_to_char('\n'), char32_t{0x10A});  // 'Ċ'
    EXPECT_EQ(byte_level::byte_to_char('A'), char32_t{'A'});
    EXPECT_EQ(byte_level::byte_to_char(0xAD), char32_t{0x143});  // the last remapped byte
    EXPECT_EQ(byte_level::char_to_byte(0x120), ' ');
    EXPECT_EQ(byte_level::char_to_byte(0x4E2D), -1);
}

TEST(ByteLevel, AllBytesRoundTrip) {
    std::string all;
    for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
    const std::string chars = byte_level::to_chars(all);
    auto back = byte_level::to_bytes(chars);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, all);
    EXPECT_EQ(byte_level::to_bytes("\xC4\xA0hello"), std::optional<std::string>(" hello"));
    EXPECT_FALSE(byte_level::to_bytes("<\xEF\xBD\x9C>").has_value());  // fullwidth bar is not in the alphabet
}

}  // namespace
}  // namespace zmoe
