// MLA prefill in the expanded form against the absorbed form's CPU references: the latents of every position a
// chunk sees gathered through shuffled block tables, up-projected (cuBLASLt), laid out as per-head K / V, and run
// through the prefill attention kernel (192 / 128 for DeepSeek's dims, zero-padded heads for the fixtures') must give
// what q_absorb + the latent attention + v_up give, for prefill chunks after cached positions and several sequences
// in one launch. The data-movement kernels are checked bit-exact on their own, and at the kernel's own head dims the
// direct K / V (launch_mla_gather_latent_rope + launch_mla_expand_gemm) against the kv_up path.

#include <algorithm>
#include <numeric>

#include "kernels/mla_gemm.hpp"
#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

constexpr int32_t kCacheBlock = 16;   // the latent cache's block size
constexpr int32_t kExpandBlock = 64;  // expanded rows per block (each sequence's rows start at a multiple)

struct prefill_case {
    int32_t heads, nope, rope, v_dim, rank;
    std::vector<std::pair<int32_t, int32_t>> seqs;  ///< (start_pos, query tokens)
};

int32_t round_up(int32_t n, int32_t m) { return (n + m - 1) / m * m; }

/// The kernel's head dims for a model's: (192, 128) as they are, else both padded to one plain head dim.
std::pair<int32_t, int32_t> kernel_dims(int32_t qk, int32_t v) {
    if (qk != v && paged_attention_dims_supported(qk, v)) return {qk, v};
    for (int32_t d : {16, 32, 64, 128, 256})
        if (d >= std::max(qk, v)) return {d, d};
    return {0, 0};
}

class MlaPrefill : public ::testing::TestWithParam<prefill_case> {};

