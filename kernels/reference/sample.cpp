// CPU reference of sampling: logits processing (bias, penalties, banned ids), greedy, temperature, top-k, min-p,
// top-p, Gumbel-max draw keyed on (seed, counter), raw logprobs.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <numeric>
#include <vector>

#include "kernels/reference/reference.hpp"
#include "kernels/sample_rng.hpp"

namespace zmoe::kernels::ref {

void process_logits(const float* logits, int32_t vocab_size, const sample_seq_params& s, const sample_inputs& in,
                    float* out) {
    std::copy(logits, logits + vocab_size, out);
    for (int32_t j = 0; j < s.num_bias; ++j) {
        const int32_t id = in.bias_ids[s.bias_begin + j];
        if (id >= 0 && id < vocab_size) out[id] += in.bias_values[s.bias_begin + j];
    }
    if (has_penalties(s)) {
        std::vector<uint32_t> count(vocab_size, 0);
        std::vector<char> seen(vocab_size, 0);
        const int32_t* h = in.history + s.history_begin;
        for (int32_t j = 0; j < s.num_prompt + s.num_output; ++j) {
            const int32_t t = h[j];
            if (t < 0 || t >= vocab_size) continue;
            seen[t] = 1;
            if (j >= s.num_prompt) ++count[t];
        }
        for (int32_t i = 0; i < vocab_size; ++i)
            if (seen[i]) out[i] = apply_penalties(out[i], true, count[i], s);
    }
    for (int32_t j = 0; j < s.num_banned; ++j) {
        const int32_t id = in.banned[s.banned_begin + j];
        if (id >= 0 && id < vocab_size) out[id] = -INFINITY;
    }
    if (s.mask_row >= 0) {
        for (int32_t i = 0; i < vocab_size; ++i)
            if (!mask_allows(in.masks, in.mask_words, s.mask_row, i)) out[i] = -INFINITY;
    }
}

int32_t sample(const float* logits, int32_t vocab_size, const sample_seq_params& s) {
    if (s.temperature <= 0.f) {
        int32_t best = 0;
        for (int32_t i = 1; i < vocab_size; ++i)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    std::vector<float> z(vocab_size);
    for (int32_t i = 0; i < vocab_size; ++i) z[i] = logits[i] / s.temperature;
    std::vector<float> sorted = z;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    float threshold = sorted.back();
    if (s.top_k > 0 && s.top_k < vocab_size) threshold = sorted[s.top_k - 1];
    if (s.min_p > 0.f) threshold = std::max(threshold, min_p_floor(sorted[0], s.min_p));
    if (s.top_p < 1.f) {
        // Mass over the tokens top-k and min-p kept, each exp(z - max z); the threshold is the z at which the
        // running mass of the descending order first reaches top_p of the total (ties at the threshold are kept).
        double total = 0;
        for (float v : sorted)
            if (v >= threshold) total += std::exp(v - sorted[0]);
        double running = 0;
        for (float v : sorted) {
            if (v < threshold) break;
            running += std::exp(v - sorted[0]);
            if (running >= s.top_p * total) {
                threshold = v;
                break;
            }
        }
    }
    int32_t best = -1;
    float best_score = 0.f;
    for (int32_t i = 0; i < vocab_size; ++i) {
        if (z[i] < threshold) continue;
        const float u = sample_uniform(s.seed, s.counter, uint32_t(i));
        const float score = z[i] - std::log(-std::log(u));
        if (best < 0 || score > best_score) best = i, best_score = score;
    }
    return best;
}

int32_t sample(const float* logits, int32_t vocab_size, float temperature, float top_p, int32_t top_k, uint64_t seed,
               uint32_t counter) {
    return sample(logits, vocab_size,
                  sample_seq_params{
                      .temperature = temperature, .top_p = top_p, .top_k = top_k, .counter = counter, .seed = seed});
}

int32_t process_and_sample(const float* logits, int32_t vocab_size, const sample_seq_params& s,
                           const sample_inputs& in) {
    if (!has_processing(s)) return sample(logits, vocab_size, s);
    std::vector<float> processed(vocab_size);
    process_logits(logits, vocab_size, s, in, processed.data());
    return sample(processed.data(), vocab_size, s);
}

void logprobs(const float* logits, int32_t vocab_size, int32_t token, int32_t k, float* token_logprob, int32_t* top_ids,
              float* top_logprobs) {
    double m = -INFINITY;
    for (int32_t i = 0; i < vocab_size; ++i) m = std::max(m, double(logits[i]));
    double sum = 0;
    for (int32_t i = 0; i < vocab_size; ++i) sum += std::exp(double(logits[i]) - m);
    const double lse = m + std::log(sum);
    *token_logprob = float(double(logits[token]) - lse);
    k = std::clamp(k, 0, std::min(vocab_size, kMaxLogprobs));
    std::vector<int32_t> order(vocab_size);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int32_t j = 0; j < k; ++j) {
        top_ids[j] = order[j];
        top_logprobs[j] = float(double(logits[order[j]]) - lse);
    }
}

}  // namespace zmoe::kernels::ref
