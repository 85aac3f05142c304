#include "workers/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace zmoe {
namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

}  // namespace

double counter_uniform(uint64_t seed, uint64_t counter) {
    const uint64_t bits = splitmix64(splitmix64(seed) ^ splitmix64(counter ^ 0x6a09e667f3bcc909ull));
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

int32_t argmax(const float* logits, int64_t n) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(logits[i])) continue;
        if (best < 0 || logits[i] > logits[best]) best = i;
    }
    return static_cast<int32_t>(std::max<int64_t>(best, 0));
}

int32_t sample_token(const float* logits, int64_t vocab, const sampling_params& params, uint32_t sample_index) {
    if (params.temperature <= 0.f || params.top_k == 1) return argmax(logits, vocab);
    // Candidates ordered by descending logit, lower id first on ties: the order every cut and the draw use.
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    int64_t keep = vocab;
    if (params.top_k > 0 && params.top_k < vocab) {
        keep = params.top_k;
        std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
    } else {
        std::sort(order.begin(), order.end(), before);
    }
    const double max_logit = logits[order[0]];
    std::vector<double> p(static_cast<size_t>(keep));
    double sum = 0.0;
    for (int64_t i = 0; i < keep; ++i) {
        p[i] = std::exp((static_cast<double>(logits[order[i]]) - max_logit) / params.temperature);
        sum += p[i];
    }
    if (params.top_p < 1.f) {
        // Mass of the top-k-restricted distribution, as vLLM and HF apply top-p after top-k.
        double mass = 0.0;
        int64_t cut = 0;
        while (cut < keep) {
            mass += p[cut] / sum;
            ++cut;
            if (mass >= static_cast<double>(params.top_p)) break;
        }
        keep = cut;
        sum = 0.0;
        for (int64_t i = 0; i < keep; ++i) sum += p[i];
    }
    const double target = counter_uniform(params.seed, sample_index) * sum;
    double acc = 0.0;
    for (int64_t i = 0; i < keep; ++i) {
        acc += p[i];
        if (target < acc) return order[i];
    }
    return order[keep - 1];
}

}  // namespace zmoe
