// Multi-head latent attention on the CPU (absorbed form over the latent cache) against a direct implementation of
// transformers' expanded form (k_nope = W_k c, v = W_v c per head, de-interleaved RoPE as DeepseekV3 writes it), in
// double, over shapes: q LoRA on and off, interleaved and rotate-half RoPE, a YaRN attention factor, two sequences
// in one batch, and chunked prefill.

#include "workers/mla_attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace zmoe {
namespace {

struct mla_shape {
    int64_t hidden, heads, q_lora, r, dn, dr, dv;
    bool interleave;
};

struct fixture {
    model_config c;
    attention_weights w;
    std::vector<std::vector<float>> storage;  // backing of the matrix views

    matrix_view matrix(int64_t rows, int64_t cols, std::mt19937& rng, float scale) {
        std::normal_distribution<float> n(0.f, scale);
        storage.emplace_back(static_cast<size_t>(rows * cols));
        for (float& x : storage.back()) x = n(rng);
        return {dtype::f32, reinterpret_cast<const std::byte*>(storage.back().data()), rows, cols};
    }
    static std::vector<float> norm_weight(int64_t n, std::mt19937& rng) {
        std::normal_distribution<float> d(1.f, 0.2f);
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = d(rng);
        return v;
    }

    explicit fixture(const mla_shape& s) {
        std::mt19937 rng(42);
        c.arch = model_arch::deepseek_v3;
        c.hidden_size = s.hidden;
        c.num_heads = c.num_kv_heads = s.heads;
        c.num_layers = 1;
        c.mla = {.q_lora_rank = s.q_lora,
                 .kv_lora_rank = s.r,
                 .qk_nope_head_dim = s.dn,
                 .qk_rope_head_dim = s.dr,
                 .v_head_dim = s.dv,
                 .rope_interleave = s.interleave};
        c.head_dim = s.dn + s.dr;
        c.rope.theta = 10000.0;
        c.rope.attention_factor = 1.1;
        const float ws = 0.3f;
        if (s.q_lora > 0) {
            w.mla.q_a = matrix(s.q_lora, s.hidden, rng, ws);
            w.mla.q_a_norm = norm_weight(s.q_lora, rng);
            w.mla.q_b = matrix(s.heads * (s.dn + s.dr), s.q_lora, rng, ws);
        } else {
            w.q = matrix(s.heads * (s.dn + s.dr), s.hidden, rng, ws);
        }
        w.mla.kv_a = matrix(s.r + s.dr, s.hidden, rng, ws);
        w.mla.kv_a_norm = norm_weight(s.r, rng);
        const matrix_view kv_b = matrix(s.heads * (s.dn + s.dv), s.r, rng, ws);
        w.mla.kv_b.assign(reinterpret_cast<const float*>(kv_b.data),
                          reinterpret_cast<const float*>(kv_b.data) + kv_b.rows * kv_b.cols);
        w.o = matrix(s.hidden, s.heads * s.dv, rng, ws);
    }
};

std::vector<double> mat_vec(const matrix_view& m, const std::vector<double>& x) {
    const auto* f = reinterpret_cast<const float*>(m.data);
    std::vector<double> y(static_cast<size_t>(m.rows), 0.0);
    for (int64_t r = 0; r < m.rows; ++r)
        for (int64_t k = 0; k < m.cols; ++k) y[r] += f[r * m.cols + k] * x[k];
    return y;
}

std::vector<double> rms(const std::vector<double>& x, const std::vector<float>& w) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-6);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = w[i] * x[i] * inv;
    return y;
}

