#pragma once
// GPT-2's byte-level alphabet: every byte 0..255 is spelled as one printable code point so that BPE vocabularies
// can be stored as text. Printable Latin-1 bytes stand for themselves; the other 68 bytes map to U+0100 upwards
// in byte order (so the space 0x20 is spelled U+0120 'Ġ'). zmoe encodes on raw bytes and converts the vocabulary
// once at load time, so the alphabet only matters when reading tokenizer.json.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zmoe::byte_level {

/// The code point that spells byte `b`.
char32_t byte_to_char(uint8_t b);

/// The byte spelled by code point `cp`, or -1 when `cp` is not in the alphabet.
int char_to_byte(char32_t cp);

/// Raw bytes of a token spelled in the byte-level alphabet; std::nullopt when a character is outside it (such a
/// token can never come out of byte-level BPE). `token` must be valid UTF-8.
std::optional<std::string> to_bytes(std::string_view token);

/// Spells raw bytes in the byte-level alphabet (the inverse of to_bytes).
std::string to_chars(std::string_view bytes);

}  // namespace zmoe::byte_level