TEST_P(MlaPrefill, ExpandedMatchesAbsorbedReference) {
    const prefill_case c = GetParam();
    std::mt19937 rng(c.heads * 977 + c.rank + int(c.seqs.size()));
    const int32_t num_seqs = int32_t(c.seqs.size()), width = c.rank + c.rope, qk = c.nope + c.rope;
    const auto [k_dim, v_out] = kernel_dims(qk, c.v_dim);
    ASSERT_GT(k_dim, 0);

    // The latent cache: shuffled blocks of kCacheBlock positions, every position [0, end) of each sequence filled.
    int32_t max_blocks = 0;
    for (auto [sp, n] : c.seqs) max_blocks = std::max(max_blocks, round_up(sp + n, kCacheBlock) / kCacheBlock);
    const int32_t num_blocks = num_seqs * max_blocks + 2;
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> tables(size_t(num_seqs) * max_blocks), query_start{0}, start_pos;
    for (int32_t s = 0; s < num_seqs; ++s) {
        for (int32_t b = 0; b < max_blocks; ++b) tables[size_t(s) * max_blocks + b] = perm[s * max_blocks + b];
        start_pos.push_back(c.seqs[s].first);
        query_start.push_back(query_start.back() + c.seqs[s].second);
    }
    const int32_t T = query_start.back();
    const std::vector<float> q = random_bf16(size_t(T) * c.heads * qk, 1.f, rng);
    const std::vector<float> kv_b = random_bf16(size_t(c.heads) * (c.nope + c.v_dim) * c.rank, 0.2f, rng);
    const std::vector<float> cache = random_bf16(size_t(num_blocks) * kCacheBlock * width, 1.f, rng);
    const float scale = 1.f / std::sqrt(float(qk)) * 1.3f;  // a YaRN-like mscale on top

    // The expanded layout: sequence s's rows [base_s, base_s + round_up(end_s, kExpandBlock)), row base_s + pos
    // from the cache slot of position pos, padding rows from no slot (-1).
    std::vector<int32_t> slots, e_tables, base;
    int32_t e_width = 0;
    for (int32_t s = 0; s < num_seqs; ++s)
        e_width = std::max(e_width, round_up(start_pos[s] + c.seqs[s].second, kExpandBlock) / kExpandBlock);
    for (int32_t s = 0; s < num_seqs; ++s) {
        const int32_t end = start_pos[s] + c.seqs[s].second, rows = round_up(end, kExpandBlock);
        base.push_back(int32_t(slots.size()));
        for (int32_t b = 0; b < e_width; ++b)
            e_tables.push_back(base.back() / kExpandBlock + std::min(b, rows / kExpandBlock - 1));
        for (int32_t pos = 0; pos < rows; ++pos)
            slots.push_back(
                pos < end ? tables[size_t(s) * max_blocks + pos / kCacheBlock] * kCacheBlock + pos % kCacheBlock : -1);
    }
    const int32_t N = int32_t(slots.size());

    auto d_q = upload_bf16(q);
    auto d_kv_b = upload_bf16(kv_b);
    auto d_cache = upload_bf16(cache);
    auto d_slots = upload(slots);
    auto d_e_tables = upload(e_tables);
    auto d_qs = upload(query_start);
    auto d_sp = upload(start_pos);
    device_buffer<bf16> d_latent(size_t(N) * c.rank), d_up(size_t(N) * c.heads * (c.nope + c.v_dim));
    device_buffer<bf16> d_k(size_t(N) * c.heads * k_dim), d_v(size_t(N) * c.heads * v_out);
    device_buffer<bf16> d_q_pad(size_t(T) * c.heads * k_dim), d_o(size_t(T) * c.heads * v_out);
    device_buffer<bf16> d_out(size_t(T) * c.heads * c.v_dim);
    for (auto* b : {&d_latent, &d_up, &d_k, &d_v, &d_q_pad, &d_o, &d_out}) b->poison();

    // 1. Gather the latents; bit-exact.
    launch_mla_gather_latent({.cache = d_cache.get(),
                              .slots = d_slots.get(),
                              .latent = d_latent.get(),
                              .num_rows = N,
                              .kv_lora_rank = c.rank,
                              .rope_dim = c.rope},
                             nullptr);
    sync_and_check();
    const std::vector<float> latent = download_bf16(d_latent);
    for (int32_t i = 0; i < N; ++i)
        for (int32_t e = 0; e < c.rank; ++e)
            ASSERT_EQ(latent[size_t(i) * c.rank + e], slots[i] < 0 ? 0.f : cache[size_t(slots[i]) * width + e])
                << "row " << i << " element " << e;

    // 2. Up-projection on cuBLASLt.
    device_buffer<uint8_t> d_ws(32u << 20);
    cublasLtHandle_t handle;
    ZMOE_CUBLAS_CHECK(cublasLtCreate(&handle));
    launch_gemm_bf16({.handle = handle,
                      .workspace = d_ws.get(),
                      .workspace_bytes = d_ws.size(),
                      .x = d_latent.get(),
                      .w = d_kv_b.get(),
                      .y = d_up.get(),
                      .m = N,
                      .n = c.heads * (c.nope + c.v_dim),
                      .k = c.rank},
                     nullptr);
    sync_and_check();
    ZMOE_CUBLAS_CHECK(cublasLtDestroy(handle));

    // 3. Per-head K and V; bit-exact copies of kv_up and k_pe, zeros in the padding.
    launch_mla_build_kv({.kv_up = d_up.get(),
                         .cache = d_cache.get(),
                         .slots = d_slots.get(),
                         .k = d_k.get(),
                         .v = d_v.get(),
                         .num_rows = N,
                         .num_heads = c.heads,
                         .nope_dim = c.nope,
                         .rope_dim = c.rope,
                         .v_dim = c.v_dim,
                         .kv_lora_rank = c.rank,
                         .k_dim = k_dim,
                         .v_out_dim = v_out},
                        nullptr);
    sync_and_check();
    {
        const std::vector<float> up = download_bf16(d_up), k = download_bf16(d_k), v = download_bf16(d_v);
        const int32_t upw = c.nope + c.v_dim;
        for (int32_t i = 0; i < N; ++i)
            for (int32_t h = 0; h < c.heads; ++h) {
                for (int32_t d = 0; d < k_dim; ++d) {
                    const float want =
                        d < c.nope ? up[(size_t(i) * c.heads + h) * upw + d]
                        : d < qk   ? (slots[i] < 0 ? 0.f : cache[size_t(slots[i]) * width + c.rank + d - c.nope])
                                   : 0.f;
                    ASSERT_EQ(k[(size_t(i) * c.heads + h) * k_dim + d], want) << "K row " << i << " head " << h;
                }
                for (int32_t d = 0; d < v_out; ++d) {
                    const float want = d < c.v_dim ? up[(size_t(i) * c.heads + h) * upw + c.nope + d] : 0.f;
                    ASSERT_EQ(v[(size_t(i) * c.heads + h) * v_out + d], want) << "V row " << i << " head " << h;
                }
            }
    }

    // 3'. Where the kernel takes the model's head dims: the same K and V straight from the latents (the gather
    // writing K's rope part, the batched GEMMs its nope part and V, no kv_up): the copies bit-exact, the products
    // the kv_up GEMM's up to fp32 summation order (one BF16 rounding apart at most).
    if (k_dim == qk && v_out == c.v_dim) {
        device_buffer<bf16> d_latent2(d_latent.size()), d_k2(d_k.size()), d_v2(d_v.size());
        for (auto* b : {&d_latent2, &d_k2, &d_v2}) b->poison();
        launch_mla_gather_latent_rope({.cache = d_cache.get(),
                                       .slots = d_slots.get(),
                                       .latent = d_latent2.get(),
                                       .k = d_k2.get(),
                                       .num_rows = N,
                                       .num_heads = c.heads,
                                       .nope_dim = c.nope,
                                       .rope_dim = c.rope,
                                       .kv_lora_rank = c.rank},
                                      nullptr);
        cublasLtHandle_t h2;
        ZMOE_CUBLAS_CHECK(cublasLtCreate(&h2));
        launch_mla_expand_gemm({.handle = h2,
                                .workspace = d_ws.get(),
                                .workspace_bytes = d_ws.size(),
                                .kv_b = d_kv_b.get(),
                                .latent = d_latent2.get(),
                                .k = d_k2.get(),
                                .v = d_v2.get(),
                                .num_rows = N,
                                .num_heads = c.heads,
                                .nope_dim = c.nope,
                                .rope_dim = c.rope,
                                .v_dim = c.v_dim,
                                .kv_lora_rank = c.rank},
                               nullptr);
        sync_and_check();
        ZMOE_CUBLAS_CHECK(cublasLtDestroy(h2));
        EXPECT_EQ(download_bf16(d_latent2), download_bf16(d_latent));
        const std::vector<float> k = download_bf16(d_k), k2 = download_bf16(d_k2);
        std::vector<bool> rope_part(k.size()), nope_part(k.size());
        for (size_t e = 0; e < k.size(); ++e) {
            rope_part[e] = int32_t(e % qk) >= c.nope;
            nope_part[e] = !rope_part[e];
        }
        for (size_t e = 0; e < k.size(); ++e) {
            if (rope_part[e]) {
                ASSERT_EQ(k2[e], k[e]) << "K element " << e << " (rope part)";
            }
        }
        EXPECT_LT(rel_error(k2, k, &nope_part), kBf16Tolerance);
        EXPECT_LT(rel_error(download_bf16(d_v2), download_bf16(d_v)), kBf16Tolerance);
    }

    // 4. Attention: multi-head, the expanded rows through their block tables, causal with each chunk's offset.
    const bf16* q_in = d_q.get();
    if (k_dim != qk) {
        launch_mla_repack_heads({.in = d_q.get(),
                                 .out = d_q_pad.get(),
                                 .num_rows = T,
                                 .num_heads = c.heads,
                                 .in_dim = qk,
                                 .out_dim = k_dim},
                                nullptr);
        q_in = d_q_pad.get();
    }
    // The rows per item the DeepSeek worker plans with (128 on Hopper: the warp-specialised kernel for 192 / 128).
    const int32_t rows_per_item = paged_attention_rows_per_item(k_dim, v_out);
    const std::vector<int32_t> items = paged_attention_plan(query_start, c.heads, c.heads, rows_per_item);
    auto d_items = upload(items);
    launch_paged_attention({.q = q_in,
                            .k_cache = d_k.get(),
                            .v_cache = d_v.get(),
                            .block_tables = d_e_tables.get(),
                            .query_start = d_qs.get(),
                            .start_pos = d_sp.get(),
                            .work_items = d_items.get(),
                            .out = v_out != c.v_dim ? d_o.get() : d_out.get(),
                            .num_seqs = num_seqs,
                            .num_work_items = int32_t(items.size() / 2),
                            .num_q_heads = c.heads,
                            .num_kv_heads = c.heads,
                            .head_dim = k_dim,
                            .block_size = kExpandBlock,
                            .max_blocks_per_seq = e_width,
                            .scale = scale,
                            .rows_per_item = rows_per_item,
                            .v_head_dim = v_out},
                           nullptr);
    if (v_out != c.v_dim)
        launch_mla_repack_heads({.in = d_o.get(),
                                 .out = d_out.get(),
                                 .num_rows = T,
                                 .num_heads = c.heads,
                                 .in_dim = v_out,
                                 .out_dim = c.v_dim},
                                nullptr);
    sync_and_check();

    // The absorbed form's references from the same inputs.
    const ref::mla_shape shape{.num_tokens = T,
                               .num_seqs = num_seqs,
                               .num_heads = c.heads,
                               .nope_dim = c.nope,
                               .rope_dim = c.rope,
                               .v_dim = c.v_dim,
                               .kv_lora_rank = c.rank,
                               .block_size = kCacheBlock,
                               .max_blocks_per_seq = max_blocks,
                               .scale = scale};
    std::vector<float> q_lat(size_t(T) * c.heads * c.rank), o_lat(q_lat.size()), want(size_t(T) * c.heads * c.v_dim);
    ref::mla_q_absorb(shape, q.data(), kv_b.data(), q_lat.data());
    ref::mla_attention(shape, q_lat.data(), q.data(), cache.data(), tables.data(), query_start.data(), start_pos.data(),
                       o_lat.data());
    ref::mla_v_up(shape, o_lat.data(), kv_b.data(), want.data());
    // BF16 k_nope, v and probabilities (the reference keeps the latent products in double): a little above the
    // plain BF16 tolerance.
    EXPECT_LT(rel_error(download_bf16(d_out), want), 2 * kBf16Tolerance);
}

