// The tensor-core MLA decode kernel against the latent attention's CPU reference: one query token per sequence at
// contexts across tile edges (1, 31, 32, 33 keys ...) and long ones, shuffled cache blocks, 16 heads (one MMA row
// group), a head count that leaves a partial group, every split count from one to more splits than tiles; and the
// decode path with BF16 latents between the batched absorb / v_up GEMMs.

#include <algorithm>
#include <numeric>

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

TEST_P(MlaDecode, MatchesLatentAttentionReference) {
    const decode_case c = GetParam();
    constexpr int32_t kBlock = 16, kRank = 512, kRope = 64, kNope = 128, kV = 128;
    std::mt19937 rng(c.heads * 31 + int(c.positions.size()));
    const auto num_seqs = int32_t(c.positions.size());
    const int32_t width = kRank + kRope, qk = kNope + kRope;
    int32_t max_blocks = 1;
    for (int32_t pos : c.positions) max_blocks = std::max(max_blocks, pos / kBlock + 1);
    const int32_t num_blocks = num_seqs * max_blocks + 1;
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> tables(size_t(num_seqs) * max_blocks), query_start(num_seqs + 1);
    for (int32_t s = 0; s < num_seqs; ++s)
        for (int32_t b = 0; b < max_blocks; ++b) tables[size_t(s) * max_blocks + b] = perm[s * max_blocks + b];
    std::iota(query_start.begin(), query_start.end(), 0);
    const std::vector<float> q = random_bf16(size_t(num_seqs) * c.heads * qk, 1.f, rng);
    const std::vector<float> q_lat = random_f32(size_t(num_seqs) * c.heads * kRank, 0.5f, rng);
    const std::vector<float> cache = random_bf16(size_t(num_blocks) * kBlock * width, 1.f, rng);
    const float scale = 0.125f;
    const ref::mla_shape shape{.num_tokens = num_seqs,
                               .num_seqs = num_seqs,
                               .num_heads = c.heads,
                               .nope_dim = kNope,
                               .rope_dim = kRope,
                               .v_dim = kV,
                               .kv_lora_rank = kRank,
                               .block_size = kBlock,
                               .max_blocks_per_seq = max_blocks,
                               .scale = scale};
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
    constexpr int32_t kBlock = 16, kRank = 512, kRope = 64, kNope = 128, kV = 128;
    std::mt19937 rng(c.heads * 57 + int(c.positions.size()));
    const auto num_seqs = int32_t(c.positions.size());
    const int32_t width = kRank + kRope, qk = kNope + kRope;
    int32_t max_blocks = 1;
    for (int32_t pos : c.positions) max_blocks = std::max(max_blocks, pos / kBlock + 1);
    const int32_t num_blocks = num_seqs * max_blocks + 1;
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> tables(size_t(num_seqs) * max_blocks), query_start(num_seqs + 1);
    for (int32_t s = 0; s < num_seqs; ++s)
        for (int32_t b = 0; b < max_blocks; ++b) tables[size_t(s) * max_blocks + b] = perm[s * max_blocks + b];
    std::iota(query_start.begin(), query_start.end(), 0);
    const std::vector<float> q = random_bf16(size_t(num_seqs) * c.heads * qk, 1.f, rng);
    const std::vector<float> kv_b = random_bf16(size_t(c.heads) * (kNope + kV) * kRank, 0.1f, rng);
    const std::vector<float> cache = random_bf16(size_t(num_blocks) * kBlock * width, 1.f, rng);
    const ref::mla_shape shape{.num_tokens = num_seqs,
                               .num_seqs = num_seqs,
                               .num_heads = c.heads,
                               .nope_dim = kNope,
                               .rope_dim = kRope,
                               .v_dim = kV,
                               .kv_lora_rank = kRank,
                               .block_size = kBlock,
                               .max_blocks_per_seq = max_blocks,
                               .scale = 0.0625f};
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
    constexpr int32_t kRank = 512, kRope = 64;
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
