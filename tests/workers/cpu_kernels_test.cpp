// The CPU kernels against naive double-precision formulas, and their independence of the thread count.

#include "workers/cpu_kernels.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "workers/kv_cache.hpp"
#include "workers/moe_layer.hpp"
#include "workers/paged_attention.hpp"

namespace zmoe {
namespace {

std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

struct linear_shape {
    int64_t tokens, rows, cols;
    dtype type;
};

class LinearTest : public ::testing::TestWithParam<linear_shape> {};

TEST_P(LinearTest, MatchesNaiveAndIsThreadIndependent) {
    const auto [T, R, C, type] = GetParam();
    const std::vector<float> x = random_vector(static_cast<size_t>(T * C), 1);
    std::vector<float> wf = random_vector(static_cast<size_t>(R * C), 2);
    std::vector<uint16_t> w16(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) {
        if (type == dtype::f32) continue;
        w16[i] = type == dtype::bf16 ? f32_to_bf16(wf[i]) : f32_to_f16(wf[i]);
        wf[i] = type == dtype::bf16 ? bf16_to_f32(w16[i]) : f16_to_f32(w16[i]);  // the values the kernel sees
    }
    const matrix_view w{type,
                        type == dtype::f32 ? reinterpret_cast<const std::byte*>(wf.data())
                                           : reinterpret_cast<const std::byte*>(w16.data()),
                        R, C};
    const std::vector<float> bias = random_vector(static_cast<size_t>(R), 3);
    std::vector<float> y1(static_cast<size_t>(T * R)), y4(y1.size());
    thread_pool one(1), four(4);
    linear(one, x.data(), T, w, bias.data(), y1.data());
    linear(four, x.data(), T, w, bias.data(), y4.data());
    EXPECT_EQ(y1, y4);
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t r = 0; r < R; ++r) {
            double ref = bias[r];
            for (int64_t c = 0; c < C; ++c) ref += static_cast<double>(x[t * C + c]) * wf[r * C + c];
            ASSERT_NEAR(y1[t * R + r], ref, 1e-4 * (1 + std::abs(ref))) << t << "," << r;
        }
    }
    // A token's row does not depend on the other tokens in the batch.
    if (T > 1) {
        std::vector<float> alone(static_cast<size_t>(R));
        linear(four, x.data() + (T - 1) * C, 1, w, bias.data(), alone.data());
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), y1.begin() + (T - 1) * R));
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest,
                         ::testing::Values(linear_shape{1, 1, 1, dtype::f32}, linear_shape{3, 17, 13, dtype::bf16},
                                           linear_shape{5, 64, 64, dtype::f16}, linear_shape{9, 100, 37, dtype::bf16},
                                           linear_shape{2, 8, 200, dtype::f32}),
                         [](const ::testing::TestParamInfo<linear_shape>& i) {
                             return "t" + std::to_string(i.param.tokens) + "_r" + std::to_string(i.param.rows) + "_c" +
                                    std::to_string(i.param.cols) + "_" + dtype_name(i.param.type);
                         });

TEST(RmsNorm, MatchesNaive) {
    const int64_t n = 45;
    const std::vector<float> x = random_vector(3 * n, 4, 3.f), w = random_vector(n, 5);
    std::vector<float> y(x.size());
    thread_pool pool(2);
    rmsnorm(pool, x.data(), w.data(), 3, n, 1e-5f, y.data());
    for (int64_t r = 0; r < 3; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
        const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
        for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[r * n + i], w[i] * x[r * n + i] * inv, 1e-5);
    }
}

TEST(Rope, MatchesRotateHalfFormula) {
    const int64_t dim = 16;
    const double theta = 10000.0;
    for (int64_t pos : {0, 1, 7, 300}) {
        std::vector<float> c(dim / 2), s(dim / 2);
        rope_cos_sin(pos, dim, theta, c.data(), s.data());
        std::vector<float> x = random_vector(dim, 6), y = x;
        rope_apply(y.data(), c.data(), s.data(), dim);
        // HF: x * cat(cos, cos) + rotate_half(x) * cat(sin, sin), rotate_half(x) = cat(-x2, x1).
        for (int64_t i = 0; i < dim; ++i) {
            const double angle = pos / std::pow(theta, 2.0 * (i % (dim / 2)) / dim);
            const double rot = i < dim / 2 ? -x[i + dim / 2] : x[i - dim / 2];
            ASSERT_NEAR(y[i], x[i] * std::cos(angle) + rot * std::sin(angle), 1e-4) << "pos " << pos << " i " << i;
        }
    }
}

