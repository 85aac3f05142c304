#include "engine_core/block_hash.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <vector>

namespace zmoe {
namespace {

TEST(BlockHash, SipHashMatchesThePapersTestVector) {
    // SipHash-2-4, key 00 01 .. 0f, message 00 01 .. 0e (Aumasson and Bernstein, appendix A).
    uint64_t k0 = 0;
    uint64_t k1 = 0;
    for (int i = 7; i >= 0; --i) {
        k0 = (k0 << 8) | static_cast<uint64_t>(i);
        k1 = (k1 << 8) | static_cast<uint64_t>(8 + i);
    }
    std::vector<uint8_t> msg(15);
    std::iota(msg.begin(), msg.end(), uint8_t{0});
    EXPECT_EQ(siphash24_64(k0, k1, msg), 0xa129ca6149be45e5ull);
    EXPECT_EQ(siphash24_64(k0, k1, {}), 0x726fdb47dd0e0e31ull);
    // The 128-bit variant, the reference implementation's vectors for messages of 0 and 1 bytes (00), output bytes
    // a3 81 7f 04 ba 25 a8 e6 6d f6 72 14 c7 55 02 93 and da 87 c1 d8 6b 99 af 44 34 76 59 11 9b 22 fc 45.
    EXPECT_EQ(siphash24_128(k0, k1, {}), (block_hash{.lo = 0xe6a825ba047f81a3ull, .hi = 0x930255c71472f66dull}));
    const std::vector<uint8_t> zero{0};
    EXPECT_EQ(siphash24_128(k0, k1, zero), (block_hash{.lo = 0x44af996bd8c187daull, .hi = 0x45fc229b11597634ull}));
}

TEST(BlockHash, ABlocksHashIsSipHashOfParentAndIdsAsBytes) {
    // next() absorbs words directly; it must equal SipHash-2-4-128 of the documented byte layout (even and odd
    // numbers of ids: the tail word differs).
    const uint64_t k0 = 0x0706050403020100ull, k1 = 0x0f0e0d0c0b0a0908ull;
    const block_hasher h(k0, k1);
    const block_hash parent{.lo = 0x1122334455667788ull, .hi = 0x99aabbccddeeff00ull};
    for (const size_t n : {size_t{16}, size_t{5}, size_t{1}}) {
        std::vector<int32_t> ids(n);
        for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(1000003 * (i + 1)) ^ (i % 2 ? -1 : 0);
        std::vector<uint8_t> bytes;
        for (const uint64_t w : {parent.lo, parent.hi})
            for (int b = 0; b < 8; ++b) bytes.push_back(static_cast<uint8_t>(w >> (8 * b)));
        for (const int32_t id : ids)
            for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<uint8_t>(static_cast<uint32_t>(id) >> (8 * b)));
        EXPECT_EQ(h.next(parent, ids), siphash24_128(k0, k1, bytes)) << n << " ids";
    }
}

TEST(BlockHash, ChainDependsOnTokensParentAndSalt) {
    const block_hasher h(1, 2);
    const std::vector<int32_t> a{1, 2, 3, 4};
    const std::vector<int32_t> b{1, 2, 3, 5};
    EXPECT_EQ(h.next({}, a), h.next({}, a));
    EXPECT_NE(h.next({}, a), h.next({}, b));
    const block_hash pa = h.next({}, a);
    EXPECT_NE(h.next(pa, a), h.next({}, a));  // same tokens after another prefix
    EXPECT_EQ(h.root(""), block_hash{});
    EXPECT_NE(h.root("tenant-1"), h.root("tenant-2"));
    EXPECT_NE(h.next(h.root("tenant-1"), a), h.next({}, a));
    // Another key gives other hashes (each run draws its own).
    EXPECT_NE(block_hasher(3, 4).next({}, a), h.next({}, a));
}

TEST(BlockHash, ExtendHashesFullBlocksOnlyAndResumes) {
    const block_hasher h(7, 9);
    std::vector<int32_t> tokens(10);
    std::iota(tokens.begin(), tokens.end(), 100);
    std::vector<block_hash> chain;
    h.extend(chain, {}, tokens, 4);
    ASSERT_EQ(chain.size(), 2u);  // the last 2 tokens make no full block
    EXPECT_EQ(chain[0], h.next({}, std::span<const int32_t>(tokens).subspan(0, 4)));
    EXPECT_EQ(chain[1], h.next(chain[0], std::span<const int32_t>(tokens).subspan(4, 4)));
    std::vector<block_hash> capped;
    h.extend(capped, {}, tokens, 4, 1);
    EXPECT_EQ(capped.size(), 1u);
    tokens.push_back(110);
    tokens.push_back(111);
    h.extend(capped, {}, tokens, 4);  // resumes from the first block
    ASSERT_EQ(capped.size(), 3u);
    EXPECT_EQ(capped[1], chain[1]);
    std::set<std::pair<uint64_t, uint64_t>> distinct;
    for (const auto& c : capped) distinct.insert({c.lo, c.hi});
    EXPECT_EQ(distinct.size(), 3u);
}

}  // namespace
}  // namespace zmoe
