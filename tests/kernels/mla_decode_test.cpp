// The tensor-core MLA decode kernel against the latent attention's CPU reference: one query token per sequence at
// contexts across tile edges (1, 31, 32, 33 keys ...) and long ones, shuffled cache blocks, 16 heads (one MMA row
// group), a head count that leaves a partial group, every split count from one to more splits than tiles; the
// decode path with BF16 latents between the batched absorb / v_up GEMMs; and the few-token path's fused launches
// (RoPE in the absorb kernel, the split combine in the v_up kernel) against the separate ones.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kernels/mla_gemm.hpp"
#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct decode_case {
    int32_t heads;
    std::vector<int32_t> positions;  ///< each sequence's query position (it sees positions [0, pos])
    std::vector<int32_t> splits;
};

class MlaDecode : public ::testing::TestWithParam<decode_case> {};

constexpr int32_t kBlock = 16, kRank = 512, kRope = 64, kNope = 128, kV = 128;
constexpr int32_t kWidth = kRank + kRope, kQk = kNope + kRope;

/// A case's paged cache: each sequence's blocks at shuffled places of num_blocks blocks (one spare), one query row a
/// sequence, and the reference's shape (softmax scale `scale`).
struct decode_layout {
    int32_t num_seqs = 0, max_blocks = 1, num_blocks = 0;
    std::vector<int32_t> tables, query_start;
    ref::mla_shape shape;
};

