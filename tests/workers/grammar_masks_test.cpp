// Structured outputs on the worker: token masks applied by the CPU sampler (the kernel's reference), and
// grammar_masks driving one matcher per constrained sequence through steps, replays and finished requests.

#include "workers/grammar_masks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "kernels/reference/reference.hpp"
#include "workers/sampler.hpp"

namespace zmoe {
namespace {

std::vector<float> random_logits(int32_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, 3.f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng);
    return v;
}

std::vector<uint32_t> mask_of(const std::vector<int32_t>& allowed, int32_t words) {
    std::vector<uint32_t> m(static_cast<size_t>(words), 0);
    for (const int32_t id : allowed) m[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
    return m;
}

sample_batch one_row(const sampling_params& p, uint32_t sample_index, const std::vector<uint32_t>& mask,
                     int32_t words) {
    scheduled_seq seq;
    seq.do_sample = true;
    seq.sample_index = sample_index;
    seq.sampling = p;
    sample_batch b;
    b.add(seq, nullptr);
    b.seqs[0].mask_row = 0;
    b.masks = mask.data();
    b.mask_words = words;
    return b;
}

TEST(SamplerMask, OnlyAllowedTokensAreSampledGreedyOrNot) {
    constexpr int32_t V = 100;
    const std::vector<int32_t> allowed = {3, 17, 63};
    const auto mask = mask_of(allowed, 4);
    for (const float temperature : {0.f, 0.7f, 1.5f}) {
        for (uint32_t i = 0; i < 200; ++i) {
            const auto l = random_logits(V, i);
            sampling_params p;
            p.temperature = temperature;
            p.top_p = i % 2 ? 0.9f : 1.f;
            p.top_k = i % 3 ? 0 : 50;
            p.min_p = i % 5 ? 0.f : 0.05f;
            p.seed = i;
            const sample_batch b = one_row(p, i, mask, 4);
            const auto out = sample_rows(l.data(), V, b, std::vector<uint64_t>{7});
            ASSERT_EQ(out.size(), 1u);
            EXPECT_TRUE(out[0].token_id == 3 || out[0].token_id == 17 || out[0].token_id == 63)
                << "temperature " << temperature << " draw " << i << " sampled " << out[0].token_id;
        }
    }
}

TEST(SamplerMask, MaskedDrawEqualsTheDrawFromLogitsWithDisallowedAtMinusInfinity) {
    // The mask is one more rule of logits processing: the same (seed, counter) draws the same token as from the
    // row with the disallowed logits replaced by -inf by hand.
    constexpr int32_t V = 300;
    std::mt19937 rng(5);
    for (uint32_t i = 0; i < 100; ++i) {
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < V; ++id)
            if (rng() % 4 == 0) allowed.push_back(id);
        const auto mask = mask_of(allowed, (V + 31) / 32);
        auto l = random_logits(V, 1000 + i);
        sampling_params p;
        p.temperature = 0.9f;
        p.top_p = 0.8f;
        p.seed = 99 + i;
        const sample_batch b = one_row(p, i, mask, (V + 31) / 32);
        const int32_t got = sample_rows(l.data(), V, b, std::vector<uint64_t>{1})[0].token_id;
        for (int32_t id = 0; id < V; ++id)
            if (!kernels::mask_allows(mask.data(), (V + 31) / 32, 0, id)) l[static_cast<size_t>(id)] = -INFINITY;
        EXPECT_EQ(got, sample_token(l.data(), V, p, i)) << "draw " << i;
    }
}

TEST(SamplerMask, IdsPastTheMaskWordsAreNeverSampled) {
    // Logits wider than the vocabulary (padding rows): the ids past the mask's bits are masked whatever the logits.
    constexpr int32_t V = 100;
    std::vector<float> l(V, 0.f);
    for (int32_t id = 64; id < V; ++id) l[static_cast<size_t>(id)] = 50.f;
    std::vector<int32_t> all;
    for (int32_t id = 0; id < 64; ++id) all.push_back(id);
    const auto mask = mask_of(all, 2);
    for (uint32_t i = 0; i < 50; ++i) {
        sampling_params p;
        p.temperature = i % 2 ? 1.f : 0.f;
        p.seed = i;
        const int32_t t = sample_rows(l.data(), V, one_row(p, i, mask, 2), std::vector<uint64_t>{1})[0].token_id;
        EXPECT_LT(t, 64);
    }
}

TEST(SamplerMask, LogprobsAreOfTheRawLogits) {
    constexpr int32_t V = 64;
    const auto l = random_logits(V, 3);
    sampling_params p;
    p.logprobs = 3;
    const auto mask = mask_of({5}, 2);
    const auto masked = sample_rows(l.data(), V, one_row(p, 0, mask, 2), std::vector<uint64_t>{1})[0];
    EXPECT_EQ(masked.token_id, 5);
    float lp = 0;
    std::vector<int32_t> ids(3);
    std::vector<float> lps(3);
    kernels::ref::logprobs(l.data(), V, 5, 3, &lp, ids.data(), lps.data());
    ASSERT_TRUE(masked.logprobs.has_value());
    EXPECT_EQ(masked.logprobs->logprob, lp);
    EXPECT_EQ(masked.logprobs->top_ids, ids);
}

// ---------------------------------------------------------------------------------------------------------------
// grammar_masks over a small vocabulary: the 256 bytes (ids 0..255), a few multi-byte tokens, a stop token.

struct small_vocab {
    std::vector<std::string> bytes;
    int32_t stop = 0;
    int32_t width = 0;  // the logits' width: padded past the tokenizer
};

small_vocab make_vocab() {
    small_vocab v;
    for (int b = 0; b < 256; ++b) v.bytes.emplace_back(1, static_cast<char>(b));
    for (const char* t : {"ab", "bb", "bbb", "bc", "c", "abc", "{\"", "\":", "\"}", "true", "false"})
        v.bytes.emplace_back(t);
    v.stop = static_cast<int32_t>(v.bytes.size());
    v.bytes.emplace_back();  // the stop token has no text
    v.width = static_cast<int32_t>(v.bytes.size()) + 13;
    v.bytes.resize(static_cast<size_t>(v.width));
    return v;
}

std::shared_ptr<const grammar::tokenizer_info> info_of(const small_vocab& v) {
    return std::make_shared<const grammar::tokenizer_info>(v.bytes, std::vector<int32_t>{v.stop});
}

/// Runs one constrained request to its end through begin_step / sample / end_step, as an executor does, drawing from
/// random logits; returns its text and whether it ended with the stop token.
std::pair<std::string, bool> generate(grammar_masks& gm, const small_vocab& v, structured_output so, uint64_t id,
                                      uint32_t seed, int max_tokens = 2000) {
    std::string text;
    std::vector<int32_t> out;
    for (int i = 0; i < max_tokens; ++i) {
        step_request step;
        step.step_id = static_cast<uint64_t>(i);
        scheduled_seq seq;
        seq.request_id = id;
        seq.do_sample = true;
        seq.sample_index = static_cast<uint32_t>(i);
        seq.sampling.temperature = 1.f;
        seq.sampling.seed = seed;
        if (i == 0) seq.structured = so;
        step.seqs.push_back(seq);
        sample_batch b;
        b.add(seq, nullptr);
        gm.begin_step(step, b);
        EXPECT_EQ(b.seqs[0].mask_row, 0);
        const auto l = random_logits(v.width, seed * 1000 + static_cast<uint32_t>(i));
        gm.finish_masks(b);
        const auto toks = sample_rows(l.data(), v.width, b, std::vector<uint64_t>{id});
        gm.end_step(toks);
        const int32_t t = toks[0].token_id;
        if (t == v.stop) return {text, true};
        EXPECT_LT(t, v.stop) << "a padding or empty id was sampled";
        text += v.bytes[static_cast<size_t>(t)];
        out.push_back(t);
    }
    return {text, false};
}

TEST(GrammarMasks, EveryRegexOutputMatchesInFullAndEndsWithStop) {
    const small_vocab v = make_vocab();
    grammar_masks gm(info_of(v), 2);
    const std::regex re("a(b|c)+c");
    for (uint32_t seed = 0; seed < 40; ++seed) {
        const auto [text, stopped] = generate(gm, v, {structured_kind::regex, "a(b|c)+c"}, 100 + seed, seed);
        EXPECT_TRUE(stopped) << text;
        EXPECT_TRUE(std::regex_match(text, re)) << text;
        step_request done;
        done.finished_ids = {100 + seed};
        sample_batch none;
        gm.begin_step(done, none);
        EXPECT_EQ(gm.num_sequences(), 0u);
    }
    EXPECT_EQ(gm.stats().num_refused, 0u);
    EXPECT_GT(gm.stats().num_masks, 40u);
}

TEST(GrammarMasks, ChoiceOutputsAreOneOfTheChoices) {
    const small_vocab v = make_vocab();
    grammar_masks gm(info_of(v));
    for (uint32_t seed = 0; seed < 30; ++seed) {
        const auto [text, stopped] =
            generate(gm, v, {structured_kind::choice, R"(["true","false","abc"])"}, seed, seed);
        EXPECT_TRUE(stopped);
        EXPECT_TRUE(text == "true" || text == "false" || text == "abc") << text;
    }
}

TEST(GrammarMasks, AReplayRebuildsTheMatcherAtTheGeneratedTokens) {
    // A recompute after preemption carries the constraint again with the tokens generated so far: the mask is the
    // one after them ("ab" given: only b or c may follow, never a stop).
    const small_vocab v = make_vocab();
    grammar_masks gm(info_of(v));
    step_request step;
    scheduled_seq seq;
    seq.request_id = 5;
    seq.do_sample = true;
    seq.sample_index = 1;
    seq.structured = {structured_kind::regex, "a(b|c)+c"};
    seq.output_token_ids = {256};  // "ab"
    step.seqs.push_back(seq);
    sample_batch b;
    b.add(seq, nullptr);
    gm.begin_step(step, b);
    gm.finish_masks(b);
    ASSERT_NE(b.masks, nullptr);
    for (int32_t id = 0; id < v.width; ++id) {
        const bool allowed = kernels::mask_allows(b.masks, b.mask_words, 0, id);
        const std::string& t = v.bytes[static_cast<size_t>(id)];
        const bool fits = id != v.stop && !t.empty() && std::regex_match("ab" + t + "c", std::regex("a(b|c)+c"));
        if (t == "bc" || t == "c") {
            EXPECT_TRUE(allowed) << "'" << t << "'";
        } else if (!fits) {
            EXPECT_FALSE(allowed) << "id " << id << " '" << t << "'";
        }
    }
}

TEST(GrammarMasks, UnconstrainedRowsKeepNoMask) {
    const small_vocab v = make_vocab();
    grammar_masks gm(info_of(v));
    step_request step;
    scheduled_seq a, c;
    a.request_id = 1;
    a.do_sample = true;
    c.request_id = 2;
    c.do_sample = true;
    c.structured = {structured_kind::json_object, ""};
    step.seqs = {a, c};
    sample_batch b;
    b.add(a, nullptr);
    b.add(c, nullptr);
    gm.begin_step(step, b);
    gm.finish_masks(b);
    EXPECT_EQ(b.seqs[0].mask_row, -1);
    EXPECT_EQ(b.seqs[1].mask_row, 0);
    // json_object: the first token must open the object.
    for (int32_t id = 0; id < v.width; ++id) {
        const std::string& t = v.bytes[static_cast<size_t>(id)];
        if (kernels::mask_allows(b.masks, b.mask_words, 0, id)) {
            EXPECT_FALSE(t.empty());
            EXPECT_EQ(t[0], '{') << "'" << t << "'";
        }
    }
}

TEST(GrammarMasks, ARefusedTokenLeavesOnlyTheStopTokens) {
    // A token the grammar does not allow (sampled despite the mask: min_tokens banning the only allowed stop) leaves
    // the sequence its stop tokens only, from then on, counted once.
    const small_vocab v = make_vocab();
    grammar_masks gm(info_of(v));
    for (uint32_t i = 0; i < 3; ++i) {
        step_request step;
        scheduled_seq s;
        s.request_id = 9;
        s.do_sample = true;
        s.sample_index = i;
        if (i == 0) s.structured = {structured_kind::regex, "a+"};
        step.seqs = {s};
        sample_batch b;
        b.add(s, nullptr);
        gm.begin_step(step, b);
        gm.finish_masks(b);
        const bool only_stop = [&] {
            for (int32_t id = 0; id < v.width; ++id)
                if (kernels::mask_allows(b.masks, b.mask_words, 0, id) != (id == v.stop)) return false;
            return true;
        }();
        EXPECT_EQ(only_stop, i > 0) << "step " << i;
        if (i == 0) {
            EXPECT_TRUE(kernels::mask_allows(b.masks, b.mask_words, 0, 'a'));
        }
        gm.end_step(std::vector<sampled_token>{{.request_id = 9, .token_id = 'b'}});
    }
    EXPECT_EQ(gm.stats().num_refused, 1u);
}

TEST(GrammarMasks, StopTokensAfterTheGrammarEndedAreNotRefusals) {
    // A request with ignore_eos keeps sampling once its grammar is complete: the only token left is the stop token,
    // sampled again and again. Those are counted apart from refusals, and the mask stays the stop token only.
    const small_vocab v = make_vocab();
    grammar_masks gm(info_of(v));
    const std::vector<int32_t> sampled = {'a', 'b', v.stop, v.stop, v.stop};
    for (uint32_t i = 0; i <= sampled.size(); ++i) {
        step_request step;
        scheduled_seq s;
        s.request_id = 4;
        s.do_sample = true;
        s.sample_index = i;
        if (i == 0) s.structured = {structured_kind::regex, "ab"};
        step.seqs = {s};
        sample_batch b;
        b.add(s, nullptr);
        gm.begin_step(step, b);
        gm.finish_masks(b);
        for (int32_t id = 0; id < v.width; ++id) {
            const bool want = i == 0 ? (id == 'a' || id == 256) : i == 1 ? id == 'b' : id == v.stop;  // 256: "ab"
            ASSERT_EQ(kernels::mask_allows(b.masks, b.mask_words, 0, id), want) << "step " << i << " id " << id;
        }
        if (i < sampled.size()) gm.end_step(std::vector<sampled_token>{{.request_id = 4, .token_id = sampled[i]}});
    }
    EXPECT_EQ(gm.stats().num_refused, 0u);
    EXPECT_EQ(gm.stats().num_past_end, 2u);  // the first stop ends the grammar; the next two are past its end

    // A replay after preemption with those tokens generated rebuilds the same state: stop only, nothing refused.
    step_request replay;
    scheduled_seq r;
    r.request_id = 4;
    r.do_sample = true;
    r.sample_index = static_cast<uint32_t>(sampled.size());
    r.structured = {structured_kind::regex, "ab"};
    r.output_token_ids = sampled;
    replay.seqs = {r};
    sample_batch b;
    b.add(r, nullptr);
    gm.begin_step(replay, b);
    gm.finish_masks(b);
    for (int32_t id = 0; id < v.width; ++id)
        EXPECT_EQ(kernels::mask_allows(b.masks, b.mask_words, 0, id), id == v.stop);
    EXPECT_EQ(gm.stats().num_refused, 0u);
}

TEST(GrammarMasks, AMissingVocabularyEndsConstrainedRowsInsteadOfCrashing) {
    grammar_masks gm("/nonexistent/tokenizer.json", {1}, 64);
    step_request step;
    scheduled_seq s;
    s.request_id = 1;
    s.do_sample = true;
    s.structured = {structured_kind::regex, "a+"};
    step.seqs = {s};
    sample_batch b;
    b.add(s, nullptr);
    gm.begin_step(step, b);
    gm.finish_masks(b);
    ASSERT_NE(b.masks, nullptr);
    for (int32_t id = 0; id < 64; ++id) EXPECT_FALSE(kernels::mask_allows(b.masks, b.mask_words, 0, id));
    EXPECT_EQ(gm.stats().num_refused, 1u);
}

}  // namespace
}  // namespace zmoe
