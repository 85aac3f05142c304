// launch_gemv_bf16 (the small-M dense path) against ref::gemm (+ bias): 1 to kGemvMaxRows rows, the decode shapes
// of Qwen3-30B-A3B (QKV, O, router with fp32 logits), odd row counts, short and long k; and the result does not
// depend on the grid (a row's bits are the same alone and among many). The fused RMSNorm prologue against ref::
// rms_norm + ref::gemm and bit for bit against launch_rms_norm + launch_gemv_bf16; the fused RoPE epilogue against
// ref::rope_qk_norm_kv and bit for bit against launch_rope_qk_norm_kv after the plain GEMV.

#include <algorithm>
#include <numeric>

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct gemv_case {
    int32_t m, n, k;
    bool y_fp32;
    bool bias;
};

std::vector<float> run_gemv(const gemv_case& c, const std::vector<float>& x, const std::vector<float>& w,
                            const std::vector<float>& bias) {
    auto d_x = upload_bf16(x);
    auto d_w = upload_bf16(w);
    auto d_b = upload_bf16(bias);
    device_buffer<bf16> d_y16(size_t(c.m) * c.n);
    device_buffer<float> d_y32(size_t(c.m) * c.n);
    d_y16.poison();
    d_y32.poison();
    launch_gemv_bf16({.x = d_x.get(),
                      .w = d_w.get(),
                      .bias = c.bias ? d_b.get() : nullptr,
                      .y = c.y_fp32 ? static_cast<void*>(d_y32.get()) : static_cast<void*>(d_y16.get()),
                      .m = c.m,
                      .n = c.n,
                      .k = c.k,
                      .y_fp32 = c.y_fp32},
                     nullptr);
    sync_and_check();
    return c.y_fp32 ? download(d_y32) : download_bf16(d_y16);
}

class GemvBf16 : public ::testing::TestWithParam<gemv_case> {};

TEST_P(GemvBf16, MatchesReference) {
    const auto c = GetParam();
    ASSERT_TRUE(gemv_bf16_supported(c.m, c.n, c.k));
    std::mt19937 rng(c.m * 31 + c.n + c.k);
    const auto x = random_bf16(size_t(c.m) * c.k, 1.f, rng);
    const auto w = random_bf16(size_t(c.n) * c.k, 1.f / std::sqrt(float(c.k)), rng);
    const auto bias = random_bf16(size_t(c.n), 1.f, rng);
    const std::vector<float> got = run_gemv(c, x, w, bias);

    std::vector<float> want(size_t(c.m) * c.n);
    ref::gemm(x.data(), w.data(), want.data(), c.m, c.n, c.k);
    if (c.bias)
        for (int32_t i = 0; i < c.m; ++i)
            for (int32_t j = 0; j < c.n; ++j) want[size_t(i) * c.n + j] += bias[j];
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(rel_error(got, want), c.y_fp32 ? 1e-4 : kBf16Tolerance);
}

TEST(GemvBf16, RowDoesNotDependOnTheGrid) {
    // 9000 rows run on a grid-stride loop; the same weights' row 8191 alone must give the same bits.
    const gemv_case many{2, 9000, 1024, true, false};
    std::mt19937 rng(3);
    const auto x = random_bf16(size_t(many.m) * many.k, 1.f, rng);
    const auto w = random_bf16(size_t(many.n) * many.k, 0.03f, rng);
    const std::vector<float> all = run_gemv(many, x, w, {});
    const int32_t row = 8191;
    const gemv_case one{2, 1, 1024, true, false};
    const std::vector<float> w_row(w.begin() + size_t(row) * many.k, w.begin() + size_t(row + 1) * many.k);
    const std::vector<float> alone = run_gemv(one, x, w_row, {});
    for (int32_t i = 0; i < many.m; ++i) EXPECT_EQ(alone[i], all[size_t(i) * many.n + row]) << "row of x " << i;
}