TEST(MlaPrefill, RepackPadsAndTruncates) {
    std::mt19937 rng(5);
    const int32_t rows = 7, heads = 3, in_dim = 12, out_dim = 32;
    const std::vector<float> x = random_bf16(size_t(rows) * heads * in_dim, 1.f, rng);
    auto d_x = upload_bf16(x);
    device_buffer<bf16> d_pad(size_t(rows) * heads * out_dim), d_back(x.size());
    d_pad.poison();
    d_back.poison();
    launch_mla_repack_heads({.in = d_x.get(),
                             .out = d_pad.get(),
                             .num_rows = rows,
                             .num_heads = heads,
                             .in_dim = in_dim,
                             .out_dim = out_dim},
                            nullptr);
    launch_mla_repack_heads({.in = d_pad.get(),
                             .out = d_back.get(),
                             .num_rows = rows,
                             .num_heads = heads,
                             .in_dim = out_dim,
                             .out_dim = in_dim},
                            nullptr);
    sync_and_check();
    const std::vector<float> pad = download_bf16(d_pad);
    for (int32_t i = 0; i < rows * heads; ++i)
        for (int32_t d = 0; d < out_dim; ++d)
            ASSERT_EQ(pad[size_t(i) * out_dim + d], d < in_dim ? x[size_t(i) * in_dim + d] : 0.f);
    EXPECT_EQ(download_bf16(d_back), x);
}

