#include "base/overloaded.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <variant>

namespace zmoe {
namespace {

struct ping {
    int n = 0;
};
struct text {
    std::string s;
};
struct owned {
    std::unique_ptr<int> p;
};
using message = std::variant<ping, text, owned>;

TEST(VisitExhaustive, CallsTheHandlerOfTheHeldAlternative) {
    std::string seen;
    const auto run = [&](message m) {
        visit_exhaustive(
            std::move(m), [&](const ping& p) { seen += "ping " + std::to_string(p.n) + ";"; },
            [&](text&& t) { seen += "text " + t.s + ";"; },
            [&](owned&& o) { seen += "owned " + std::to_string(*o.p); });
    };
    run(ping{3});
    run(text{"hi"});
    run(owned{std::make_unique<int>(7)});
    EXPECT_EQ(seen, "ping 3;text hi;owned 7");
}

TEST(VisitExhaustive, MovesOutOfAnRvalueAndReturnsTheHandlersValue) {
    message m = owned{std::make_unique<int>(5)};
    std::unique_ptr<int> taken;
    const int r = visit_exhaustive(
        std::move(m), [](const ping&) { return 1; }, [](const text&) { return 2; },
        [&](owned&& o) {
            taken = std::move(o.p);
            return 3;
        });
    EXPECT_EQ(r, 3);
    ASSERT_NE(taken, nullptr);
    EXPECT_EQ(*taken, 5);
}

TEST(VisitExhaustive, WorksOnAConstVariant) {
    const message m = text{"x"};
    const auto n = visit_exhaustive(
        m, [](const ping&) { return size_t{0}; }, [](const text& t) { return t.s.size(); },
        [](const owned&) { return size_t{9}; });
    EXPECT_EQ(n, 1u);
}

}  // namespace
}  // namespace zmoe
