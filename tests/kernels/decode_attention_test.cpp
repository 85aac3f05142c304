// launch_decode_attention against ref::paged_attention (one query token per sequence, probabilities and sums in
// fp32): GQA groups 1 to 16, head dims 64/128/256, batches of 1 to 300 sequences, contexts from 1 key to several
// chunks (split + in-kernel merge), lengths on and off the 16-key tiles, the 256-key chunks and the block size, block
// tables in shuffled physical order, more chunks than a sequence needs and grids of 1 to 64 blocks per (sequence, KV
// head); the merge counters are left zero and a second launch gives the same bits; and a sequence's output is bitwise
// the same alone and in a batch.

#include <numeric>

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct decode_case {
    std::string name;
    std::vector<int32_t> start_pos;  // one decode per sequence, at these positions
    int32_t num_q_heads, num_kv_heads, head_dim, block_size;
    int32_t extra_chunks = 0;  // workspace chunks beyond what the longest sequence needs (they must stay unused)
    int32_t grid_splits = 0;   // blocks per (sequence, KV head); 0: decode_attention_grid_splits
};

struct decode_inputs {
    int32_t num_seqs = 0, max_blocks = 0, max_chunks = 1, num_splits = 1;
    std::vector<int32_t> tables, start_pos;
    std::vector<float> q, k_cache, v_cache;
};

decode_inputs make_inputs(const decode_case& c, std::mt19937& rng) {
    decode_inputs in;
    in.num_seqs = int32_t(c.start_pos.size());
    in.start_pos = c.start_pos;
    int32_t total_blocks = 0, max_len = 1;
    for (int32_t pos : c.start_pos) {
        const int32_t blocks = (pos + 1 + c.block_size - 1) / c.block_size;
        in.max_blocks = std::max(in.max_blocks, blocks);
        total_blocks += blocks;
        max_len = std::max(max_len, pos + 1);
    }
    in.max_chunks = decode_attention_splits(max_len) + c.extra_chunks;
    in.num_splits =
        c.grid_splits > 0 ? c.grid_splits : decode_attention_grid_splits(in.num_seqs, c.num_kv_heads, in.max_chunks);
    const int32_t num_blocks = total_blocks + 3;
    std::vector<int32_t> physical(num_blocks);
    std::iota(physical.begin(), physical.end(), 0);
    std::shuffle(physical.begin(), physical.end(), rng);
    in.tables.assign(size_t(in.num_seqs) * in.max_blocks, -1);  // -1: never read
    for (int32_t s = 0, next = 0; s < in.num_seqs; ++s)
        for (int32_t b = 0; b < (c.start_pos[s] + c.block_size) / c.block_size; ++b)
            in.tables[size_t(s) * in.max_blocks + b] = physical[next++];
    const size_t cache = size_t(num_blocks) * c.block_size * c.num_kv_heads * c.head_dim;
    in.q = random_bf16(size_t(in.num_seqs) * c.num_q_heads * c.head_dim, 1.f, rng);
    in.k_cache = random_bf16(cache, 1.f, rng);
    in.v_cache = random_bf16(cache, 1.f, rng);
    return in;
}

std::vector<float> run_decode(const decode_case& c, const decode_inputs& in) {
    auto d_q = upload_bf16(in.q);
    auto d_k = upload_bf16(in.k_cache);
    auto d_v = upload_bf16(in.v_cache);
    auto d_tables = upload(in.tables);
    auto d_sp = upload(in.start_pos);
    const size_t ws_bytes = decode_attention_workspace_bytes(in.num_seqs, c.num_q_heads, c.head_dim, in.max_chunks);
    device_buffer<float> d_ws((ws_bytes + 3) / 4);
    d_ws.poison();
    device_buffer<int32_t> d_counters(size_t(in.num_seqs) * c.num_kv_heads);
    d_counters.poison(0);
    device_buffer<bf16> d_out(in.q.size());
    d_out.poison();
    const decode_attention_params p{.q = d_q.get(),
                                    .k_cache = d_k.get(),
                                    .v_cache = d_v.get(),
                                    .block_tables = d_tables.get(),
                                    .start_pos = d_sp.get(),
                                    .workspace = d_ws.get(),
                                    .merge_counters = d_counters.get(),
                                    .out = d_out.get(),
                                    .num_seqs = in.num_seqs,
                                    .num_q_heads = c.num_q_heads,
                                    .num_kv_heads = c.num_kv_heads,
                                    .head_dim = c.head_dim,
                                    .block_size = c.block_size,
                                    .max_blocks_per_seq = in.max_blocks,
                                    .max_chunks = in.max_chunks,
                                    .num_splits = in.num_splits,
                                    .scale = 1.f / std::sqrt(float(c.head_dim))};
    launch_decode_attention(p, nullptr);
    sync_and_check();
    const std::vector<float> first = download_bf16(d_out);
    for (int32_t v : download(d_counters)) EXPECT_EQ(v, 0) << "a merge counter was left armed";
    d_out.poison();
    launch_decode_attention(p, nullptr);  // the re-armed counters merge again, in the same order
    sync_and_check();
    const std::vector<float> second = download_bf16(d_out);
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i], second[i]) << "element " << i;
    return first;
}

class DecodeAttention : public ::testing::TestWithParam<decode_case> {};