// transformers: interleaved pairs rotated and written de-interleaved; otherwise rotate_half.
std::vector<double> rope(const std::vector<double>& x, int64_t pos, const model_config& c) {
    const int64_t d = static_cast<int64_t>(x.size()), half = d / 2;
    const std::vector<float> inv = c.rope_inv_freq();
    std::vector<double> y(x.size());
    for (int64_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(static_cast<float>(pos) * inv[i]);
        const double cs = std::cos(a) * c.rope.attention_factor, sn = std::sin(a) * c.rope.attention_factor;
        const double x1 = c.mla.rope_interleave ? x[2 * i] : x[i];
        const double x2 = c.mla.rope_interleave ? x[2 * i + 1] : x[i + half];
        y[i] = x1 * cs - x2 * sn;
        y[i + half] = x2 * cs + x1 * sn;
    }
    return y;
}

// The expanded form for every row of one sequence [n, hidden] at positions 0..n-1: o_proj output [n, hidden].
std::vector<double> expanded(const fixture& f, const std::vector<float>& x, int64_t n) {
    const model_config& c = f.c;
    const mla_params& m = c.mla;
    const int64_t H = c.hidden_size, heads = c.num_heads, qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
    std::vector<std::vector<double>> q(n), lat(n), kpe(n);
    for (int64_t t = 0; t < n; ++t) {
        const std::vector<double> xt(x.begin() + t * H, x.begin() + (t + 1) * H);
        q[t] = m.q_lora_rank > 0 ? mat_vec(f.w.mla.q_b, rms(mat_vec(f.w.mla.q_a, xt), f.w.mla.q_a_norm))
                                 : mat_vec(f.w.q, xt);
        const std::vector<double> kv = mat_vec(f.w.mla.kv_a, xt);
        lat[t] = rms(std::vector<double>(kv.begin(), kv.begin() + m.kv_lora_rank), f.w.mla.kv_a_norm);
        kpe[t] = rope(std::vector<double>(kv.begin() + m.kv_lora_rank, kv.end()), t, c);
    }
    const float* kv_b = f.w.mla.kv_b.data();
    std::vector<double> out(static_cast<size_t>(n * H), 0.0);
    for (int64_t t = 0; t < n; ++t) {
        std::vector<double> attn(static_cast<size_t>(heads * m.v_head_dim), 0.0);
        for (int64_t h = 0; h < heads; ++h) {
            const double* qh = q[t].data() + h * qk;
            const std::vector<double> q_rot = rope(std::vector<double>(qh + m.qk_nope_head_dim, qh + qk), t, c);
            std::vector<double> score(static_cast<size_t>(t + 1));
            double mx = -1e300;
            for (int64_t j = 0; j <= t; ++j) {
                double s = 0;
                for (int64_t d = 0; d < m.qk_nope_head_dim; ++d) {
                    double k = 0;
                    for (int64_t i = 0; i < m.kv_lora_rank; ++i)
                        k += kv_b[(h * (m.qk_nope_head_dim + m.v_head_dim) + d) * m.kv_lora_rank + i] * lat[j][i];
                    s += qh[d] * k;
                }
                for (int64_t d = 0; d < m.qk_rope_head_dim; ++d) s += q_rot[d] * kpe[j][d];
                score[j] = s * c.softmax_scale();
                mx = std::max(mx, score[j]);
            }
            double sum = 0;
            for (double& s : score) sum += (s = std::exp(s - mx));
            for (int64_t e = 0; e < m.v_head_dim; ++e) {
                const int64_t row = h * (m.qk_nope_head_dim + m.v_head_dim) + m.qk_nope_head_dim + e;
                for (int64_t j = 0; j <= t; ++j) {
                    double v = 0;
                    for (int64_t i = 0; i < m.kv_lora_rank; ++i) v += kv_b[row * m.kv_lora_rank + i] * lat[j][i];
                    attn[h * m.v_head_dim + e] += score[j] / sum * v;
                }
            }
        }
        const std::vector<double> o = mat_vec(f.w.o, attn);
        std::copy(o.begin(), o.end(), out.begin() + t * H);
    }
    return out;
}

class MlaAttention : public ::testing::TestWithParam<mla_shape> {};

