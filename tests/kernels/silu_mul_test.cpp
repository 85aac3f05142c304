// launch_silu_mul against ref::silu_mul.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct silu_mul_case {
    int32_t num_tokens, n;
};

class SiluMul : public ::testing::TestWithParam<silu_mul_case> {};

TEST_P(SiluMul, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens * 17 + c.n);
    const auto gate_up = random_bf16(size_t(c.num_tokens) * 2 * c.n, 4.f, rng);
    auto d_gate_up = upload_bf16(gate_up);
    device_buffer<bf16> d_out(size_t(c.num_tokens) * c.n);
    d_out.poison();
    launch_silu_mul({.gate_up = d_gate_up.get(), .out = d_out.get(), .num_tokens = c.num_tokens, .n = c.n}, nullptr);
    sync_and_check();
    std::vector<float> want(size_t(c.num_tokens) * c.n);
    ref::silu_mul(gate_up.data(), want.data(), c.num_tokens, c.n);
    EXPECT_LT(rel_error(download_bf16(d_out), want), kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SiluMul,
                         ::testing::Values(silu_mul_case{1, 64}, silu_mul_case{5, 768}, silu_mul_case{128, 1408},
                                           silu_mul_case{257, 5632}, silu_mul_case{33, 100}),
                         [](const auto& info) { return make_name("t", info.param.num_tokens, "_n", info.param.n); });

}  // namespace
}  // namespace zmoe::kernels::test