TEST_P(DecodeAttention, MatchesReference) {
    const auto& c = GetParam();
    ASSERT_TRUE(decode_attention_supported(c.num_q_heads, c.num_kv_heads, c.head_dim));
    std::mt19937 rng(c.head_dim * 7 + c.num_q_heads * 3 + int(c.start_pos.size()));
    const decode_inputs in = make_inputs(c, rng);
    const std::vector<float> got = run_decode(c, in);

    std::vector<int32_t> query_start(in.num_seqs + 1);
    std::iota(query_start.begin(), query_start.end(), 0);
    const ref::attention_shape s{in.num_seqs,
                                 c.num_q_heads,
                                 c.num_kv_heads,
                                 c.head_dim,
                                 c.block_size,
                                 in.max_blocks,
                                 1.f / std::sqrt(float(c.head_dim))};
    std::vector<float> want(in.q.size());
    ref::paged_attention(s, in.q.data(), in.k_cache.data(), in.v_cache.data(), in.tables.data(), query_start.data(),
                         in.start_pos.data(), want.data());
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(rel_error(got, want), kBf16Tolerance);
}

TEST(DecodeAttention, SequenceAloneEqualsSequenceInBatch) {
    const decode_case batch{"batch", {700, 3, 1500, 129}, 32, 4, 128, 16};
    std::mt19937 rng(5);
    const decode_inputs in = make_inputs(batch, rng);
    const std::vector<float> all = run_decode(batch, in);
    // Sequence 2 alone, with more workspace chunks and one block for all its chunks (what a graph captured for
    // another batch, or a server with another context limit, would run): the same bits.
    decode_inputs one = in;
    one.num_seqs = 1;
    one.start_pos = {in.start_pos[2]};
    one.tables.assign(in.tables.begin() + 2 * in.max_blocks, in.tables.begin() + 3 * in.max_blocks);
    const size_t row = size_t(batch.num_q_heads) * batch.head_dim;
    one.q.assign(in.q.begin() + 2 * row, in.q.begin() + 3 * row);
    one.max_chunks = in.max_chunks + 2;
    one.num_splits = 1;
    const std::vector<float> alone = run_decode(batch, one);
    for (size_t i = 0; i < row; ++i) ASSERT_EQ(alone[i], all[2 * row + i]) << "element " << i;
}

/// n positions in [0, below): i * stride mod below, so lengths fall on and off every tile and chunk edge.
std::vector<int32_t> spread(int32_t n, int32_t stride, int32_t below) {
    std::vector<int32_t> pos(n);
    for (int32_t i = 0; i < n; ++i) pos[i] = int32_t((int64_t(i) * stride + below - 1) % below);
    return pos;
}

std::vector<decode_case> cases() {
    const std::vector<int32_t> many = spread(40, 97, 700);
    return {
        {"qwen3_one", {128}, 32, 4, 128, 16},
        {"qwen3_first_token", {0}, 32, 4, 128, 16},
        {"qwen3_batch", many, 32, 4, 128, 16},
        {"qwen3_long", {5000, 511, 512, 1023}, 32, 4, 128, 16},
        {"idle_chunks", {40, 300}, 32, 4, 128, 16, 3},
        {"chunk_edges", {63, 64, 127, 2047, 2048, 4095}, 32, 4, 128, 16},
        {"one_block_all_chunks", {900, 130}, 32, 4, 128, 16, 0, 1},
        {"strided_chunks", {1500, 200, 64}, 32, 4, 128, 16, 0, 3},
        {"grid_beyond_chunks", {100, 10}, 32, 4, 128, 16, 2, 7},
        {"long_group1_d256", {3000, 70}, 2, 2, 256, 16},
        {"mha_olmoe", {17, 600}, 16, 16, 128, 32},
        {"group2", {33, 1}, 8, 4, 128, 16},
        {"group4_d64", {200, 1030}, 8, 2, 64, 64},
        {"group16", {900, 64}, 64, 4, 128, 16},
        {"head_dim_256", {10, 520}, 8, 2, 256, 16},
        {"block_size_1", {45}, 4, 1, 64, 1},
        {"block_size_24", {300, 47, 23}, 32, 4, 128, 24},
        {"tile_edges", {0, 1, 14, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129}, 32, 4, 128, 16},
        {"chunk_edges_256", {254, 255, 256, 511, 512, 513, 767, 1024, 4095}, 32, 4, 128, 16},
        {"batch_300", spread(300, 41, 700), 8, 1, 128, 16},
        {"batch_256_context_128", spread(256, 1, 129), 32, 4, 128, 16},
        {"long_chunks_above_min", {8191, 9000, 300}, 8, 2, 128, 16, 0, 5},
        {"grid_64", {4095, 17}, 32, 4, 128, 16, 0, 64},
        {"grid_2_group1", {2000, 700}, 4, 4, 64, 16, 0, 2},
        {"group16_long_d256", {2600, 5}, 16, 1, 256, 16},
        {"group2_d64_batch", spread(33, 29, 1200), 4, 2, 64, 32},
    };
}

INSTANTIATE_TEST_SUITE_P(Batches, DecodeAttention, ::testing::ValuesIn(cases()), [](const auto& info) {
    const auto& c = info.param;
    return make_name(c.name, "_q", c.num_q_heads, "_kv", c.num_kv_heads, "_d", c.head_dim);
});

}  // namespace
}  // namespace zmoe::kernels::test
