// launch_sample against ref::sample (the same token, exactly), plus properties the reference cannot vouch for:
// the batch does not change a sequence's token, and the draws follow the softmax they claim to sample.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct sample_case {
    int32_t num_seqs, vocab;
    float temperature, top_p;
    int32_t top_k;
    bool ties;  ///< logits on a coarse grid
};

std::vector<int32_t> run_sample(const std::vector<float>& logits, const std::vector<sample_seq_params>& seqs,
                                int32_t vocab) {
    auto d_logits = upload(logits);
    auto d_seqs = upload(seqs);
    device_buffer<int32_t> d_tokens(seqs.size());
    d_tokens.poison(0x7f);
    launch_sample({.logits = d_logits.get(),
                   .seqs = d_seqs.get(),
                   .tokens = d_tokens.get(),
                   .num_seqs = int32_t(seqs.size()),
                   .vocab_size = vocab},
                  nullptr);
    sync_and_check();
    return download(d_tokens);
}

class Sample : public ::testing::TestWithParam<sample_case> {};

TEST_P(Sample, MatchesReferenceExactly) {
    const auto c = GetParam();
    std::mt19937 rng(c.vocab + c.num_seqs + c.top_k);
    auto logits = random_f32(size_t(c.num_seqs) * c.vocab, 8.f, rng);
    if (c.ties)
        for (auto& l : logits) l = std::round(l / 4.f);
    std::vector<sample_seq_params> seqs(c.num_seqs);
    for (int32_t s = 0; s < c.num_seqs; ++s) seqs[s] = {c.temperature, c.top_p, c.top_k, uint32_t(s * 3), 1234u + s};
    const auto got = run_sample(logits, seqs, c.vocab);
    std::vector<int32_t> want(c.num_seqs);
    for (int32_t s = 0; s < c.num_seqs; ++s)
        want[s] = ref::sample(&logits[size_t(s) * c.vocab], c.vocab, seqs[s].temperature, seqs[s].top_p, seqs[s].top_k,
                              seqs[s].seed, seqs[s].counter);
    EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(
    Params, Sample,
    ::testing::Values(sample_case{4, 512, 0.f, 1.f, 0, false}, sample_case{16, 151936, 0.f, 1.f, 0, true},
                      sample_case{8, 512, 1.f, 1.f, 0, false}, sample_case{32, 32000, 0.7f, 1.f, 50, false},
                      sample_case{32, 32000, 1.f, 0.9f, 0, false}, sample_case{32, 151936, 0.8f, 0.95f, 20, false},
                      sample_case{16, 151936, 1.2f, 0.5f, 0, true}, sample_case{8, 1000, 1.f, 1.f, 1, false}),
    [](const auto& info) {
        const auto& c = info.param;
        return make_name("s", c.num_seqs, "_v", c.vocab, "_t", int(c.temperature * 100), "_p", int(c.top_p * 100), "_k",
                         c.top_k, (c.ties ? "_ties" : ""));
    });

TEST(SampleProperties, BatchDoesNotChangeTheToken) {
    std::mt19937 rng(3);
    const int32_t vocab = 4096;
    const auto row = random_f32(vocab, 3.f, rng);
    const sample_seq_params target{.temperature = 0.9f, .top_p = 0.95f, .top_k = 40, .counter = 17, .seed = 99};
    std::vector<float> logits;
    std::vector<sample_seq_params> seqs;
    for (int32_t s = 0; s < 9; ++s) {  // the target at positions 0, 4 and 8, others in between
        const bool is_target = s % 4 == 0;
        const auto other = random_f32(vocab, 3.f, rng);
        logits.insert(logits.end(), is_target ? row.begin() : other.begin(), is_target ? row.end() : other.end());
        seqs.push_back(
            is_target ? target
                      : sample_seq_params{
                            .temperature = 1.f, .top_p = 1.f, .top_k = 0, .counter = uint32_t(s), .seed = uint64_t(s)});
    }
    const auto tokens = run_sample(logits, seqs, vocab);
    EXPECT_EQ(tokens[0], tokens[4]);
    EXPECT_EQ(tokens[0], tokens[8]);
    EXPECT_EQ(run_sample(row, {target}, vocab)[0], tokens[0]);
}

TEST(SampleProperties, FrequenciesFollowSoftmax) {
    const std::vector<float> row{1.f, 0.f, 2.f, -1.f, 0.5f};
    const int32_t vocab = int32_t(row.size()), draws = 20000;
    std::vector<float> logits;
    std::vector<sample_seq_params> seqs;
    for (int32_t s = 0; s < draws; ++s) {
        logits.insert(logits.end(), row.begin(), row.end());
        seqs.push_back({1.f, 1.f, 0, uint32_t(s), 42});
    }
    const auto tokens = run_sample(logits, seqs, vocab);
    std::vector<double> freq(vocab, 0.0);
    for (int32_t t : tokens) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, vocab);
        freq[t] += 1.0 / draws;
    }
    double z = 0;
    for (float l : row) z += std::exp(l);
    for (int32_t i = 0; i < vocab; ++i) EXPECT_NEAR(freq[i], std::exp(row[i]) / z, 0.015) << "token " << i;
}

TEST(SampleProperties, TopKOneIsGreedy) {
    std::mt19937 rng(8);
    const int32_t vocab = 50000;
    const auto logits = random_f32(size_t(4) * vocab, 5.f, rng);
    const std::vector<sample_seq_params> sampled(4, {1.5f, 1.f, 1, 7, 7}), greedy(4, {0.f, 1.f, 0, 0, 0});
    EXPECT_EQ(run_sample(logits, sampled, vocab), run_sample(logits, greedy, vocab));
}

}  // namespace
}  // namespace zmoe::kernels::test
