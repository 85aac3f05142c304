// launch_decode_attention against ref::paged_attention (one query token per sequence, probabilities and sums in
// fp32): GQA groups 1 to 16, head dims 64/128/256, batches of 1 to 300 sequences, contexts from 1 key to 32 000
// (split into chunks + the combine pass), lengths on and off the 16-key tiles, the chunk edges and the block size,
// block tables in shuffled physical order, split counts from 1 to kDecodeAttentionMaxSplits and the one the step's
// shape picks; a second launch gives the same bits; a sequence's output is bitwise the same alone and in a batch of
// the same split count; and a graph captured at one set of lengths replays right at others.

#include "kernels/decode_attention.hpp"

#include <numeric>

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"
#include "tests/kernels/tuning_scope.hpp"

namespace zmoe::kernels::test {
namespace {

struct decode_case {
    std::string name;
    std::vector<int32_t> start_pos;  // one decode per sequence, at these positions
    int32_t num_q_heads, num_kv_heads, head_dim, block_size;
    int32_t num_splits = 0;  // chunks per sequence at most; 0: decode_attention_splits for the batch and its lengths
    int32_t num_stages = 0;  // K/V tiles in flight per warp; 0: the launch's choice
};

struct decode_inputs {
    int32_t num_seqs = 0, max_blocks = 0, num_splits = 1;
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
    in.num_splits = c.num_splits > 0
                        ? c.num_splits
                        : decode_attention_splits(in.num_seqs, c.num_kv_heads, max_len,
                                                  decode_attention_slots(c.num_q_heads, c.num_kv_heads, c.head_dim));
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

/// The inputs on the device, and the launch's parameters over them.
struct decode_device {
    device_buffer<bf16> q, k, v, out;
    device_buffer<int32_t> tables, start_pos;
    device_buffer<float> workspace;
    decode_attention_params p;

