// launch_sample against ref::sample (the same token, exactly), plus properties the reference cannot vouch for:
// the batch does not change a sequence's token, and the draws follow the softmax they claim to sample. Logits
// processing (bias, penalties, banned ids, structured-output token masks, min-p) and logprobs against
// ref::process_and_sample and ref::logprobs.

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

// Logits processing and logprobs: random penalties, histories, biases, banned ids, min-p and logprob counts per
// sequence, against ref::process_and_sample (tokens exactly) and ref::logprobs (ids exactly, values within 1e-4).
struct process_case {
    int32_t num_seqs, vocab, history_len;
    float temperature;
};

class SampleProcessing : public ::testing::TestWithParam<process_case> {};

TEST_P(SampleProcessing, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.vocab * 7 + c.num_seqs);
    const auto logits = random_f32(size_t(c.num_seqs) * c.vocab, 4.f, rng);
    std::uniform_int_distribution<int32_t> token(0, c.vocab - 1);
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    std::vector<sample_seq_params> seqs(c.num_seqs);
    std::vector<int32_t> history, bias_ids, banned;
    std::vector<float> bias_values;
    // Token masks: every fourth row (from row 1) allows about an eighth of the vocabulary; the mask words stop short
    // of the vocabulary (ids past them are never allowed, as the padded rows of a real model's logits).
    const int32_t mask_words = std::max(1, (c.vocab - 33 + 31) / 32);
    std::vector<uint32_t> masks;
    for (int32_t s = 0; s < c.num_seqs; ++s) {
        sample_seq_params& p = seqs[s];
        p.temperature = s % 4 == 0 ? 0.f : c.temperature;
        p.top_p = s % 3 == 0 ? 0.9f : 1.f;
        p.top_k = s % 5 == 0 ? 30 : 0;
        p.min_p = s % 2 == 0 ? 0.05f : 0.f;
        p.counter = uint32_t(s);
        p.seed = 77 + s;
        p.presence_penalty = s % 3 == 1 ? 0.5f : 0.f;
        p.frequency_penalty = s % 3 == 2 ? 0.3f : 0.f;
        p.repetition_penalty = s % 2 == 1 ? 1.3f : 1.f;
        p.num_logprobs = s % 4 == 3 ? -1 : s % kMaxLogprobs + 1;
        p.history_begin = int32_t(history.size());
        p.num_prompt = c.history_len / 2;
        p.num_output = c.history_len - p.num_prompt;
        // A narrow token range repeats tokens, so the counts exceed one.
        for (int32_t j = 0; j < c.history_len; ++j) history.push_back(token(rng) % std::max(1, c.vocab / 8));
        p.bias_begin = int32_t(bias_ids.size());
        p.num_bias = s % 2 == 0 ? 3 : 0;
        for (int32_t j = 0; j < p.num_bias; ++j) {
            bias_ids.push_back(j * 7 + s);  // unique within the sequence
            bias_values.push_back(j == 0 ? 50.f : -2.f * unit(rng));
        }
        p.banned_begin = int32_t(banned.size());
        p.num_banned = s % 3 == 0 ? 2 : 0;
        for (int32_t j = 0; j < p.num_banned; ++j) banned.push_back(token(rng));
        if (s % 4 == 1) {
            p.mask_row = int32_t(masks.size() / mask_words);
            for (int32_t w = 0; w < mask_words; ++w)
                masks.push_back(uint32_t(rng()) & uint32_t(rng()) & uint32_t(rng()));
            masks[size_t(p.mask_row) * mask_words] |= 0xffu;  // a few allowed tokens whatever the draw
        }
    }
    auto d_logits = upload(logits);
    auto d_masks = upload(masks.empty() ? std::vector<uint32_t>{0} : masks);
    auto d_seqs = upload(seqs);
    auto d_history = upload(history.empty() ? std::vector<int32_t>{0} : history);
    auto d_bias_ids = upload(bias_ids.empty() ? std::vector<int32_t>{0} : bias_ids);
    auto d_bias_values = upload(bias_values.empty() ? std::vector<float>{0.f} : bias_values);
    auto d_banned = upload(banned.empty() ? std::vector<int32_t>{0} : banned);
    device_buffer<float> d_processed(logits.size());
    device_buffer<uint32_t> d_counts(logits.size());
    device_buffer<int32_t> d_tokens(seqs.size());
    device_buffer<float> d_token_lp(seqs.size());
    device_buffer<int32_t> d_top_ids(seqs.size() * kMaxLogprobs);
    device_buffer<float> d_top_lp(seqs.size() * kMaxLogprobs);
    d_tokens.poison(0x7f);
    launch_sample({.logits = d_logits.get(),
                   .seqs = d_seqs.get(),
                   .tokens = d_tokens.get(),
                   .num_seqs = c.num_seqs,
                   .vocab_size = c.vocab,
                   .processed = d_processed.get(),
                   .counts = d_counts.get(),
                   .history = d_history.get(),
                   .bias_ids = d_bias_ids.get(),
                   .bias_values = d_bias_values.get(),
                   .banned = d_banned.get(),
                   .masks = d_masks.get(),
                   .mask_words = mask_words,
                   .token_logprobs = d_token_lp.get(),
                   .top_ids = d_top_ids.get(),
                   .top_logprobs = d_top_lp.get()},
                  nullptr);
    sync_and_check();
    const auto got = download(d_tokens);
    const auto got_lp = download(d_token_lp);
    const auto got_ids = download(d_top_ids);
    const auto got_top = download(d_top_lp);
    const ref::sample_inputs in{.history = history.data(),
                                .bias_ids = bias_ids.data(),
                                .bias_values = bias_values.data(),
                                .banned = banned.data(),
                                .masks = masks.data(),
                                .mask_words = mask_words};
    int32_t processed_rows = 0, masked_rows = 0;
    for (int32_t s = 0; s < c.num_seqs; ++s) {
        const float* row = &logits[size_t(s) * c.vocab];
        const int32_t want = ref::process_and_sample(row, c.vocab, seqs[s], in);
        EXPECT_EQ(got[s], want) << "seq " << s;
        for (int32_t j = 0; j < seqs[s].num_banned; ++j) EXPECT_NE(got[s], banned[seqs[s].banned_begin + j]);
        if (seqs[s].mask_row >= 0) {
            ++masked_rows;
            EXPECT_TRUE(mask_allows(masks.data(), mask_words, seqs[s].mask_row, got[s])) << "seq " << s;
        }
        processed_rows += has_processing(seqs[s]);
        if (seqs[s].num_logprobs < 0) continue;
        const int32_t k = std::min(seqs[s].num_logprobs, c.vocab);
        float lp;
        std::vector<int32_t> ids(k);
        std::vector<float> top(k);
        ref::logprobs(row, c.vocab, got[s], k, &lp, ids.data(), top.data());
        EXPECT_NEAR(got_lp[s], lp, 1e-4f * std::max(1.f, std::abs(lp))) << "seq " << s;
        for (int32_t j = 0; j < k; ++j) {
            EXPECT_EQ(got_ids[size_t(s) * kMaxLogprobs + j], ids[j]) << "seq " << s << " rank " << j;
            EXPECT_NEAR(got_top[size_t(s) * kMaxLogprobs + j], top[j], 1e-4f * std::max(1.f, std::abs(top[j])));
        }
    }
    EXPECT_GT(processed_rows, 0);
    EXPECT_GT(masked_rows, 0);
}

INSTANTIATE_TEST_SUITE_P(Params, SampleProcessing,
                         ::testing::Values(process_case{6, 64, 0, 1.f}, process_case{12, 1000, 40, 0.8f},
                                           process_case{24, 32000, 300, 1.f}, process_case{16, 151936, 1000, 0.7f}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("s", c.num_seqs, "_v", c.vocab, "_h", c.history_len, "_t",
                                              int(c.temperature * 100));
                         });

}  // namespace
}  // namespace zmoe::kernels::test