TEST_P(MlaAttention, AbsorbedMatchesExpandedAndChunkingIsBitwise) {
    const fixture f(GetParam());
    const model_config& c = f.c;
    const int64_t H = c.hidden_size, half = c.mla.qk_rope_head_dim / 2;
    const std::vector<int64_t> lens = {9, 13};
    const std::vector<std::vector<int32_t>> tables = {{0, 1, 2}, {5, 3, 6, 4}};
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<std::vector<float>> xs;
    for (int64_t n : lens) {
        xs.emplace_back(static_cast<size_t>(n * H));
        for (float& v : xs.back()) v = nd(rng);
    }
    thread_pool pool(2);
    const std::vector<float> inv = c.rope_inv_freq();
    // Runs rows [from, to) of both sequences as one batch; returns each sequence's output rows.
    auto run = [&](kv_cache& cache, int64_t from, std::vector<int64_t> to) {
        std::vector<attention_seq> seqs;
        std::vector<float> x, cs, sn;
        for (size_t s = 0; s < lens.size(); ++s) {
            const int64_t end = std::min(to[s], lens[s]);
            if (end <= from) continue;
            seqs.push_back({.first_row = static_cast<int64_t>(x.size()) / H,
                            .num_tokens = end - from,
                            .start_pos = from,
                            .block_table = tables[s].data()});
            for (int64_t t = from; t < end; ++t) {
                x.insert(x.end(), xs[s].begin() + t * H, xs[s].begin() + (t + 1) * H);
                cs.resize(cs.size() + half);
                sn.resize(sn.size() + half);
                mla_rope_cos_sin(t, inv, static_cast<float>(c.rope.attention_factor), cs.data() + cs.size() - half,
                                 sn.data() + sn.size() - half);
            }
        }
        const int64_t T = static_cast<int64_t>(x.size()) / H;
        std::vector<float> out(static_cast<size_t>(T * H));
        mla_attention(pool, c, f.w, cache, 0, seqs, x.data(), T, cs.data(), sn.data(), out.data());
        return out;
    };
    kv_cache one_shot = kv_cache::for_model(c, 8, 4);
    const std::vector<float> all = run(one_shot, 0, {100, 100});
    // Chunked: rows [0, 5) then [5, end) of each sequence.
    kv_cache chunked_cache = kv_cache::for_model(c, 8, 4);
    const std::vector<float> first = run(chunked_cache, 0, {5, 5});
    const std::vector<float> rest = run(chunked_cache, 5, {100, 100});

    int64_t row0 = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
        const std::vector<double> ref = expanded(f, xs[s], lens[s]);
        double max_err = 0, max_ref = 0;
        for (int64_t i = 0; i < lens[s] * H; ++i) {
            max_err = std::max(max_err, std::abs(all[row0 * H + i] - ref[i]));
            max_ref = std::max(max_ref, std::abs(ref[i]));
        }
        EXPECT_LE(max_err / max_ref, 2e-6) << "sequence " << s;
        // The chunked run lays rows out as [seq0 0..4, seq1 0..4] then [seq0 5.., seq1 5..].
        const int64_t first_row = static_cast<int64_t>(s) * 5;
        const int64_t rest_row = s == 0 ? 0 : lens[0] - 5;
        for (int64_t t = 0; t < lens[s]; ++t) {
            const float* got = t < 5 ? first.data() + (first_row + t) * H : rest.data() + (rest_row + t - 5) * H;
            for (int64_t i = 0; i < H; ++i)
                ASSERT_EQ(got[i], all[(row0 + t) * H + i]) << "sequence " << s << " row " << t;
        }
        row0 += lens[s];
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaAttention,
                         ::testing::Values(mla_shape{32, 3, 16, 16, 8, 4, 6, true},
                                           mla_shape{32, 2, 0, 24, 16, 8, 16, false},
                                           mla_shape{48, 4, 0, 8, 0, 6, 8, true},
                                           mla_shape{40, 1, 12, 32, 12, 2, 20, false}));

}  // namespace
}  // namespace zmoe