TEST(GemvBf16, Supported) {
    EXPECT_TRUE(gemv_bf16_supported(1, 151669, 2048));
    EXPECT_TRUE(gemv_bf16_supported(kGemvMaxRows, 2048, 4096));
    EXPECT_FALSE(gemv_bf16_supported(kGemvMaxRows + 1, 2048, 2048));
    EXPECT_FALSE(gemv_bf16_supported(1, 2048, 2044));                // k not a multiple of 8
    EXPECT_FALSE(gemv_bf16_supported(kGemvMaxRows, 128, 8 * 4096));  // x beyond 64 KB of shared memory
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvBf16,
                         ::testing::Values(gemv_case{1, 5120, 2048, false, false},
                                           gemv_case{1, 2048, 4096, false, false}, gemv_case{1, 128, 2048, true, false},
                                           gemv_case{2, 4608, 2048, false, true}, gemv_case{3, 1000, 768, false, false},
                                           gemv_case{4, 50001, 256, true, false}, gemv_case{5, 33, 8, false, true},
                                           gemv_case{6, 777, 136, true, true}, gemv_case{7, 3, 4096, false, true},
                                           gemv_case{8, 4096, 4096, false, false},
                                           gemv_case{8, 129, 2048, true, false}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("m", c.m, "_n", c.n, "_k", c.k, (c.y_fp32 ? "_f32" : "_bf16"),
                                              (c.bias ? "_bias" : ""));
                         });

struct norm_case {
    int32_t m, n, k;
    bool residual;
};

class GemvBf16Norm : public ::testing::TestWithParam<norm_case> {};

TEST_P(GemvBf16Norm, MatchesNormThenGemv) {
    const auto c = GetParam();
    std::mt19937 rng(c.m * 17 + c.n + c.k + c.residual);
    const size_t xs = size_t(c.m) * c.k;
    const auto x = random_bf16(xs, 2.f, rng);
    const auto residual = random_bf16(xs, 2.f, rng);
    const auto norm_w = random_bf16(size_t(c.k), 1.5f, rng);
    const auto w = random_bf16(size_t(c.n) * c.k, 1.f / std::sqrt(float(c.k)), rng);
    auto d_x = upload_bf16(x);
    auto d_res = upload_bf16(residual);
    auto d_nw = upload_bf16(norm_w);
    auto d_w = upload_bf16(w);

    // Fused: x and residual stay as they are, the sum goes to residual_out.
    device_buffer<bf16> d_res_out(xs), d_y(size_t(c.m) * c.n);
    d_res_out.poison();
    d_y.poison();
    launch_gemv_bf16({.x = d_x.get(),
                      .w = d_w.get(),
                      .y = d_y.get(),
                      .m = c.m,
                      .n = c.n,
                      .k = c.k,
                      .norm_weight = d_nw.get(),
                      .residual = c.residual ? d_res.get() : nullptr,
                      .residual_out = d_res_out.get(),
                      .eps = 1e-6f},
                     nullptr);
    sync_and_check();
    const std::vector<float> got = download_bf16(d_y), got_res = download_bf16(d_res_out);
    EXPECT_EQ(download_bf16(d_x), x);
    EXPECT_EQ(download_bf16(d_res), residual);

    // Unfused: launch_rms_norm (residual in place) then the plain GEMV.
    auto d_res2 = upload_bf16(residual);
    device_buffer<bf16> d_xn(xs), d_y2(size_t(c.m) * c.n);
    d_xn.poison();
    d_y2.poison();
    launch_rms_norm({.x = d_x.get(),
                     .residual = c.residual ? d_res2.get() : nullptr,
                     .weight = d_nw.get(),
                     .out = d_xn.get(),
                     .num_tokens = c.m,
                     .hidden = c.k,
                     .eps = 1e-6f},
                    nullptr);
    launch_gemv_bf16({.x = d_xn.get(), .w = d_w.get(), .y = d_y2.get(), .m = c.m, .n = c.n, .k = c.k}, nullptr);
    sync_and_check();
    EXPECT_EQ(got, download_bf16(d_y2));
    EXPECT_EQ(got_res, c.residual ? download_bf16(d_res2) : x);

    // The CPU references.
    std::vector<float> ref_res = residual, xn(xs), want(size_t(c.m) * c.n);
    ref::rms_norm(x.data(), c.residual ? ref_res.data() : nullptr, norm_w.data(), xn.data(), c.m, c.k, 1e-6f);
    ref::gemm(xn.data(), w.data(), want.data(), c.m, c.n, c.k);
    EXPECT_LT(rel_error(got, want), kBf16Tolerance);
    EXPECT_EQ(got_res, c.residual ? ref_res : x);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvBf16Norm,
                         ::testing::Values(norm_case{1, 5120, 2048, true}, norm_case{1, 5120, 2048, false},
                                           norm_case{2, 1000, 4096, true}, norm_case{3, 257, 136, true},
                                           norm_case{5, 4608, 2048, false}, norm_case{8, 640, 2048, true},
                                           norm_case{8, 64, 3072, false}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("m", c.m, "_n", c.n, "_k", c.k, (c.residual ? "_residual" : ""));
                         });

