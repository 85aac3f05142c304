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