TEST(PagedAttention, MatchesDenseCausalGqa) {
    const int64_t heads = 4, kv_heads = 2, dim = 8, bs = 4, blocks = 16;
    kv_cache cache(1, blocks, bs, kv_heads, dim);
    // Two sequences: a 6-token prefill from 0, and a 3-token chunk from position 5 (its first 5 already cached).
    const std::vector<int32_t> table_a = {7, 2}, table_b = {0, 9, 4};
    const std::vector<std::vector<float>> k_full = {random_vector(6 * kv_heads * dim, 10),
                                                    random_vector(8 * kv_heads * dim, 11)};
    const std::vector<std::vector<float>> v_full = {random_vector(6 * kv_heads * dim, 12),
                                                    random_vector(8 * kv_heads * dim, 13)};
    thread_pool pool(3);
    // Pre-fill b's first 5 positions as an earlier step would have.
    const std::vector<attention_seq> earlier = {{0, 5, 0, table_b.data()}};
    kv_cache_store(pool, cache, 0, earlier, k_full[1].data(), v_full[1].data());
    const std::vector<attention_seq> seqs = {{0, 6, 0, table_a.data()}, {6, 3, 5, table_b.data()}};
    const int64_t w = kv_heads * dim;
    std::vector<float> k_rows, v_rows;
    k_rows.insert(k_rows.end(), k_full[0].begin(), k_full[0].end());
    v_rows.insert(v_rows.end(), v_full[0].begin(), v_full[0].end());
    k_rows.insert(k_rows.end(), k_full[1].begin() + 5 * w, k_full[1].end());
    v_rows.insert(v_rows.end(), v_full[1].begin() + 5 * w, v_full[1].end());
    kv_cache_store(pool, cache, 0, seqs, k_rows.data(), v_rows.data());
    const std::vector<float> q = random_vector(9 * heads * dim, 14);
    const float scale = 1.f / std::sqrt(static_cast<float>(dim));
    // window 0: full causal attention; 3: sliding window (Mixtral), the row's own position and the two before.
    for (const int64_t window : {int64_t{0}, int64_t{3}}) {
        std::vector<float> out(q.size());
        paged_attention(pool, cache, 0, seqs, q.data(), heads, scale, out.data(), window);
        for (int64_t row = 0; row < 9; ++row) {
            const int sq = row < 6 ? 0 : 1;
            const int64_t pos = sq == 0 ? row : 5 + (row - 6);
            for (int64_t h = 0; h < heads; ++h) {
                const int64_t kvh = h / (heads / kv_heads);
                const int64_t first = window > 0 ? std::max<int64_t>(0, pos + 1 - window) : 0;
                std::vector<double> p(static_cast<size_t>(pos + 1), 0.0);
                double mx = -1e300, sum = 0;
                for (int64_t j = first; j <= pos; ++j) {
                    double s = 0;
                    for (int64_t d = 0; d < dim; ++d)
                        s += static_cast<double>(q[(row * heads + h) * dim + d]) *
                             k_full[sq][(j * kv_heads + kvh) * dim + d];
                    p[j] = s * scale;
                    mx = std::max(mx, p[j]);
                }
                for (int64_t j = first; j <= pos; ++j) sum += (p[j] = std::exp(p[j] - mx));
                for (int64_t d = 0; d < dim; ++d) {
                    double ref = 0;
                    for (int64_t j = first; j <= pos; ++j)
                        ref += p[j] / sum * v_full[sq][(j * kv_heads + kvh) * dim + d];
                    ASSERT_NEAR(out[(row * heads + h) * dim + d], ref, 1e-5)
                        << "row " << row << " head " << h << " window " << window;
                }
            }
        }
    }
}

TEST(Router, SoftmaxTopKWithDeterministicTies) {
    const std::vector<float> logits = {1.f, 3.f, 3.f, -1.f, 2.f};
    routing r = route_token(logits.data(), 5, 3, false);
    EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 2, 4}));  // tie between 1 and 2: lower index first
    double z = 0;
    for (float l : logits) z += std::exp(l);
    EXPECT_NEAR(r.weights[0], std::exp(3.0) / z, 1e-6);
    EXPECT_NEAR(r.weights[2], std::exp(2.0) / z, 1e-6);
    r = route_token(logits.data(), 5, 3, true);
    EXPECT_NEAR(r.weights[0] + r.weights[1] + r.weights[2], 1.0, 1e-6);
    EXPECT_NEAR(r.weights[2], std::exp(2.0) / (2 * std::exp(3.0) + std::exp(2.0)), 1e-6);
}

TEST(ThreadPool, CoversRangeOnceAndRethrows) {
    thread_pool pool(4);
    for (int64_t n : {1, 3, 4, 5, 1000}) {
        std::vector<int> hits(static_cast<size_t>(n), 0);
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) ++hits[i];
        });
        EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), n);
    }
    EXPECT_THROW(pool.parallel_for(100,
                                   [](int64_t b, int64_t) {
                                       if (b > 0) throw std::runtime_error("boom");
                                   }),
                 std::runtime_error);
    int64_t total = 0;  // still usable afterwards
    pool.parallel_for(
        10,
        [&](int64_t b, int64_t e) {
            if (b == 0) total = e;
        },
        100);
    EXPECT_EQ(total, 10);
}

}  // namespace
}  // namespace zmoe
