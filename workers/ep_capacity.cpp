#include "workers/ep_capacity.hpp"

#include <algorithm>
#include <cmath>

namespace zmoe {

int32_t ep_window_capacity(int32_t max_tokens, int32_t top_k, int32_t world, double factor, int32_t max_capacity) {
    const int64_t tk = int64_t(std::max(max_tokens, 1)) * std::max(top_k, 1);
    const double share = static_cast<double>(tk) / std::max(world, 1);
    const double want =
        factor > 0 ? factor * share : std::max(kEpCapacityFactor * share, share + kEpCapacitySigmas * std::sqrt(share));
    auto c = static_cast<int64_t>(std::ceil(want));
    c = (std::max<int64_t>(c, 1) + 7) / 8 * 8;
    return static_cast<int32_t>(std::min<int64_t>({c, tk, max_capacity}));
}

}  // namespace zmoe
