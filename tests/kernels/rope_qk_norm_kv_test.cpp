// launch_rope_qk_norm_kv against ref::rope_qk_norm_kv: q output and the whole K/V caches (slots not written
// must keep their old contents); the older launch order (ZMOE_DECODE_TUNING=none) and variant norm_early
// (decode_tuning.hpp, the default) alike.

#include <numeric>

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"
#include "tests/kernels/tuning_scope.hpp"

namespace zmoe::kernels::test {
namespace {

struct rope_case {
    int32_t num_tokens, num_q_heads, num_kv_heads, head_dim;
    qk_norm_mode norm;
};

class RopeQkNormKv : public ::testing::TestWithParam<rope_case> {};

TEST_P(RopeQkNormKv, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens + 13 * c.head_dim + int(c.norm));
    const int32_t block_size = 16, num_blocks = (c.num_tokens + block_size - 1) / block_size + 3;
    const int32_t q_size = c.num_q_heads * c.head_dim, kv_size = c.num_kv_heads * c.head_dim;
    const auto qkv = random_bf16(size_t(c.num_tokens) * (q_size + 2 * kv_size), 2.f, rng);
    const bool whole = c.norm == qk_norm_mode::whole;
    const auto qw = random_bf16(whole ? q_size : c.head_dim, 1.5f, rng);
    const auto kw = random_bf16(whole ? kv_size : c.head_dim, 1.5f, rng);
    std::vector<int32_t> positions(c.num_tokens), slots(num_blocks * block_size);
    std::uniform_int_distribution<int32_t> pos_dist(0, 32767);
    for (auto& p : positions) p = pos_dist(rng);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(c.num_tokens);
    if (c.num_tokens > 1) slots[0] = -1;  // a padding token: nothing written
    const auto k_cache0 = random_bf16(size_t(num_blocks) * block_size * kv_size, 1.f, rng);
    const auto v_cache0 = random_bf16(k_cache0.size(), 1.f, rng);
    for (const bool early : {false, true}) {
        const tuning_scope tuning({.norm_early = early});
        auto k_cache = k_cache0, v_cache = v_cache0;
        auto d_qkv = upload_bf16(qkv);
        auto d_qw = upload_bf16(qw);
        auto d_kw = upload_bf16(kw);
        auto d_pos = upload(positions);
        auto d_slots = upload(slots);
        auto d_k = upload_bf16(k_cache);
        auto d_v = upload_bf16(v_cache);
        device_buffer<bf16> d_q(size_t(c.num_tokens) * q_size);
        d_q.poison();
        rope_qk_norm_kv_params p;
        p.qkv = d_qkv.get();
        p.positions = d_pos.get();
        p.slot_mapping = d_slots.get();
        p.q_norm_weight = d_qw.get();
        p.k_norm_weight = d_kw.get();
        p.q_out = d_q.get();
        p.k_cache = d_k.get();
        p.v_cache = d_v.get();
        p.num_tokens = c.num_tokens;
        p.num_q_heads = c.num_q_heads;
        p.num_kv_heads = c.num_kv_heads;
        p.head_dim = c.head_dim;
        p.block_size = block_size;
        p.rope_theta = 1e6f;
        p.eps = 1e-6f;
        p.norm = c.norm;
        launch_rope_qk_norm_kv(p, nullptr);
        sync_and_check();

        ref::rope_shape s{c.num_tokens, c.num_q_heads, c.num_kv_heads, c.head_dim,
                          block_size,   1e6f,          1e-6f,          int32_t(c.norm)};
        std::vector<float> want_q(size_t(c.num_tokens) * q_size);
        ref::rope_qk_norm_kv(s, qkv.data(), positions.data(), slots.data(), qw.data(), kw.data(), want_q.data(),
                             k_cache.data(), v_cache.data());
        EXPECT_LT(rel_error(download_bf16(d_q), want_q), kBf16Tolerance);
        EXPECT_LT(rel_error(download_bf16(d_k), k_cache), kBf16Tolerance);
        EXPECT_EQ(download_bf16(d_v), v_cache);  // V is copied bit for bit
    }
}

std::string mode_name(qk_norm_mode m) {
    return m == qk_norm_mode::none ? "none" : m == qk_norm_mode::per_head ? "per_head" : "whole";
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeQkNormKv,
                         ::testing::Values(rope_case{1, 4, 2, 16, qk_norm_mode::per_head},
                                           rope_case{33, 32, 4, 128, qk_norm_mode::per_head},
                                           rope_case{17, 16, 16, 128, qk_norm_mode::whole},
                                           rope_case{5, 4, 4, 16, qk_norm_mode::whole},
                                           rope_case{100, 8, 8, 64, qk_norm_mode::none},
                                           rope_case{2048, 64, 4, 128, qk_norm_mode::per_head}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("t", c.num_tokens, "_q", c.num_q_heads, "_kv", c.num_kv_heads, "_d",
                                              c.head_dim, "_", mode_name(c.norm));
                         });

}  // namespace
}  // namespace zmoe::kernels::test