struct rope_gemv_case {
    int32_t m, k, num_q_heads, num_kv_heads, head_dim;
    qk_norm_mode norm;
    bool bias;
};

class GemvBf16Rope : public ::testing::TestWithParam<rope_gemv_case> {};

TEST_P(GemvBf16Rope, MatchesGemvThenRope) {
    const auto c = GetParam();
    ASSERT_TRUE(rope_gemv_supported(c.norm, c.head_dim));
    std::mt19937 rng(c.m * 5 + c.k + c.head_dim + int(c.norm) * 3 + c.bias);
    const int32_t q_size = c.num_q_heads * c.head_dim, kv_size = c.num_kv_heads * c.head_dim;
    const int32_t n = q_size + 2 * kv_size, block_size = 16, num_blocks = c.m / block_size + 3;
    const auto x = random_bf16(size_t(c.m) * c.k, 1.f, rng);
    const auto w = random_bf16(size_t(n) * c.k, 1.f / std::sqrt(float(c.k)), rng);
    const auto bias = random_bf16(size_t(n), 1.f, rng);
    const auto qw = random_bf16(size_t(c.head_dim), 1.5f, rng);
    const auto kw = random_bf16(size_t(c.head_dim), 1.5f, rng);
    std::vector<int32_t> positions(c.m), slots(size_t(num_blocks) * block_size);
    std::uniform_int_distribution<int32_t> pos_dist(0, 32767);
    for (auto& p : positions) p = pos_dist(rng);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(c.m);
    if (c.m > 1) slots[c.m - 1] = -1;  // a padding row: no KV written
    const auto k_cache = random_bf16(size_t(num_blocks) * block_size * kv_size, 1.f, rng);
    const auto v_cache = random_bf16(k_cache.size(), 1.f, rng);
    auto d_x = upload_bf16(x);
    auto d_w = upload_bf16(w);
    auto d_b = upload_bf16(bias);
    auto d_qw = upload_bf16(qw);
    auto d_kw = upload_bf16(kw);
    auto d_pos = upload(positions);
    auto d_slots = upload(slots);
    auto d_counters = upload(std::vector<int32_t>(size_t(c.num_q_heads + c.num_kv_heads), 0));

    struct outputs {
        std::vector<float> y, q, k, v;
    };
    auto run = [&](bool fused) {
        auto d_k = upload_bf16(k_cache);
        auto d_v = upload_bf16(v_cache);
        device_buffer<bf16> d_y(size_t(c.m) * n), d_q(size_t(c.m) * q_size);
        d_y.poison();
        d_q.poison();
        rope_qk_norm_kv_params r{.qkv = d_y.get(),
                                 .positions = d_pos.get(),
                                 .slot_mapping = d_slots.get(),
                                 .q_norm_weight = c.norm == qk_norm_mode::none ? nullptr : d_qw.get(),
                                 .k_norm_weight = c.norm == qk_norm_mode::none ? nullptr : d_kw.get(),
                                 .q_out = d_q.get(),
                                 .k_cache = d_k.get(),
                                 .v_cache = d_v.get(),
                                 .num_tokens = c.m,
                                 .num_q_heads = c.num_q_heads,
                                 .num_kv_heads = c.num_kv_heads,
                                 .head_dim = c.head_dim,
                                 .block_size = block_size,
                                 .rope_theta = 1e6f,
                                 .eps = 1e-6f,
                                 .norm = c.norm};
        gemv_bf16_params g{.x = d_x.get(),
                           .w = d_w.get(),
                           .bias = c.bias ? d_b.get() : nullptr,
                           .y = d_y.get(),
                           .m = c.m,
                           .n = n,
                           .k = c.k};
        if (fused) {
            g.rope = r;
            g.rope_counters = d_counters.get();
            launch_gemv_bf16(g, nullptr);
        } else {
            launch_gemv_bf16(g, nullptr);
            launch_rope_qk_norm_kv(r, nullptr);
        }
        sync_and_check();
        return outputs{download_bf16(d_y), download_bf16(d_q), download_bf16(d_k), download_bf16(d_v)};
    };
    const outputs plain = run(false);
    for (int i = 0; i < 2; ++i) {  // the second launch finds the tickets back at zero
        const outputs fused = run(true);
        EXPECT_EQ(fused.y, plain.y) << "launch " << i;
        EXPECT_EQ(fused.q, plain.q) << "launch " << i;
        EXPECT_EQ(fused.k, plain.k) << "launch " << i;
        EXPECT_EQ(fused.v, plain.v) << "launch " << i;
    }
    EXPECT_EQ(download(d_counters), std::vector<int32_t>(size_t(c.num_q_heads + c.num_kv_heads), 0));

    // The CPU references: the projection, then RoPE over its BF16 rounding.
    std::vector<float> qkv(size_t(c.m) * n);
    ref::gemm(x.data(), w.data(), qkv.data(), c.m, n, c.k);
    for (int32_t i = 0; i < c.m; ++i)
        for (int32_t j = 0; j < n; ++j) {
            float& v = qkv[size_t(i) * n + j];
            v = c.bias ? ref::round_bf16(ref::round_bf16(v) + bias[j]) : ref::round_bf16(v);
        }
    EXPECT_LT(rel_error(plain.y, qkv), kBf16Tolerance);
    std::vector<float> want_q(size_t(c.m) * q_size), want_k = k_cache, want_v = v_cache;
    ref::rope_shape s{c.m, c.num_q_heads, c.num_kv_heads, c.head_dim, block_size, 1e6f, 1e-6f, int32_t(c.norm)};
    ref::rope_qk_norm_kv(s, plain.y.data(), positions.data(), slots.data(), qw.data(), kw.data(), want_q.data(),
                         want_k.data(), want_v.data());
    EXPECT_LT(rel_error(plain.q, want_q), kBf16Tolerance);
    EXPECT_LT(rel_error(plain.k, want_k), kBf16Tolerance);
    EXPECT_EQ(plain.v, want_v);
}

