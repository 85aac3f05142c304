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

}  // namespace zmoe
