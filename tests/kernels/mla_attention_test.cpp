// The multi-head latent attention kernels against their CPU references, stage by stage (each stage fed the GPU's
// output of the previous one): latent norm + RoPE + cache write, query absorption, attention over the latents,
// value up-projection. Mixed batches (prefill chunks after cached positions, decodes, a skipped cache write),
// shuffled block tables, both RoPE layouts, fixture-sized and DeepSeek-V2-Lite-sized heads.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct mla_case {
    int32_t heads, nope, rope, v_dim, rank;
    bool interleave;
    std::vector<std::pair<int32_t, int32_t>> seqs;  ///< (start_pos, query tokens)
};

class MlaAttention : public ::testing::TestWithParam<mla_case> {};

TEST_P(MlaAttention, StagesMatchReference) {
    const mla_case c = GetParam();
    constexpr int32_t kBlock = 16;
    std::mt19937 rng(c.heads * 131 + c.rank * 7 + c.rope + int(c.seqs.size()));
    const int32_t num_seqs = int32_t(c.seqs.size()), width = c.rank + c.rope, qk = c.nope + c.rope;
    int32_t max_blocks = 0;
    for (auto [sp, n] : c.seqs) max_blocks = std::max(max_blocks, (sp + n + kBlock - 1) / kBlock);
    const int32_t num_blocks = num_seqs * max_blocks + 3;
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> tables(size_t(num_seqs) * max_blocks), query_start{0}, start_pos, positions, slots;
    for (int32_t s = 0; s < num_seqs; ++s) {
        for (int32_t b = 0; b < max_blocks; ++b) tables[size_t(s) * max_blocks + b] = perm[s * max_blocks + b];
        const auto [sp, n] = c.seqs[s];
        for (int32_t i = 0; i < n; ++i) {
            const int32_t pos = sp + i;
            positions.push_back(pos);
            slots.push_back(tables[size_t(s) * max_blocks + pos / kBlock] * kBlock + pos % kBlock);
        }
        start_pos.push_back(sp);
        query_start.push_back(query_start.back() + n);
    }
    const int32_t T = query_start.back();
    slots[T / 2] = -1;  // a padding row: no cache write (its own position keeps the cached value)

    std::vector<float> q = random_bf16(size_t(T) * c.heads * qk, 1.f, rng);
    const std::vector<float> kv = random_bf16(size_t(T) * width, 2.f, rng);
    const std::vector<float> norm_w = random_bf16(c.rank, 1.f, rng);
    const std::vector<float> kv_b = random_bf16(size_t(c.heads) * (c.nope + c.v_dim) * c.rank, 0.2f, rng);
    std::vector<float> cache = random_bf16(size_t(num_blocks) * kBlock * width, 1.f, rng);  // earlier positions
    std::vector<float> inv_freq(c.rope / 2);
    for (int32_t i = 0; i < c.rope / 2; ++i) inv_freq[i] = float(std::pow(10000.0, -2.0 * i / c.rope));
    const ref::mla_shape shape{.num_tokens = T,
                               .num_seqs = num_seqs,
                               .num_heads = c.heads,
                               .nope_dim = c.nope,
                               .rope_dim = c.rope,
                               .v_dim = c.v_dim,
                               .kv_lora_rank = c.rank,
                               .block_size = kBlock,
                               .max_blocks_per_seq = max_blocks,
                               .attention_factor = 1.25f,
                               .eps = 1e-6f,
                               .interleave = c.interleave,
                               .scale = 1.f / std::sqrt(float(qk))};

    auto d_q = upload_bf16(q);
    auto d_kv = upload_bf16(kv);
    auto d_norm = upload_bf16(norm_w);
    auto d_kv_b = upload_bf16(kv_b);
    auto d_cache = upload_bf16(cache);
    auto d_inv = upload(inv_freq);
    auto d_pos = upload(positions);
    auto d_slots = upload(slots);
    auto d_tables = upload(tables);
    auto d_qs = upload(query_start);
    auto d_sp = upload(start_pos);
    device_buffer<float> d_q_lat(size_t(T) * c.heads * c.rank), d_o_lat(size_t(T) * c.heads * c.rank);
    device_buffer<bf16> d_out(size_t(T) * c.heads * c.v_dim);
    d_q_lat.poison();
    d_o_lat.poison();
    d_out.poison();

    // 1. Latent norm + RoPE + cache write.
    launch_mla_rope_kv({.q = d_q.get(),
                        .kv = d_kv.get(),
                        .kv_norm_weight = d_norm.get(),
                        .positions = d_pos.get(),
                        .slot_mapping = d_slots.get(),
                        .inv_freq = d_inv.get(),
                        .cache = d_cache.get(),
                        .num_tokens = T,
                        .num_heads = c.heads,
                        .nope_dim = c.nope,
                        .rope_dim = c.rope,
                        .kv_lora_rank = c.rank,
                        .block_size = kBlock,
                        .attention_factor = shape.attention_factor,
                        .eps = shape.eps,
                        .interleave = c.interleave},
                       nullptr);
    sync_and_check();
    ref::mla_rope_kv(shape, q.data(), kv.data(), norm_w.data(), positions.data(), slots.data(), inv_freq.data(),
                     cache.data());
    const std::vector<float> q_gpu = download_bf16(d_q), cache_gpu = download_bf16(d_cache);
    EXPECT_LT(rel_error(q_gpu, q), kBf16Tolerance) << "rotated queries";
    EXPECT_LT(rel_error(cache_gpu, cache), kBf16Tolerance) << "cache rows";

    // 2. Query absorption, from the GPU's rotated queries (the nope part is untouched by step 1).
    launch_mla_q_absorb({.q = d_q.get(),
                         .kv_b = d_kv_b.get(),
                         .q_lat = d_q_lat.get(),
                         .num_tokens = T,
                         .num_heads = c.heads,
                         .nope_dim = c.nope,
                         .rope_dim = c.rope,
                         .v_dim = c.v_dim,
                         .kv_lora_rank = c.rank},
                        nullptr);
    sync_and_check();
    std::vector<float> q_lat(d_q_lat.size());
    ref::mla_q_absorb(shape, q_gpu.data(), kv_b.data(), q_lat.data());
    const std::vector<float> q_lat_gpu = download(d_q_lat);
    EXPECT_LT(rel_error(q_lat_gpu, q_lat), 1e-4) << "absorbed queries";

    // 3. Attention over the latents.
    launch_mla_attention({.q_lat = d_q_lat.get(),
                          .q = d_q.get(),
                          .cache = d_cache.get(),
                          .block_tables = d_tables.get(),
                          .query_start = d_qs.get(),
                          .start_pos = d_sp.get(),
                          .o_lat = d_o_lat.get(),
                          .num_tokens = T,
                          .num_seqs = num_seqs,
                          .num_heads = c.heads,
                          .nope_dim = c.nope,
                          .rope_dim = c.rope,
                          .kv_lora_rank = c.rank,
                          .block_size = kBlock,
                          .max_blocks_per_seq = max_blocks,
                          .scale = shape.scale},
                         nullptr);
    sync_and_check();
    std::vector<float> o_lat(d_o_lat.size());
    ref::mla_attention(shape, q_lat_gpu.data(), q_gpu.data(), cache_gpu.data(), tables.data(), query_start.data(),
                       start_pos.data(), o_lat.data());
    const std::vector<float> o_lat_gpu = download(d_o_lat);
    EXPECT_LT(rel_error(o_lat_gpu, o_lat), 1e-4) << "latent attention";

    // 4. Value up-projection.
    launch_mla_v_up({.o_lat = d_o_lat.get(),
                     .kv_b = d_kv_b.get(),
                     .out = d_out.get(),
                     .num_tokens = T,
                     .num_heads = c.heads,
                     .nope_dim = c.nope,
                     .v_dim = c.v_dim,
                     .kv_lora_rank = c.rank},
                    nullptr);
    sync_and_check();
    std::vector<float> out(d_out.size());
    ref::mla_v_up(shape, o_lat_gpu.data(), kv_b.data(), out.data());
    EXPECT_LT(rel_error(download_bf16(d_out), out), kBf16Tolerance) << "value up-projection";

    // 5. The three absorbed launches over a listed subset of the tokens (a step's decodes, while its prefill chunks
    // take the expanded form): listed tokens bit-identical to the launches over every token, the others untouched.
    std::vector<int32_t> listed;
    for (int32_t t = T - 1; t >= 0; t -= 2) listed.push_back(t);
    auto d_rows = upload(listed);
    const auto n_listed = int32_t(listed.size());
    device_buffer<float> d_q_lat2(d_q_lat.size()), d_o_lat2(d_o_lat.size());
    device_buffer<bf16> d_out2(d_out.size());
    d_q_lat2.poison();
    d_o_lat2.poison();
    d_out2.poison();
    launch_mla_q_absorb({.q = d_q.get(),
                         .kv_b = d_kv_b.get(),
                         .q_lat = d_q_lat2.get(),
                         .rows = d_rows.get(),
                         .num_tokens = n_listed,
                         .num_heads = c.heads,
                         .nope_dim = c.nope,
                         .rope_dim = c.rope,
                         .v_dim = c.v_dim,
                         .kv_lora_rank = c.rank},
                        nullptr);
    launch_mla_attention({.q_lat = d_q_lat.get(),
                          .q = d_q.get(),
                          .cache = d_cache.get(),
                          .block_tables = d_tables.get(),
                          .query_start = d_qs.get(),
                          .start_pos = d_sp.get(),
                          .o_lat = d_o_lat2.get(),
                          .rows = d_rows.get(),
                          .num_tokens = n_listed,
                          .num_seqs = num_seqs,
                          .num_heads = c.heads,
                          .nope_dim = c.nope,
                          .rope_dim = c.rope,
                          .kv_lora_rank = c.rank,
                          .block_size = kBlock,
                          .max_blocks_per_seq = max_blocks,
                          .scale = shape.scale},
                         nullptr);
    launch_mla_v_up({.o_lat = d_o_lat.get(),
                     .kv_b = d_kv_b.get(),
                     .out = d_out2.get(),
                     .rows = d_rows.get(),
                     .num_tokens = n_listed,
                     .num_heads = c.heads,
                     .nope_dim = c.nope,
                     .v_dim = c.v_dim,
                     .kv_lora_rank = c.rank},
                    nullptr);
    sync_and_check();
    auto same_rows = [&](const auto& full, const auto& part, size_t row_elems, const char* what) {
        for (int32_t t = 0; t < T; ++t) {
            const bool is_listed = std::find(listed.begin(), listed.end(), t) != listed.end();
            for (size_t e = 0; e < row_elems; ++e) {
                const size_t i = size_t(t) * row_elems + e;
                if (is_listed)
                    ASSERT_EQ(std::memcmp(&full[i], &part[i], sizeof(full[i])), 0) << what << " token " << t;
                else
                    ASSERT_TRUE(std::isnan(float(part[i]))) << what << " unlisted token " << t << " written";
            }
        }
    };
    same_rows(q_lat_gpu, download(d_q_lat2), size_t(c.heads) * c.rank, "q_lat");
    same_rows(o_lat_gpu, download(d_o_lat2), size_t(c.heads) * c.rank, "o_lat");
    same_rows(download_bf16(d_out), download_bf16(d_out2), size_t(c.heads) * c.v_dim, "out");
}

const std::vector<std::pair<int32_t, int32_t>> kMixed{{0, 7}, {20, 1}, {33, 5}, {0, 1}, {100, 1}, {15, 18}};
const std::vector<std::pair<int32_t, int32_t>> kDecode{{5, 1}, {64, 1}, {200, 1}, {1, 1}, {17, 1}, {90, 1}, {3, 1}};

INSTANTIATE_TEST_SUITE_P(Shapes, MlaAttention,
                         ::testing::Values(mla_case{4, 16, 8, 12, 32, true, kMixed},       // the V3 fixtures
                                           mla_case{4, 16, 8, 16, 24, false, kMixed},      // deepseek_v3_flat
                                           mla_case{16, 128, 64, 128, 512, true, kMixed},  // DeepSeek-V2-Lite
                                           mla_case{16, 128, 64, 128, 512, false, kDecode},
                                           mla_case{32, 128, 64, 128, 512, true, {{300, 2}}}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("h", c.heads, "_dn", c.nope, "_dr", c.rope, "_dv", c.v_dim, "_r", c.rank,
                                              c.interleave ? "_interleave" : "_half", "_s", c.seqs.size(), "_t",
                                              info.index);
                         });

}  // namespace
}  // namespace zmoe::kernels::test
