#include "engine_core/block_hash.hpp"

#include <algorithm>
#include <cstring>
#include <random>

namespace zmoe {

namespace {

constexpr uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct sip_state {
    uint64_t v0, v1, v2, v3;

    void round() {
        v0 += v1;
        v1 = rotl(v1, 13);
        v1 ^= v0;
        v0 = rotl(v0, 32);
        v2 += v3;
        v3 = rotl(v3, 16);
        v3 ^= v2;
        v0 += v3;
        v3 = rotl(v3, 21);
        v3 ^= v0;
        v2 += v1;
        v1 = rotl(v1, 17);
        v1 ^= v2;
        v2 = rotl(v2, 32);
    }
    void compress(uint64_t m) {
        v3 ^= m;
        round();
        round();
        v0 ^= m;
    }
    uint64_t finalize_word() {
        round();
        round();
        round();
        round();
        return v0 ^ v1 ^ v2 ^ v3;
    }
};

uint64_t load_le64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

// Initialisation and message compression, shared by both output widths; `wide` is the 128-bit variant's tweak.
sip_state absorb(uint64_t k0, uint64_t k1, std::span<const uint8_t> bytes, bool wide) {
    sip_state s{.v0 = k0 ^ 0x736f6d6570736575ull,
                .v1 = k1 ^ 0x646f72616e646f6dull,
                .v2 = k0 ^ 0x6c7967656e657261ull,
                .v3 = k1 ^ 0x7465646279746573ull};
    if (wide) s.v1 ^= 0xee;
    const size_t n = bytes.size();
    const size_t full = n / 8 * 8;
    for (size_t i = 0; i < full; i += 8) s.compress(load_le64(bytes.data() + i));
    uint64_t last = static_cast<uint64_t>(n & 0xff) << 56;
    for (size_t i = full; i < n; ++i) last |= static_cast<uint64_t>(bytes[i]) << (8 * (i - full));
    s.compress(last);
    return s;
}

}  // namespace

uint64_t siphash24_64(uint64_t k0, uint64_t k1, std::span<const uint8_t> bytes) {
    sip_state s = absorb(k0, k1, bytes, false);
    s.v2 ^= 0xff;
    return s.finalize_word();
}

block_hash siphash24_128(uint64_t k0, uint64_t k1, std::span<const uint8_t> bytes) {
    sip_state s = absorb(k0, k1, bytes, true);
    s.v2 ^= 0xee;
    block_hash h;
    h.lo = s.finalize_word();
    s.v1 ^= 0xdd;
    h.hi = s.finalize_word();
    return h;
}

block_hasher block_hasher::random() {
    std::random_device rd;
    auto word = [&] { return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd()); };
    const uint64_t k0 = word();
    return block_hasher(k0, word());
}

block_hash block_hasher::root(std::string_view cache_salt) const {
    if (cache_salt.empty()) return {};
    // A leading tag byte keeps a salt's root apart from any block's hash input (which starts with 16 parent bytes).
    std::vector<uint8_t> bytes(1 + cache_salt.size());
    bytes[0] = 's';
    std::memcpy(bytes.data() + 1, cache_salt.data(), cache_salt.size());
    return siphash24_128(k0_, k1_, bytes);
}

block_hash block_hasher::next(const block_hash& parent, std::span<const int32_t> block_tokens) const {
    // SipHash of the bytes [parent.lo, parent.hi, ids as little-endian int32] (the layout the 128-bit test against
    // siphash24_128 checks), absorbed a word at a time: two ids per word, no byte buffer.
    sip_state s{.v0 = k0_ ^ 0x736f6d6570736575ull,
                .v1 = k1_ ^ 0x646f72616e646f6dull ^ 0xee,
                .v2 = k0_ ^ 0x6c7967656e657261ull,
                .v3 = k1_ ^ 0x7465646279746573ull};
    s.compress(parent.lo);
    s.compress(parent.hi);
    const size_t n = block_tokens.size();
    size_t t = 0;
    for (; t + 2 <= n; t += 2) {
        s.compress(static_cast<uint64_t>(static_cast<uint32_t>(block_tokens[t])) |
                   (static_cast<uint64_t>(static_cast<uint32_t>(block_tokens[t + 1])) << 32));
    }
    const uint64_t num_bytes = 16 + 4 * static_cast<uint64_t>(n);
    uint64_t last = (num_bytes & 0xff) << 56;
    if (t < n) last |= static_cast<uint64_t>(static_cast<uint32_t>(block_tokens[t]));
    s.compress(last);
    s.v2 ^= 0xee;
    block_hash h;
    h.lo = s.finalize_word();
    s.v1 ^= 0xdd;
    h.hi = s.finalize_word();
    return h;
}

void block_hasher::extend(std::vector<block_hash>& hashes, const block_hash& root, std::span<const int32_t> tokens,
                          int32_t block_size, size_t max_blocks) const {
    const size_t bs = static_cast<size_t>(block_size);
    const size_t target = std::min(tokens.size() / bs, max_blocks);
    while (hashes.size() < target) {
        const size_t i = hashes.size();
        hashes.push_back(next(i == 0 ? root : hashes.back(), tokens.subspan(i * bs, bs)));
    }
}

}  // namespace zmoe
