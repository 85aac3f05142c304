// zmoe::median (base/stats.hpp): the upper middle of the sorted values, whatever their order; 0 when empty.

#include "base/stats.hpp"

#include <gtest/gtest.h>

namespace zmoe {
namespace {

TEST(Stats, MedianOfAnOddCountIsTheMiddleValue) {
    EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
    EXPECT_EQ(median({5.5}), 5.5);
    EXPECT_EQ(median({9.0, -1.0, 4.0, 4.0, 7.0}), 4.0);
}

TEST(Stats, MedianOfAnEvenCountIsTheUpperMiddleValue) {
    EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 3.0);
    EXPECT_EQ(median({2.0, 1.0}), 2.0);
}

TEST(Stats, MedianOfNothingIsZero) { EXPECT_EQ(median({}), 0.0); }

TEST(Stats, MedianDoesNotDependOnTheOrder) {
    std::vector<double> v{0.31, 0.29, 0.35, 0.30, 0.33, 0.28};
    const double m = median(v);
    std::sort(v.begin(), v.end());
    EXPECT_EQ(m, v[v.size() / 2]);
    std::reverse(v.begin(), v.end());
    EXPECT_EQ(median(v), m);
}

}  // namespace
}  // namespace zmoe
