#include "engine_core/kv_block_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "base/error.hpp"

namespace zmoe {
namespace {

TEST(KvBlockPool, HandsOutDistinctBlocksUntilEmpty) {
    kv_block_pool pool(8, 16);
    EXPECT_EQ(pool.num_free(), 8);
    auto a = pool.block_alloc(5);
    ASSERT_TRUE(a.has_value());
    auto b = pool.block_alloc(3);
    ASSERT_TRUE(b.has_value());
    std::set<int32_t> ids(a->begin(), a->end());
    ids.insert(b->begin(), b->end());
    EXPECT_EQ(ids.size(), 8u);
    EXPECT_EQ(*ids.begin(), 0);
    EXPECT_EQ(*ids.rbegin(), 7);
    EXPECT_EQ(pool.num_free(), 0);
    EXPECT_EQ(pool.num_used(), 8);
}

TEST(KvBlockPool, AllocationIsAllOrNothing) {
    kv_block_pool pool(4, 16);
    ASSERT_TRUE(pool.block_alloc(3).has_value());
    EXPECT_FALSE(pool.block_alloc(2).has_value());
    EXPECT_EQ(pool.num_free(), 1);
    std::vector<int32_t> out{42};
    EXPECT_FALSE(pool.block_alloc_into(2, out));
    EXPECT_EQ(out, std::vector<int32_t>{42});
    EXPECT_TRUE(pool.block_alloc_into(1, out));
    EXPECT_EQ(out.size(), 2u);
    EXPECT_TRUE(pool.block_alloc(0).has_value());
}

TEST(KvBlockPool, ReusesFreedBlocksLastInFirstOut) {
    kv_block_pool pool(6, 4);
    auto a = pool.block_alloc(6).value();
    pool.block_free(std::vector<int32_t>{a[1], a[4]});
    EXPECT_EQ(pool.num_free(), 2);
    auto b = pool.block_alloc(1).value();
    EXPECT_EQ(b[0], a[4]);  // freed last, handed out first
    auto c = pool.block_alloc(1).value();
    EXPECT_EQ(c[0], a[1]);
    EXPECT_EQ(pool.num_free(), 0);
}

TEST(KvBlockPool, BlocksForTokensRoundsUp) {
    kv_block_pool pool(1, 16);
    EXPECT_EQ(pool.blocks_for_tokens(0), 0);
    EXPECT_EQ(pool.blocks_for_tokens(1), 1);
    EXPECT_EQ(pool.blocks_for_tokens(16), 1);
    EXPECT_EQ(pool.blocks_for_tokens(17), 2);
}

TEST(KvBlockPool, RejectsBadConfiguration) {
    EXPECT_THROW(kv_block_pool(-1, 16), error);
    try {
        kv_block_pool pool(4, 0);
        FAIL() << "block_size 0 accepted";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("block_size"), std::string::npos);
    }
}

TEST(KvBlockPoolDeathTest, DoubleFreeIsABug) {
    kv_block_pool pool(2, 16);
    auto a = pool.block_alloc(1).value();
    pool.block_free(a);
    EXPECT_DEATH(pool.block_free(a), "not allocated");
}

}  // namespace
}  // namespace zmoe

namespace zmoe {
namespace {

block_hash hash_of(uint64_t v) { return block_hash{.lo = v, .hi = ~v}; }

TEST(KvBlockPool, SharedBlocksAreFreedByTheirLastUser) {
    kv_block_pool pool(4, 4);
    auto a = pool.block_alloc(2).value();
    pool.block_share(a);
    EXPECT_EQ(pool.ref_count(a[0]), 2);
    EXPECT_EQ(pool.num_free(), 2);
    pool.block_free(a);
    EXPECT_EQ(pool.ref_count(a[0]), 1);
    EXPECT_EQ(pool.num_free(), 2);
    pool.block_free(a);
    EXPECT_EQ(pool.num_free(), 4);
}

TEST(KvBlockPool, PublishedBlocksStayFindableUntilEvicted) {
    kv_block_pool pool(3, 4);
    auto a = pool.block_alloc(2).value();
    EXPECT_TRUE(pool.block_publish(a[0], hash_of(10)));
    EXPECT_FALSE(pool.block_publish(a[0], hash_of(11)));  // already has a hash
    EXPECT_FALSE(pool.block_publish(a[1], hash_of(10)));  // hash already held by another block
    EXPECT_TRUE(pool.block_publish(a[1], hash_of(11)));
    EXPECT_EQ(pool.num_cached_prefix(std::vector<block_hash>{hash_of(10), hash_of(11), hash_of(12)}), 2);
    EXPECT_EQ(pool.num_cached_prefix(std::vector<block_hash>{hash_of(11)}), 1);
    EXPECT_EQ(pool.num_cached_prefix(std::vector<block_hash>{hash_of(12), hash_of(10)}), 0);
    pool.block_free(a);
    EXPECT_EQ(pool.num_free(), 3);
    EXPECT_EQ(pool.block_find(hash_of(10)), a[0]);
    // Reusing a cached block: it leaves the free queue, keeps its hash.
    pool.block_share(std::vector<int32_t>{a[0]});
    EXPECT_EQ(pool.num_free(), 2);
    EXPECT_EQ(pool.num_free_among(std::vector<int32_t>{a[0], a[1]}), 1);
    pool.block_free(std::vector<int32_t>{a[0]});
    // The never-cached block goes first, then the cached ones (least recently freed first).
    auto b = pool.block_alloc(1).value();
    EXPECT_NE(b[0], a[0]);
    EXPECT_NE(b[0], a[1]);
    EXPECT_EQ(pool.num_evicted(), 0u);
    auto c = pool.block_alloc(1).value();
    EXPECT_EQ(c[0], a[1]);  // freed before a[0]'s second release: least recently used
    EXPECT_EQ(pool.block_find(hash_of(11)), -1);
    EXPECT_EQ(pool.block_find(hash_of(10)), a[0]);
    EXPECT_EQ(pool.num_evicted(), 1u);
    EXPECT_EQ(pool.num_cached(), 1);
}

TEST(KvBlockPool, ASequencesLastCachedBlockIsEvictedFirst) {
    kv_block_pool pool(4, 4);
    auto a = pool.block_alloc(4).value();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(pool.block_publish(a[i], hash_of(100 + i)));
    pool.block_free(a);  // freed as one table: its deepest block goes first
    for (size_t i = a.size(); i-- > 0;) {
        auto b = pool.block_alloc(1).value();
        EXPECT_EQ(b[0], a[i]);
        // The prefix up to the evicted block is still whole.
        EXPECT_EQ(
            pool.num_cached_prefix(std::vector<block_hash>{hash_of(100), hash_of(101), hash_of(102), hash_of(103)}),
            static_cast<int32_t>(i));
    }
}

}  // namespace
}  // namespace zmoe