TEST(GemvBf16Rope, Supported) {
    EXPECT_TRUE(rope_gemv_supported(qk_norm_mode::per_head, 128));
    EXPECT_TRUE(rope_gemv_supported(qk_norm_mode::none, 256));
    EXPECT_FALSE(rope_gemv_supported(qk_norm_mode::whole, 128));  // needs every head of the token first
    EXPECT_FALSE(rope_gemv_supported(qk_norm_mode::per_head, 512));
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvBf16Rope,
                         ::testing::Values(rope_gemv_case{1, 2048, 32, 4, 128, qk_norm_mode::per_head, false},
                                           rope_gemv_case{3, 2048, 32, 4, 128, qk_norm_mode::per_head, false},
                                           rope_gemv_case{8, 2048, 32, 4, 128, qk_norm_mode::per_head, true},
                                           rope_gemv_case{2, 1024, 8, 8, 64, qk_norm_mode::none, true},
                                           rope_gemv_case{5, 512, 4, 2, 256, qk_norm_mode::per_head, false},
                                           rope_gemv_case{4, 136, 6, 2, 32, qk_norm_mode::none, false}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("m", c.m, "_k", c.k, "_h", c.num_q_heads, "_", c.num_kv_heads, "_d",
                                              c.head_dim, (c.norm == qk_norm_mode::none ? "_nonorm" : "_perhead"),
                                              (c.bias ? "_bias" : ""));
                         });

}  // namespace
}  // namespace zmoe::kernels::test
