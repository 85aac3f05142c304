#pragma once
// UTF-8 helpers shared by the tokenizer and the incremental detokenizer. Validation and lossy conversion follow
// the Unicode "maximal subpart" rule, which is what Rust's String::from_utf8_lossy (and so Hugging Face
// `tokenizers`' decode) implements: every maximal invalid subsequence becomes one U+FFFD.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zmoe::utf8 {

/// Byte offset of the first byte that does not begin a complete, valid UTF-8 sequence;
/// std::string_view::npos when `s` is entirely valid UTF-8.
size_t find_invalid(std::string_view s);

/// Decodes the code point starting at s[i] and advances i past it. `s` must be valid UTF-8 at i.
inline char32_t decode(std::string_view s, size_t& i) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    if (b0 < 0x80) {
        ++i;
        return b0;
    }
    if (b0 < 0xE0) {
        char32_t cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3Fu);
        i += 2;
        return cp;
    }
    if (b0 < 0xF0) {
        char32_t cp = ((b0 & 0x0Fu) << 12) | ((static_cast<uint8_t>(s[i + 1]) & 0x3Fu) << 6) |
                      (static_cast<uint8_t>(s[i + 2]) & 0x3Fu);
        i += 3;
        return cp;
    }
    char32_t cp = ((b0 & 0x07u) << 18) | ((static_cast<uint8_t>(s[i + 1]) & 0x3Fu) << 12) |
                  ((static_cast<uint8_t>(s[i + 2]) & 0x3Fu) << 6) | (static_cast<uint8_t>(s[i + 3]) & 0x3Fu);
    i += 4;
    return cp;
}

/// Length in bytes of the sequence whose first byte is `lead` (1 for ASCII and for invalid lead bytes).
inline size_t sequence_length(uint8_t lead) {
    if (lead < 0xC0) return 1;
    if (lead < 0xE0) return 2;
    if (lead < 0xF0) return 3;
    return 4;
}

/// Appends the UTF-8 encoding of code point `cp` (which must be a Unicode scalar value).
void append(std::string& out, char32_t cp);

/// Appends `bytes` to `out`, replacing each maximal invalid subsequence with U+FFFD (String::from_utf8_lossy).
void append_lossy(std::string& out, std::string_view bytes);

/// Number of bytes at the end of `bytes` (0 to 3) that form an incomplete but so far valid UTF-8 sequence, i.e.
/// bytes that later input could still complete. Everything before them decodes the same whatever follows.
size_t incomplete_tail(std::string_view bytes);

}  // namespace zmoe::utf8
