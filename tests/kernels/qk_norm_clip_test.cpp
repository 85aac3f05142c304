// launch_qk_norm_clip against ref::qk_norm_clip: per-head and whole-projection norms, with and without the clamp.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct qk_norm_clip_case {
    int32_t num_tokens, num_q_heads, num_kv_heads, head_dim;
    bool per_head, norm;
    float clip;
};

class QkNormClip : public ::testing::TestWithParam<qk_norm_clip_case> {};

TEST_P(QkNormClip, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens * 5 + c.num_q_heads * 3 + c.head_dim + c.per_head);
    const int32_t q_dim = c.num_q_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
    auto qkv = random_bf16(size_t(c.num_tokens) * (q_dim + 2 * kv_dim), 4.f, rng);
    const auto q_w = random_bf16(c.per_head ? c.head_dim : q_dim, 1.5f, rng);
    const auto k_w = random_bf16(c.per_head ? c.head_dim : kv_dim, 1.5f, rng);
    auto d_qkv = upload_bf16(qkv);
    auto d_q_w = upload_bf16(q_w);
    auto d_k_w = upload_bf16(k_w);
    launch_qk_norm_clip({.qkv = d_qkv.get(),
                         .q_norm_weight = c.norm ? d_q_w.get() : nullptr,
                         .k_norm_weight = c.norm ? d_k_w.get() : nullptr,
                         .num_tokens = c.num_tokens,
                         .num_q_heads = c.num_q_heads,
                         .num_kv_heads = c.num_kv_heads,
                         .head_dim = c.head_dim,
                         .per_head = c.per_head,
                         .eps = 1e-5f,
                         .clip = c.clip},
                        nullptr);
    sync_and_check();
    ref::qk_norm_clip(qkv.data(), c.norm ? q_w.data() : nullptr, c.norm ? k_w.data() : nullptr, c.num_tokens,
                      c.num_q_heads, c.num_kv_heads, c.head_dim, c.per_head, 1e-5f, c.clip);
    EXPECT_LT(rel_error(download_bf16(d_qkv), qkv), kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, QkNormClip,
                         ::testing::Values(qk_norm_clip_case{1, 16, 16, 128, false, true,
                                                             8.f},  // OLMoE-1B-7B: whole projection, clip 8
                                           qk_norm_clip_case{7, 16, 16, 128, false, true, 0.f},
                                           qk_norm_clip_case{33, 32, 4, 128, true, true, 1.5f},
                                           qk_norm_clip_case{5, 8, 2, 64, true, true, 0.f},
                                           qk_norm_clip_case{64, 4, 4, 64, false, false, 0.5f}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("t", c.num_tokens, "_q", c.num_q_heads, "_kv", c.num_kv_heads, "_d",
                                              c.head_dim, c.norm ? (c.per_head ? "_per_head" : "_whole") : "_no_norm",
                                              "_clip", int(c.clip * 10));
                         });

}  // namespace
}  // namespace zmoe::kernels::test
