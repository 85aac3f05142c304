#include "workers/micro_batch.hpp"

#include <algorithm>
#include <numeric>

namespace zmoe {

int64_t micro_batch_split_row(const std::vector<int64_t>& seq_tokens) {
    const int64_t total = std::accumulate(seq_tokens.begin(), seq_tokens.end(), int64_t{0});
    const bool decode_only = std::all_of(seq_tokens.begin(), seq_tokens.end(), [](int64_t n) { return n == 1; });
    if (decode_only) return (static_cast<int64_t>(seq_tokens.size()) + 1) / 2;
    return (total + 1) / 2;
}

std::array<micro_batch_seqs, 2> micro_batch_sequences(std::span<const int32_t> query_start,
                                                      std::span<const int32_t> start_pos, int32_t split) {
    const auto n = static_cast<int32_t>(start_pos.size());
    const int32_t total = query_start.empty() ? 0 : query_start[static_cast<size_t>(n)];
    split = std::clamp(split, 0, total);
    // b: the sequence that holds row `split` (n when B is empty).
    int32_t b = 0;
    while (b < n && query_start[static_cast<size_t>(b) + 1] <= split) ++b;
    const int32_t a_seqs = b < n && query_start[static_cast<size_t>(b)] < split ? b + 1 : b;
    std::array<micro_batch_seqs, 2> m;
    m[0].query_start.assign(query_start.begin(), query_start.begin() + a_seqs);
    m[0].query_start.push_back(split);
    m[0].start_pos.assign(start_pos.begin(), start_pos.begin() + a_seqs);
    m[1].first_seq = b;
    m[1].query_start.push_back(split);
    m[1].query_start.insert(m[1].query_start.end(), query_start.begin() + b + 1, query_start.begin() + n + 1);
    m[1].start_pos.assign(start_pos.begin() + b, start_pos.end());
    if (b < n) m[1].start_pos[0] += split - query_start[static_cast<size_t>(b)];
    return m;
}

}  // namespace zmoe