// Chunks after cached positions (tile edges 63 / 64 / 65, a chunk starting mid-block), several sequences in one
// launch, a two-token chunk.
const std::vector<std::pair<int32_t, int32_t>> kChunks{{0, 70}, {37, 5}, {130, 64}, {0, 2}, {63, 65}};
const std::vector<std::pair<int32_t, int32_t>> kLong{{900, 130}, {0, 257}};

INSTANTIATE_TEST_SUITE_P(Shapes, MlaPrefill,
                         ::testing::Values(prefill_case{4, 16, 8, 12, 32, kChunks},       // the V3 fixtures: pad 32
                                           prefill_case{4, 16, 8, 16, 24, kChunks},       // deepseek_v3_flat: pad 32
                                           prefill_case{16, 128, 64, 128, 512, kChunks},  // DeepSeek-V2-Lite: 192/128
                                           prefill_case{16, 128, 64, 128, 512, kLong},
                                           prefill_case{8, 64, 32, 64, 128, kChunks}),  // 96 / 64: pad 128
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("h", c.heads, "_dn", c.nope, "_dr", c.rope, "_dv", c.v_dim, "_r", c.rank,
                                              "_s", c.seqs.size(), "_t", info.index);
                         });

}  // namespace
}  // namespace zmoe::kernels::test