    decode_device(const decode_case& c, const decode_inputs& in)
        : q(upload_bf16(in.q)),
          k(upload_bf16(in.k_cache)),
          v(upload_bf16(in.v_cache)),
          out(in.q.size()),
          tables(upload(in.tables)),
          start_pos(upload(in.start_pos)),
          workspace((decode_attention_workspace_bytes(in.num_seqs, c.num_q_heads, c.head_dim, in.num_splits) + 3) / 4) {
        workspace.poison();  // NaNs: a chunk state read before it is written shows
        out.poison();
        p = {.q = q.get(),
             .k_cache = k.get(),
             .v_cache = v.get(),
             .block_tables = tables.get(),
             .start_pos = start_pos.get(),
             .workspace = workspace.get(),
             .out = out.get(),
             .num_seqs = in.num_seqs,
             .num_q_heads = c.num_q_heads,
             .num_kv_heads = c.num_kv_heads,
             .head_dim = c.head_dim,
             .block_size = c.block_size,
             .max_blocks_per_seq = in.max_blocks,
             .num_splits = in.num_splits,
             .scale = 1.f / std::sqrt(float(c.head_dim))};
    }
};

/// ref::paged_attention of one query token per sequence.
std::vector<float> reference(const decode_case& c, const decode_inputs& in) {
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
    return want;
}

void launch(const decode_case& c, const decode_attention_params& p) {
    if (c.num_stages > 0)
        launch_decode_attention_stages(p, c.num_stages, nullptr);
    else
        launch_decode_attention(p, nullptr);
}

std::vector<float> run_decode(const decode_case& c, const decode_inputs& in) {
    decode_device d(c, in);
    launch(c, d.p);
    sync_and_check();
    const std::vector<float> first = download_bf16(d.out);
    d.out.poison();
    launch(c, d.p);  // the same chunks, combined in the same order
    sync_and_check();
    const std::vector<float> second = download_bf16(d.out);
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
    const std::vector<float> want = reference(c, in);
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(rel_error(got, want), kBf16Tolerance);
}

// The chunking: at most num_splits chunks, whole aligned chunks of at least the minimum, covering the sequence.
TEST(DecodeAttention, ChunksCoverEverySequenceWithinTheSplit) {
    for (int32_t splits : {1, 2, 3, 7, 33, 128, kDecodeAttentionMaxSplits})
        for (int32_t len : {1, 15, 255, 256, 257, 1000, 4096, 8191, 32000, 32768, 65536}) {
            const int32_t chunk = decode_attention_chunk(len, splits);
            const int32_t chunks = (len + chunk - 1) / chunk;
            EXPECT_GE(chunk, kDecodeAttentionMinChunk);
            EXPECT_EQ(chunk % kDecodeAttentionChunkAlign, 0);
            EXPECT_LE(chunks, splits) << len << " keys, " << splits << " splits";
            EXPECT_GE(int64_t(chunks) * chunk, len);
        }
}

// The split the step's shape picks: the most blocks within the slots (one block per pair once the batch fills them),
// wide for a lone long sequence, never more chunks than the longest sequence can have, never more than the maximum.
TEST(DecodeAttention, SplitsFollowTheShape) {
    const int32_t slots = decode_attention_slots(32, 4, 128);
    ASSERT_GT(slots, 0);
    EXPECT_EQ(decode_attention_splits(slots, 4, 32768, slots), 1);
    EXPECT_EQ(decode_attention_splits(1, 4, 1, slots), 1);
    EXPECT_EQ(decode_attention_splits(1, 4, 512, slots), std::min(2, std::max(1, slots / 4)));
    const int32_t one = decode_attention_splits(1, 4, 32768, slots), four = decode_attention_splits(4, 4, 32768, slots);
    EXPECT_GE(one, four);
    for (int32_t b = 1; b <= 1024; b *= 2) {
        const int32_t s = decode_attention_splits(b, 4, 1 << 20, slots);
        const int64_t pairs = int64_t(b) * 4;
        EXPECT_GE(s, 1);
        EXPECT_LE(s, kDecodeAttentionMaxSplits);
        if (pairs <= slots && s < kDecodeAttentionMaxSplits) {
            const int32_t step = s >= 8 ? 8 : 1;  // from 8 up, multiples of 8
            EXPECT_EQ(s % step, 0) << "batch " << b;
            EXPECT_LE(s * pairs, slots) << "batch " << b << ": no block beyond the slots";
            EXPECT_GT((s + step) * pairs, slots) << "batch " << b << ": as many as fit";
        } else if (pairs > slots) {
            EXPECT_EQ(s, 1);
        }
    }
}

// A graph captured at one set of lengths (as the decode graphs are, with padding rows) replays right at others: the
// grid covers any length the split count allows, and the chunking is read from the lengths at run time.
TEST(DecodeAttention, GraphReplaysAtOtherLengths) {
    const decode_case longer{"graph_long", {20000, 7000, 4100}, 32, 4, 128, 16};
    std::mt19937 rng_long(12);
    decode_inputs big = make_inputs(longer, rng_long);
    big.num_splits = decode_attention_splits(3, 4, 32768, decode_attention_slots(32, 4, 128));
    decode_device d(longer, big);  // buffers sized for the long run; captured at the short lengths
    const std::vector<int32_t> short_pos = {5, 300, 0};
    ZMOE_CUDA_CHECK(cudaMemcpy(d.start_pos.get(), short_pos.data(), 12, cudaMemcpyHostToDevice));
    cudaStream_t stream;
    ZMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    launch_decode_attention(d.p, stream);  // outside the capture: the kernels' attributes
    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ZMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    launch_decode_attention(d.p, stream);
    ZMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    ZMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    ZMOE_CUDA_CHECK(cudaMemcpy(d.start_pos.get(), big.start_pos.data(), 12, cudaMemcpyHostToDevice));
    d.out.poison();
    ZMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> got = download_bf16(d.out);
    ZMOE_CUDA_CHECK(cudaGraphExecDestroy(exec));
    ZMOE_CUDA_CHECK(cudaGraphDestroy(graph));
    ZMOE_CUDA_CHECK(cudaStreamDestroy(stream));
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(rel_error(got, reference(longer, big)), kBf16Tolerance);
    EXPECT_EQ(got, run_decode(longer, big)) << "the replay gives the eager launch's bits";
}

// The pipeline depth changes when tiles land, not what a warp computes or in which order: the same bits.
TEST(DecodeAttention, StagesGiveTheSameBits) {
    for (decode_case c : {decode_case{"s_32k", {31999}, 32, 4, 128, 16},
                          decode_case{"s_batch", {700, 3, 1500, 129, 40}, 32, 4, 128, 16, 5},
                          decode_case{"s_one_split", {900, 130}, 32, 4, 128, 16, 1},
                          decode_case{"s_d64_group1", {2000, 17}, 4, 4, 64, 16, 3}}) {
        std::mt19937 rng(9);
        const decode_inputs in = make_inputs(c, rng);
        c.num_stages = 2;
        const std::vector<float> two = run_decode(c, in);
        c.num_stages = 4;
        const std::vector<float> four = run_decode(c, in);
        EXPECT_EQ(two, four) << c.name;
        EXPECT_LT(rel_error(four, reference(c, in)), kBf16Tolerance) << c.name;
    }
}

TEST(DecodeAttention, CombineEarlyGivesTheSameBits) {
    // combine_early (one sequence only, the default there) only moves the combine's launch_dependents before its
    // wait: the same output, split or not. At several sequences it does not apply: the same launch either way.
    for (const decode_case& c :
         {decode_case{"e_32k", {31999}, 32, 4, 128, 16}, decode_case{"e_five_splits", {1500}, 32, 4, 128, 16, 5},
          decode_case{"e_one_split", {900}, 32, 4, 128, 16, 1},
          decode_case{"e_batch", {700, 3, 1500, 129, 40}, 32, 4, 128, 16, 5}}) {
        std::mt19937 rng(21);
        const decode_inputs in = make_inputs(c, rng);
        std::vector<float> measured, early;
        {
            const tuning_scope off({});
            measured = run_decode(c, in);
        }
        {
            const tuning_scope on({.combine_early = true});
            early = run_decode(c, in);
        }
        EXPECT_EQ(measured, early) << c.name;
    }
}

TEST(DecodeAttention, SequenceAloneEqualsSequenceInBatch) {
    const decode_case batch{"batch", {700, 3, 1500, 129}, 32, 4, 128, 16, 5};
    std::mt19937 rng(5);
    const decode_inputs in = make_inputs(batch, rng);
    const std::vector<float> all = run_decode(batch, in);
    // Sequence 2 alone, with the batch's split count (what a graph captured for a larger batch runs): the same bits.
    decode_inputs one = in;
    one.num_seqs = 1;
    one.start_pos = {in.start_pos[2]};
    one.tables.assign(in.tables.begin() + 2 * in.max_blocks, in.tables.begin() + 3 * in.max_blocks);
    const size_t row = size_t(batch.num_q_heads) * batch.head_dim;
    one.q.assign(in.q.begin() + 2 * row, in.q.begin() + 3 * row);
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
        {"qwen3_32k_batch1", {31999}, 32, 4, 128, 16},
        {"qwen3_32k_batch4", {31999, 32000, 30001, 12345}, 32, 4, 128, 16},
        {"idle_chunks", {40, 300}, 32, 4, 128, 16, 9},
        {"chunk_edges", {63, 64, 127, 2047, 2048, 4095}, 32, 4, 128, 16},
        {"one_split", {900, 130}, 32, 4, 128, 16, 1},
        {"three_splits", {1500, 200, 64}, 32, 4, 128, 16, 3},
        {"splits_beyond_chunks", {100, 10}, 32, 4, 128, 16, 7},
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
        {"long_chunks_above_min", {8191, 9000, 300}, 8, 2, 128, 16, 5},
        {"splits_64", {4095, 17}, 32, 4, 128, 16, 64},
        {"splits_2_group1", {2000, 700}, 4, 4, 64, 16, 2},
        {"max_splits", {65535, 256, 257}, 8, 1, 128, 16, kDecodeAttentionMaxSplits},
        {"max_splits_d256", {40000, 3}, 16, 2, 256, 16, kDecodeAttentionMaxSplits},
        {"odd_splits_d64", {9999, 1234, 77}, 16, 4, 64, 16, 37},
        {"group16_long_d256", {2600, 5}, 16, 1, 256, 16},
        {"group2_d64_batch", spread(33, 29, 1200), 4, 2, 64, 32},
        {"stages4_32k_batch4", {31999, 32000, 30001, 12345}, 32, 4, 128, 16, 0, 4},
        {"stages4_tile_edges", {0, 1, 15, 16, 17, 33, 63, 64, 65, 129}, 32, 4, 128, 16, 0, 4},
        {"stages4_group16_d64", {900, 64, 3}, 64, 4, 64, 16, 6, 4},
        {"stages2_32k_batch1", {31999}, 32, 4, 128, 16, 0, 2},
    };
}

INSTANTIATE_TEST_SUITE_P(Batches, DecodeAttention, ::testing::ValuesIn(cases()), [](const auto& info) {
    const auto& c = info.param;
    return make_name(c.name, "_q", c.num_q_heads, "_kv", c.num_kv_heads, "_d", c.head_dim);
});

}  // namespace
}  // namespace zmoe::kernels::test
