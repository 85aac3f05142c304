// launch_gather_rows against ref::gather_rows: a copy, so bit-exact.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct gather_rows_case {
    int32_t num_in, num_rows, hidden;
};

class GatherRows : public ::testing::TestWithParam<gather_rows_case> {};

TEST_P(GatherRows, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_in * 13 + c.num_rows * 3 + c.hidden);
    const auto in = random_bf16(size_t(c.num_in) * c.hidden, 3.f, rng);
    std::uniform_int_distribution<int32_t> pick(0, c.num_in - 1);
    std::vector<int32_t> rows(c.num_rows);
    for (auto& r : rows) r = pick(rng);  // repeats and any order, as the dispatch plan has
    auto d_in = upload_bf16(in);
    auto d_rows = upload(rows);
    device_buffer<bf16> d_out(size_t(c.num_rows) * c.hidden);
    d_out.poison();
    launch_gather_rows(
        {.in = d_in.get(), .rows = d_rows.get(), .out = d_out.get(), .num_rows = c.num_rows, .hidden = c.hidden},
        nullptr);
    sync_and_check();
    std::vector<float> want(size_t(c.num_rows) * c.hidden);
    ref::gather_rows(in.data(), rows.data(), want.data(), c.num_rows, c.hidden);
    EXPECT_EQ(download_bf16(d_out), want);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatherRows,
                         ::testing::Values(gather_rows_case{1, 1, 8}, gather_rows_case{16, 40, 2048},
                                           gather_rows_case{300, 8, 4096}, gather_rows_case{64, 512, 1032},
                                           gather_rows_case{4, 0, 64}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("in", c.num_in, "_rows", c.num_rows, "_h", c.hidden);
                         });

}  // namespace
}  // namespace zmoe::kernels::test
