#include "frontend/utf8.hpp"

namespace zmoe::utf8 {
namespace {

// Valid range of the second byte of a sequence, which depends on the lead byte (excludes overlong forms,
// surrogates and code points past U+10FFFF). Later continuation bytes are always 0x80..0xBF.
struct byte_range {
    uint8_t lo, hi;
};

inline byte_range second_byte_range(uint8_t lead) {
    switch (lead) {
        case 0xE0:
            return {0xA0, 0xBF};
        case 0xED:
            return {0x80, 0x9F};
        case 0xF0:
            return {0x90, 0xBF};
        case 0xF4:
            return {0x80, 0x8F};
        default:
            return {0x80, 0xBF};
    }
}

inline bool is_lead(uint8_t b) { return b >= 0xC2 && b <= 0xF4; }

// Length of the valid sequence at s[i] (> 0), or, as a negative number, the length of the maximal invalid
// subpart starting there (which is also what a truncated sequence at the end of `s` counts as).
inline ptrdiff_t scan_one(std::string_view s, size_t i) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    if (b0 < 0x80) return 1;
    if (!is_lead(b0)) return -1;
    const size_t width = sequence_length(b0);
    const byte_range r = second_byte_range(b0);
    size_t k = 1;
    for (; k < width; ++k) {
        if (i + k >= s.size()) return -static_cast<ptrdiff_t>(k);
        const auto b = static_cast<uint8_t>(s[i + k]);
        const uint8_t lo = k == 1 ? r.lo : 0x80, hi = k == 1 ? r.hi : 0xBF;
        if (b < lo || b > hi) return -static_cast<ptrdiff_t>(k);
    }
    return static_cast<ptrdiff_t>(width);
}

}  // namespace

size_t find_invalid(std::string_view s) {
    size_t i = 0;
    const size_t n = s.size();
    while (i < n) {
        // ASCII runs dominate real prompts: skip them eight bytes at a time.
        while (i + 8 <= n) {
            uint64_t w;
            __builtin_memcpy(&w, s.data() + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        const ptrdiff_t len = scan_one(s, i);
        if (len < 0) return i;
        i += static_cast<size_t>(len);
    }
    return std::string_view::npos;
}

void append(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

void append_lossy(std::string& out, std::string_view bytes) {
    static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
    size_t i = 0, run_start = 0;
    const size_t n = bytes.size();
    while (i < n) {
        const ptrdiff_t len = scan_one(bytes, i);
        if (len > 0) {
            i += static_cast<size_t>(len);
            continue;
        }
        out.append(bytes.substr(run_start, i - run_start));
        out.append(kReplacement);
        i += static_cast<size_t>(-len);
        run_start = i;
    }
    out.append(bytes.substr(run_start));
}

size_t incomplete_tail(std::string_view bytes) {
    const size_t n = bytes.size();
    // A lead byte is never a continuation byte, so the last lead byte within reach starts the only candidate.
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const auto b = static_cast<uint8_t>(bytes[n - back]);
        if (b < 0x80) return 0;
        if (b < 0xC0) continue;  // continuation byte: keep looking for its lead
        if (!is_lead(b) || sequence_length(b) <= back) return 0;
        const ptrdiff_t len = scan_one(bytes, n - back);
        // A truncated-but-valid prefix reports exactly the bytes it had; anything else is final already.
        return len == -static_cast<ptrdiff_t>(back) ? back : 0;
    }
    return 0;
}

}  // namespace zmoe::utf8
