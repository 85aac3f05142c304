// launch_rms_norm against ref::rms_norm, with and without the fused residual add; the older launch order
// (ZMOE_DECODE_TUNING=none) and variant norm_early (decode_tuning.hpp, the default: the next kernel may launch
// before the wait) alike.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"
#include "tests/kernels/tuning_scope.hpp"

namespace zmoe::kernels::test {
namespace {

struct rms_norm_case {
    int32_t num_tokens, hidden;
    bool residual;
};

class RmsNorm : public ::testing::TestWithParam<rms_norm_case> {};

TEST_P(RmsNorm, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens * 7 + c.hidden + c.residual);
    const size_t n = size_t(c.num_tokens) * c.hidden;
    const auto x = random_bf16(n, 2.f, rng);
    const auto residual0 = random_bf16(n, 2.f, rng);
    const auto weight = random_bf16(c.hidden, 1.5f, rng);
    for (const bool early : {false, true}) {
        const tuning_scope tuning({.norm_early = early});
        auto residual = residual0;  // the reference adds x into it, as the kernel does
        auto d_x = upload_bf16(x);
        auto d_res = upload_bf16(residual);
        auto d_w = upload_bf16(weight);
        device_buffer<bf16> d_out(n);
        d_out.poison();
        launch_rms_norm({.x = d_x.get(),
                         .residual = c.residual ? d_res.get() : nullptr,
                         .weight = d_w.get(),
                         .out = d_out.get(),
                         .num_tokens = c.num_tokens,
                         .hidden = c.hidden,
                         .eps = 1e-6f},
                        nullptr);
        sync_and_check();

        std::vector<float> want(n);
        ref::rms_norm(x.data(), c.residual ? residual.data() : nullptr, weight.data(), want.data(), c.num_tokens,
                      c.hidden, 1e-6f);
        EXPECT_LT(rel_error(download_bf16(d_out), want), kBf16Tolerance);
        // The residual sum is one fp32 add rounded to BF16 on both sides: exact.
        if (c.residual) {
            EXPECT_EQ(download_bf16(d_res), residual);
        }
    }
}

TEST(RmsNormInPlace, OutputMayAliasInput) {
    std::mt19937 rng(5);
    const int32_t tokens = 9, hidden = 1024;
    const auto x = random_bf16(size_t(tokens) * hidden, 1.f, rng);
    const auto weight = random_bf16(hidden, 1.f, rng);
    auto d_x = upload_bf16(x);
    auto d_w = upload_bf16(weight);
    launch_rms_norm(
        {.x = d_x.get(), .weight = d_w.get(), .out = d_x.get(), .num_tokens = tokens, .hidden = hidden, .eps = 1e-5f},
        nullptr);
    sync_and_check();
    std::vector<float> want(x.size());
    ref::rms_norm(x.data(), nullptr, weight.data(), want.data(), tokens, hidden, 1e-5f);
    EXPECT_LT(rel_error(download_bf16(d_x), want), kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNorm,
                         ::testing::Values(rms_norm_case{1, 64, true}, rms_norm_case{1, 64, false},
                                           rms_norm_case{7, 2048, true}, rms_norm_case{300, 4096, true},
                                           rms_norm_case{4096, 128, false}, rms_norm_case{3, 16384, true}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("t", c.num_tokens, "_h", c.hidden, (c.residual ? "_residual" : "_plain"));
                         });

}  // namespace
}  // namespace zmoe::kernels::test