decode_layout make_layout(const decode_case& c, float scale, std::mt19937& rng) {
    decode_layout l;
    l.num_seqs = int32_t(c.positions.size());
    for (int32_t pos : c.positions) l.max_blocks = std::max(l.max_blocks, pos / kBlock + 1);
    l.num_blocks = l.num_seqs * l.max_blocks + 1;
    std::vector<int32_t> perm(l.num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    l.tables.resize(size_t(l.num_seqs) * l.max_blocks);
    l.query_start.resize(l.num_seqs + 1);
    for (int32_t s = 0; s < l.num_seqs; ++s)
        for (int32_t b = 0; b < l.max_blocks; ++b) l.tables[size_t(s) * l.max_blocks + b] = perm[s * l.max_blocks + b];
    std::iota(l.query_start.begin(), l.query_start.end(), 0);
    l.shape = {.num_tokens = l.num_seqs,
               .num_seqs = l.num_seqs,
               .num_heads = c.heads,
               .nope_dim = kNope,
               .rope_dim = kRope,
               .v_dim = kV,
               .kv_lora_rank = kRank,
               .block_size = kBlock,
               .max_blocks_per_seq = l.max_blocks,
               .scale = scale};
    return l;
}

TEST_P(MlaDecode, MatchesLatentAttentionReference) {
    const decode_case c = GetParam();
    std::mt19937 rng(c.heads * 31 + int(c.positions.size()));
    const decode_layout layout = make_layout(c, 0.125f, rng);
    const int32_t num_seqs = layout.num_seqs, max_blocks = layout.max_blocks, num_blocks = layout.num_blocks;
    const std::vector<int32_t>& tables = layout.tables;
    const std::vector<int32_t>& query_start = layout.query_start;
    const std::vector<float> q = random_bf16(size_t(num_seqs) * c.heads * kQk, 1.f, rng);
    const std::vector<float> q_lat = random_f32(size_t(num_seqs) * c.heads * kRank, 0.5f, rng);
    const std::vector<float> cache = random_bf16(size_t(num_blocks) * kBlock * kWidth, 1.f, rng);
    const float scale = 0.125f;
    const ref::mla_shape& shape = layout.shape;
    std::vector<float> want(q_lat.size());
    ref::mla_attention(shape, q_lat.data(), q.data(), cache.data(), tables.data(), query_start.data(),
                       c.positions.data(), want.data());

    auto d_q = upload_bf16(q);
    auto d_q_lat = upload(q_lat);
    auto d_cache = upload_bf16(cache);
    auto d_tables = upload(tables);
    auto d_sp = upload(c.positions);
    for (int32_t splits : c.splits) {
        device_buffer<float> d_out(q_lat.size());
        device_buffer<float> d_ws(std::max<size_t>(1, mla_decode_workspace_floats(num_seqs, c.heads, splits)));
        d_out.poison();
        d_ws.poison();
        launch_mla_decode({.q_lat = d_q_lat.get(),
                           .q = d_q.get(),
                           .cache = d_cache.get(),
                           .block_tables = d_tables.get(),
                           .start_pos = d_sp.get(),
                           .o_lat = d_out.get(),
                           .workspace = d_ws.get(),
                           .num_seqs = num_seqs,
                           .num_heads = c.heads,
                           .nope_dim = kNope,
                           .rope_dim = kRope,
                           .kv_lora_rank = kRank,
                           .block_size = kBlock,
                           .max_blocks_per_seq = max_blocks,
                           .num_splits = splits,
                           .scale = scale},
                          nullptr);
        sync_and_check();
        // BF16 queries and probabilities against a double reference with fp32 queries.
        EXPECT_LT(rel_error(download(d_out), want), kBf16Tolerance) << splits << " splits";
    }
}

// The decode path of DeepSeek's real shapes end to end: q_lat by the batched absorb GEMM (BF16), the kernel with BF16
// latents in and out, the batched v_up GEMM, against the double reference chain (fp32 q_lat and o_lat).
TEST_P(MlaDecode, Bf16LatentsThroughBatchedGemmsMatchReference) {
    const decode_case c = GetParam();
    std::mt19937 rng(c.heads * 57 + int(c.positions.size()));
    const decode_layout layout = make_layout(c, 0.0625f, rng);
    const int32_t num_seqs = layout.num_seqs, max_blocks = layout.max_blocks, num_blocks = layout.num_blocks;
    const std::vector<int32_t>& tables = layout.tables;
    const std::vector<int32_t>& query_start = layout.query_start;
    const std::vector<float> q = random_bf16(size_t(num_seqs) * c.heads * kQk, 1.f, rng);
    const std::vector<float> kv_b = random_bf16(size_t(c.heads) * (kNope + kV) * kRank, 0.1f, rng);
    const std::vector<float> cache = random_bf16(size_t(num_blocks) * kBlock * kWidth, 1.f, rng);
    const ref::mla_shape& shape = layout.shape;
    std::vector<float> q_lat(size_t(num_seqs) * c.heads * kRank), o_lat(q_lat.size());
    std::vector<float> want(size_t(num_seqs) * c.heads * kV);
    ref::mla_q_absorb(shape, q.data(), kv_b.data(), q_lat.data());
    ref::mla_attention(shape, q_lat.data(), q.data(), cache.data(), tables.data(), query_start.data(),
                       c.positions.data(), o_lat.data());
    ref::mla_v_up(shape, o_lat.data(), kv_b.data(), want.data());

    auto d_q = upload_bf16(q);
    auto d_kv_b = upload_bf16(kv_b);
    auto d_cache = upload_bf16(cache);
    auto d_tables = upload(tables);
    auto d_sp = upload(c.positions);
    device_buffer<bf16> d_q_lat(q_lat.size()), d_o_lat(q_lat.size()), d_out(want.size());
    device_buffer<uint8_t> d_blas_ws(32u << 20);
    cublasLtHandle_t handle;
    ZMOE_CUBLAS_CHECK(cublasLtCreate(&handle));
    mla_absorb_gemm_params ab{.handle = handle,
                              .workspace = d_blas_ws.get(),
                              .workspace_bytes = d_blas_ws.size(),
                              .kv_b = d_kv_b.get(),
                              .in = d_q.get(),
                              .out = d_q_lat.get(),
                              .num_tokens = num_seqs,
                              .num_heads = c.heads,
                              .nope_dim = kNope,
                              .rope_dim = kRope,
                              .v_dim = kV,
                              .kv_lora_rank = kRank};
    launch_mla_q_absorb_gemm(ab, nullptr);
    sync_and_check();
    // The absorbed queries: BF16 roundings of fp32 sums.
    EXPECT_LT(rel_error(download_bf16(d_q_lat), q_lat), kBf16Tolerance);
    for (int32_t splits : c.splits) {
        device_buffer<float> d_ws(std::max<size_t>(1, mla_decode_workspace_floats(num_seqs, c.heads, splits)));
        d_o_lat.poison();
        d_out.poison();
        launch_mla_decode_bf16({.q = d_q.get(),
                                .cache = d_cache.get(),
                                .block_tables = d_tables.get(),
                                .start_pos = d_sp.get(),
                                .workspace = d_ws.get(),
                                .num_seqs = num_seqs,
                                .num_heads = c.heads,
                                .nope_dim = kNope,
                                .rope_dim = kRope,
                                .kv_lora_rank = kRank,
                                .block_size = kBlock,
                                .max_blocks_per_seq = max_blocks,
                                .num_splits = splits,
                                .scale = shape.scale},
                               {.q = d_q_lat.get(), .o = d_o_lat.get()}, nullptr);
        mla_absorb_gemm_params up = ab;
        up.in = d_o_lat.get();
        up.out = d_out.get();
        launch_mla_v_up_gemm(up, nullptr);
        sync_and_check();
        EXPECT_LT(rel_error(download_bf16(d_o_lat), o_lat), kBf16Tolerance) << splits << " splits";
        EXPECT_LT(rel_error(download_bf16(d_out), want), 2 * kBf16Tolerance) << splits << " splits";
    }
    ZMOE_CUBLAS_CHECK(cublasLtDestroy(handle));
}

// The few-token absorbed projections (launch_mla_q_absorb_gemv / launch_mla_v_up_gemv) against the double references,
// at 1..kMlaAbsorbGemvMaxTokens tokens, DeepSeek's dims and others the kernels take (nope_dim not a multiple of 32,
// a partial head group); each a BF16 rounding of fp32 sums, so within the BF16 tolerance, and the same bits twice.
TEST(MlaDecode, AbsorbGemvsMatchReference) {
    struct dims {
        int32_t heads, nope, v;
    };

    for (const dims d : {dims{16, 128, 128}, dims{128, 128, 128}, dims{20, 72, 48}, dims{3, 256, 16}})
        for (int32_t tokens = 1; tokens <= kMlaAbsorbGemvMaxTokens; ++tokens) {
            ASSERT_TRUE(mla_absorb_gemv_supported(tokens, d.nope, d.v, kRank));
            std::mt19937 rng(d.heads * 13 + tokens);
            const ref::mla_shape shape{.num_tokens = tokens,
                                       .num_seqs = tokens,
                                       .num_heads = d.heads,
                                       .nope_dim = d.nope,
                                       .rope_dim = kRope,
                                       .v_dim = d.v,
                                       .kv_lora_rank = kRank,
                                       .block_size = 16,
                                       .max_blocks_per_seq = 1,
                                       .scale = 1.f};
            const std::vector<float> q = random_bf16(size_t(tokens) * d.heads * (d.nope + kRope), 1.f, rng);
            const std::vector<float> kv_b = random_bf16(size_t(d.heads) * (d.nope + d.v) * kRank, 0.1f, rng);
            const std::vector<float> o_lat = random_bf16(size_t(tokens) * d.heads * kRank, 1.f, rng);
            std::vector<float> q_lat(o_lat.size()), out(size_t(tokens) * d.heads * d.v);
            ref::mla_q_absorb(shape, q.data(), kv_b.data(), q_lat.data());
            ref::mla_v_up(shape, o_lat.data(), kv_b.data(), out.data());

            auto d_q = upload_bf16(q);
            auto d_kv_b = upload_bf16(kv_b);
            auto d_o_lat = upload_bf16(o_lat);
            device_buffer<bf16> d_q_lat(q_lat.size()), d_out(out.size());
            d_q_lat.poison();
            d_out.poison();
            mla_absorb_gemm_params p{.kv_b = d_kv_b.get(),
                                     .in = d_q.get(),
                                     .out = d_q_lat.get(),
                                     .num_tokens = tokens,
                                     .num_heads = d.heads,
                                     .nope_dim = d.nope,
                                     .rope_dim = kRope,
                                     .v_dim = d.v,
                                     .kv_lora_rank = kRank};
            launch_mla_q_absorb_gemv(p, nullptr);
            mla_absorb_gemm_params up = p;
            up.in = d_o_lat.get();
            up.out = d_out.get();
            launch_mla_v_up_gemv(up, nullptr);
            sync_and_check();
            const std::vector<float> got_q = download_bf16(d_q_lat), got_out = download_bf16(d_out);
            const std::string at = std::to_string(d.heads) + " heads, nope " + std::to_string(d.nope) + ", v " +
                                   std::to_string(d.v) + ", " + std::to_string(tokens) + " tokens";
            EXPECT_LT(rel_error(got_q, q_lat), kBf16Tolerance) << at;
            EXPECT_LT(rel_error(got_out, out), kBf16Tolerance) << at;
            launch_mla_q_absorb_gemv(p, nullptr);
            launch_mla_v_up_gemv(up, nullptr);
            sync_and_check();
            EXPECT_EQ(download_bf16(d_q_lat), got_q) << at;
            EXPECT_EQ(download_bf16(d_out), got_out) << at;
        }
    EXPECT_FALSE(mla_absorb_gemv_supported(kMlaAbsorbGemvMaxTokens + 1, 128, 128, kRank));
    EXPECT_FALSE(mla_absorb_gemv_supported(1, 128, 128, 256));
    EXPECT_FALSE(mla_absorb_gemv_supported(1, 288, 128, kRank));
    EXPECT_FALSE(mla_absorb_gemv_supported(1, 128, 40, kRank));
}

// The decode step's fused launches against the separate ones and the CPU references: the latent rows and q_pe's RoPE
// done by the absorb kernel (launch_mla_rope_q_absorb_gemv against launch_mla_rope_kv + launch_mla_q_absorb_gemv:
// the same bits in q, the cache and q_lat; within the BF16 tolerance of ref::mla_rope_kv / ref::mla_q_absorb), at
// 1..kMlaAbsorbGemvMaxTokens tokens, both RoPE layouts, a skipped cache write, a YaRN factor, DeepSeek's dims and
// others the kernels take.
TEST(MlaDecode, RopeInAbsorbGemvMatchesRopeKernel) {
    struct dims {
        int32_t heads, nope, rope;
        bool interleave;
    };

    for (const dims d : {dims{16, 128, 64, true}, dims{16, 128, 64, false}, dims{128, 128, 64, true},
                         dims{20, 72, 32, false}, dims{3, 256, 128, true}})
        for (int32_t tokens = 1; tokens <= kMlaAbsorbGemvMaxTokens; ++tokens) {
            std::mt19937 rng(d.heads * 7 + d.rope + tokens * 3 + d.interleave);
            const int32_t qk = d.nope + d.rope, width = kRank + d.rope, num_blocks = 8;
            std::vector<int32_t> positions, slots;
            for (int32_t t = 0; t < tokens; ++t) {
                positions.push_back(37 * t + 5 + d.heads);
                slots.push_back(t == 2 ? -1 : (num_blocks - 1 - t) * kBlock + (positions.back() % kBlock));
            }
            std::vector<float> inv_freq(d.rope / 2);
            for (int32_t i = 0; i < d.rope / 2; ++i) inv_freq[i] = float(std::pow(10000.0, -2.0 * i / d.rope));
            std::vector<float> q = random_bf16(size_t(tokens) * d.heads * qk, 1.f, rng);
            const std::vector<float> kv = random_bf16(size_t(tokens) * width, 2.f, rng);
            const std::vector<float> norm_w = random_bf16(kRank, 1.f, rng);
            const std::vector<float> kv_b = random_bf16(size_t(d.heads) * (d.nope + kV) * kRank, 0.1f, rng);
            std::vector<float> cache = random_bf16(size_t(num_blocks) * kBlock * width, 1.f, rng);
            const ref::mla_shape shape{.num_tokens = tokens,
                                       .num_seqs = tokens,
                                       .num_heads = d.heads,
                                       .nope_dim = d.nope,
                                       .rope_dim = d.rope,
                                       .v_dim = kV,
                                       .kv_lora_rank = kRank,
                                       .block_size = kBlock,
                                       .max_blocks_per_seq = 1,
                                       .attention_factor = 1.25f,
                                       .eps = 1e-6f,
                                       .interleave = d.interleave,
                                       .scale = 1.f};

            auto d_kv = upload_bf16(kv);
            auto d_norm = upload_bf16(norm_w);
            auto d_kv_b = upload_bf16(kv_b);
            auto d_inv = upload(inv_freq);
            auto d_pos = upload(positions);
            auto d_slots = upload(slots);
            struct run {
                device_buffer<bf16> q, cache, q_lat;
            };
            auto launch = [&](bool fused) {
                run r{upload_bf16(q), upload_bf16(cache), device_buffer<bf16>(size_t(tokens) * d.heads * kRank)};
                r.q_lat.poison();
                const mla_rope_kv_params rope{.q = r.q.get(),
                                              .kv = d_kv.get(),
                                              .kv_norm_weight = d_norm.get(),
                                              .positions = d_pos.get(),
                                              .slot_mapping = d_slots.get(),
                                              .inv_freq = d_inv.get(),
                                              .cache = r.cache.get(),
                                              .num_tokens = tokens,
                                              .num_heads = d.heads,
                                              .nope_dim = d.nope,
                                              .rope_dim = d.rope,
                                              .kv_lora_rank = kRank,
                                              .block_size = kBlock,
                                              .attention_factor = shape.attention_factor,
                                              .eps = shape.eps,
                                              .interleave = d.interleave};
                const mla_absorb_gemm_params ab{.kv_b = d_kv_b.get(),
                                                .in = r.q.get(),
                                                .out = r.q_lat.get(),
                                                .num_tokens = tokens,
                                                .num_heads = d.heads,
                                                .nope_dim = d.nope,
                                                .rope_dim = d.rope,
                                                .v_dim = kV,
                                                .kv_lora_rank = kRank};
                if (fused) {
                    launch_mla_rope_q_absorb_gemv(rope, ab, nullptr);
                } else {
                    launch_mla_rope_kv(rope, nullptr);
                    launch_mla_q_absorb_gemv(ab, nullptr);
                }
                sync_and_check();
                return r;
            };
            const run fused = launch(true), apart = launch(false);
            const std::string at = std::to_string(d.heads) + " heads, nope " + std::to_string(d.nope) + ", rope " +
                                   std::to_string(d.rope) + (d.interleave ? " interleaved, " : " halves, ") +
                                   std::to_string(tokens) + " tokens";
            const std::vector<float> got_q = download_bf16(fused.q), got_cache = download_bf16(fused.cache);
            const std::vector<float> got_q_lat = download_bf16(fused.q_lat);
            EXPECT_EQ(got_q, download_bf16(apart.q)) << at;
            EXPECT_EQ(got_cache, download_bf16(apart.cache)) << at;
            EXPECT_EQ(got_q_lat, download_bf16(apart.q_lat)) << at;
            std::vector<float> q_lat(got_q_lat.size());
            ref::mla_q_absorb(shape, q.data(), kv_b.data(), q_lat.data());  // the nope part: not rotated
            ref::mla_rope_kv(shape, q.data(), kv.data(), norm_w.data(), positions.data(), slots.data(), inv_freq.data(),
                             cache.data());
            EXPECT_LT(rel_error(got_q, q), kBf16Tolerance) << at << ": rotated queries";
            EXPECT_LT(rel_error(got_cache, cache), kBf16Tolerance) << at << ": cache rows";
            EXPECT_LT(rel_error(got_q_lat, q_lat), kBf16Tolerance) << at << ": absorbed queries";
        }
}

// The split combine done by the v_up kernel (launch_mla_decode_v_up_gemv) against the decode's own combine followed by
// launch_mla_v_up_gemv (the same bits) and the double reference chain, at the batches the streaming kernels take.
TEST_P(MlaDecode, CombineInVUpGemvMatchesCombine) {
    const decode_case c = GetParam();
    const auto num_seqs = int32_t(c.positions.size());
    if (num_seqs > kMlaAbsorbGemvMaxTokens) GTEST_SKIP() << "more sequences than the streaming kernels take";
    std::mt19937 rng(c.heads * 91 + num_seqs);
    const decode_layout layout = make_layout(c, 0.0625f, rng);
    const int32_t max_blocks = layout.max_blocks, num_blocks = layout.num_blocks;
    const std::vector<int32_t>& tables = layout.tables;
    const std::vector<int32_t>& query_start = layout.query_start;
    const std::vector<float> q = random_bf16(size_t(num_seqs) * c.heads * kQk, 1.f, rng);
    const std::vector<float> q_lat = random_bf16(size_t(num_seqs) * c.heads * kRank, 0.5f, rng);
    const std::vector<float> kv_b = random_bf16(size_t(c.heads) * (kNope + kV) * kRank, 0.1f, rng);
    const std::vector<float> cache = random_bf16(size_t(num_blocks) * kBlock * kWidth, 1.f, rng);
    const ref::mla_shape& shape = layout.shape;
    std::vector<float> o_lat(q_lat.size()), want(size_t(num_seqs) * c.heads * kV);
    ref::mla_attention(shape, q_lat.data(), q.data(), cache.data(), tables.data(), query_start.data(),
                       c.positions.data(), o_lat.data());
    ref::mla_v_up(shape, o_lat.data(), kv_b.data(), want.data());

    auto d_q = upload_bf16(q);
    auto d_q_lat = upload_bf16(q_lat);
    auto d_kv_b = upload_bf16(kv_b);
    auto d_cache = upload_bf16(cache);
    auto d_tables = upload(tables);
    auto d_sp = upload(c.positions);
    device_buffer<bf16> d_o_lat(q_lat.size()), d_fused(want.size()), d_apart(want.size());
    for (int32_t splits : c.splits) {
        device_buffer<float> d_ws(std::max<size_t>(1, mla_decode_workspace_floats(num_seqs, c.heads, splits)));
        const mla_decode_params dp{.q = d_q.get(),
                                   .cache = d_cache.get(),
                                   .block_tables = d_tables.get(),
                                   .start_pos = d_sp.get(),
                                   .workspace = d_ws.get(),
                                   .num_seqs = num_seqs,
                                   .num_heads = c.heads,
                                   .nope_dim = kNope,
                                   .rope_dim = kRope,
                                   .kv_lora_rank = kRank,
                                   .block_size = kBlock,
                                   .max_blocks_per_seq = max_blocks,
                                   .num_splits = splits,
                                   .scale = shape.scale};
        const mla_latents_bf16 lat{.q = d_q_lat.get(), .o = d_o_lat.get()};
        mla_absorb_gemm_params up{.kv_b = d_kv_b.get(),
                                  .in = d_o_lat.get(),
                                  .out = d_apart.get(),
                                  .num_tokens = num_seqs,
                                  .num_heads = c.heads,
                                  .nope_dim = kNope,
                                  .rope_dim = kRope,
                                  .v_dim = kV,
                                  .kv_lora_rank = kRank};
        d_ws.poison();
        d_apart.poison();
        launch_mla_decode_bf16(dp, lat, nullptr);
        launch_mla_v_up_gemv(up, nullptr);
        sync_and_check();
        up.out = d_fused.get();
        d_ws.poison();
        d_o_lat.poison();
        d_fused.poison();
        launch_mla_decode_v_up_gemv(dp, lat, up, nullptr);
        sync_and_check();
        const std::vector<float> got = download_bf16(d_fused);
        EXPECT_EQ(got, download_bf16(d_apart)) << splits << " splits";
        EXPECT_LT(rel_error(got, want), 2 * kBf16Tolerance) << splits << " splits";
    }
}

TEST(MlaDecode, SplitsAndWorkspace) {
    EXPECT_EQ(mla_decode_splits(1, 16, 132), kMlaDecodeMaxSplits);
    EXPECT_EQ(mla_decode_splits(128, 16, 132), 3);
    EXPECT_EQ(mla_decode_splits(200, 16, 132), 2);
    EXPECT_EQ(mla_decode_splits(256, 16, 132), 1);  // 256 of the 264 two-a-SM slots: no split
    EXPECT_EQ(mla_decode_splits(512, 16, 132), 1);
    EXPECT_EQ(mla_decode_workspace_floats(8, 16, 1), 0u);
    EXPECT_GT(mla_decode_workspace_floats(8, 16, 4), size_t(8) * 16 * 4 * 512);
    EXPECT_TRUE(mla_decode_supported(512, 64));
    EXPECT_FALSE(mla_decode_supported(32, 8));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaDecode,
                         ::testing::Values(decode_case{16, {0, 30, 31, 32, 64, 100, 7}, {1, 2, 5, 32}},
                                           decode_case{16, {1023, 2500}, {1, 3, 8, 32}},
                                           decode_case{20, {40, 0, 333}, {1, 4}}, decode_case{128, {700}, {1, 6}}),
                         [](const auto& info) {
                             return make_name("h", info.param.heads, "_s", info.param.positions.size(), "_t",
                                              info.index);
                         });

}  // namespace
}  // namespace zmoe::kernels::test
