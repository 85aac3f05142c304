#include "frontend/byte_level.hpp"

#include <array>

#include "frontend/utf8.hpp"

namespace zmoe::byte_level {
namespace {

struct tables {
    std::array<char32_t, 256> to_char{};
    std::array<int16_t, 324> to_byte{};  // indexed by code point; the alphabet ends below U+0144

    tables() {
        to_byte.fill(-1);
        int next = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
            to_char[b] = cp;
            to_byte[cp] = static_cast<int16_t>(b);
        }
    }
};

const tables& get_tables() {
    static const tables t;
    return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return get_tables().to_char[b]; }

int char_to_byte(char32_t cp) {
    const auto& t = get_tables();
    return cp < t.to_byte.size() ? t.to_byte[cp] : -1;
}

std::optional<std::string> to_bytes(std::string_view token) {
    std::string out;
    out.reserve(token.size());
    size_t i = 0;
    while (i < token.size()) {
        const int b = char_to_byte(utf8::decode(token, i));
        if (b < 0) return std::nullopt;
        out.push_back(static_cast<char>(b));
    }
    return out;
}

std::string to_chars(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) utf8::append(out, byte_to_char(static_cast<uint8_t>(c)));
    return out;
}

}  // namespace zmoe::byte_level
