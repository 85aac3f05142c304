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
