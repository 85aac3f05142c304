// launch_add_gated against ref::add_gated (qwen2_moe's shared-expert gate; DeepSeek's ungated add).

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct add_gated_case {
    int32_t num_tokens, hidden;
    bool gated = true;  ///< false: DeepSeek's ungated shared experts (no gate logits)
};

class AddGated : public ::testing::TestWithParam<add_gated_case> {};

TEST_P(AddGated, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens * 11 + c.hidden);
    const size_t n = size_t(c.num_tokens) * c.hidden;
    auto out = random_bf16(n, 2.f, rng);
    const auto shared = random_bf16(n, 2.f, rng);
    const auto gate = random_f32(c.num_tokens, 6.f, rng);
    auto d_out = upload_bf16(out);
    auto d_shared = upload_bf16(shared);
    auto d_gate = upload(gate);
    launch_add_gated({.out = d_out.get(),
                      .shared = d_shared.get(),
                      .gate_logits = c.gated ? d_gate.get() : nullptr,
                      .num_tokens = c.num_tokens,
                      .hidden = c.hidden},
                     nullptr);
    sync_and_check();
    ref::add_gated(out.data(), shared.data(), c.gated ? gate.data() : nullptr, c.num_tokens, c.hidden);
    EXPECT_LT(rel_error(download_bf16(d_out), out), kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AddGated,
                         ::testing::Values(add_gated_case{1, 64}, add_gated_case{9, 2048}, add_gated_case{256, 3584},
                                           add_gated_case{1000, 72}, add_gated_case{1, 64, false},
                                           add_gated_case{300, 7168, false}),
                         [](const auto& info) {
                             return make_name("t", info.param.num_tokens, "_h", info.param.hidden,
                                              info.param.gated ? "" : "_ungated");
                         });

}  // namespace
}  // namespace zmoe::kernels::test
