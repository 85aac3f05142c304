// CPU reference of sampling: greedy, temperature, top-k, top-p, Gumbel-max draw keyed on (seed, counter).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <vector>

#include "kernels/reference/reference.hpp"
#include "kernels/sample_rng.hpp"

namespace zmoe::kernels::ref {

int32_t sample(const float* logits, int32_t vocab_size, float temperature, float top_p, int32_t top_k, uint64_t seed,
               uint32_t counter) {
    if (temperature <= 0.f) {
        int32_t best = 0;
        for (int32_t i = 1; i < vocab_size; ++i)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    std::vector<float> z(vocab_size);
    for (int32_t i = 0; i < vocab_size; ++i) z[i] = logits[i] / temperature;
    std::vector<float> sorted = z;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    float threshold = sorted.back();
    if (top_k > 0 && top_k < vocab_size) threshold = sorted[top_k - 1];
    if (top_p < 1.f) {
        // Mass over the tokens top-k kept, each exp(z - max z); the threshold is the z at which the running
        // mass of the descending order first reaches top_p of the total (ties at the threshold are kept).
        double total = 0;
        for (float v : sorted)
            if (v >= threshold) total += std::exp(v - sorted[0]);
        double running = 0;
        for (float v : sorted) {
            if (v < threshold) break;
            running += std::exp(v - sorted[0]);
            if (running >= top_p * total) {
                threshold = v;
                break;
            }
        }
    }
    int32_t best = -1;
    float best_score = 0.f;
    for (int32_t i = 0; i < vocab_size; ++i) {
        if (z[i] < threshold) continue;
        const float u = sample_uniform(seed, counter, uint32_t(i));
        const float score = z[i] - std::log(-std::log(u));
        if (best < 0 || score > best_score) best = i, best_score = score;
    }
    return best;
}

}  // namespace zmoe::kernels::ref
