// launch_add_bias against ref::add_bias.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct add_bias_case {
    int32_t num_tokens, n;
};

class AddBias : public ::testing::TestWithParam<add_bias_case> {};

TEST_P(AddBias, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens * 31 + c.n);
    auto y = random_bf16(size_t(c.num_tokens) * c.n, 2.f, rng);
    const auto bias = random_bf16(c.n, 1.f, rng);
    auto d_y = upload_bf16(y);
    auto d_bias = upload_bf16(bias);
    launch_add_bias({.y = d_y.get(), .bias = d_bias.get(), .num_tokens = c.num_tokens, .n = c.n}, nullptr);
    sync_and_check();
    ref::add_bias(y.data(), bias.data(), c.num_tokens, c.n);
    EXPECT_LT(rel_error(download_bf16(d_y), y), kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AddBias,
                         ::testing::Values(add_bias_case{0, 64}, add_bias_case{1, 64}, add_bias_case{7, 2560},
                                           add_bias_case{300, 4608}, add_bias_case{1024, 129}),
                         [](const auto& info) { return make_name("t", info.param.num_tokens, "_n", info.param.n); });

}  // namespace
}  // namespace zmoe::kernels::test
