// launch_embedding against ref::embedding: exact (a gather).

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct embedding_case {
    int32_t num_tokens, hidden, vocab;
};

class Embedding : public ::testing::TestWithParam<embedding_case> {};

TEST_P(Embedding, MatchesReferenceExactly) {
    const auto c = GetParam();
    std::mt19937 rng(c.num_tokens * 31 + c.hidden);
    const auto table = random_bf16(size_t(c.vocab) * c.hidden, 1.f, rng);
    std::vector<int32_t> ids(c.num_tokens);
    std::uniform_int_distribution<int32_t> id_dist(0, c.vocab - 1);
    for (auto& id : ids) id = id_dist(rng);
    if (c.num_tokens > 2) ids[1] = -1, ids[2] = c.vocab;  // out of range: zero rows

    auto d_table = upload_bf16(table);
    auto d_ids = upload(ids);
    device_buffer<bf16> d_out(size_t(c.num_tokens) * c.hidden);
    d_out.poison();
    launch_embedding({.token_ids = d_ids.get(),
                      .table = d_table.get(),
                      .out = d_out.get(),
                      .num_tokens = c.num_tokens,
                      .hidden = c.hidden,
                      .vocab_size = c.vocab},
                     nullptr);
    sync_and_check();

    std::vector<float> want(size_t(c.num_tokens) * c.hidden);
    ref::embedding(ids.data(), table.data(), want.data(), c.num_tokens, c.hidden, c.vocab);
    EXPECT_EQ(download_bf16(d_out), want);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Embedding,
                         ::testing::Values(embedding_case{1, 64, 512}, embedding_case{37, 2048, 1000},
                                           embedding_case{4096, 256, 32000}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("t", c.num_tokens, "_h", c.hidden, "_v", c.vocab);
                         });

}  // namespace
}  // namespace zmoe::kernels::test
