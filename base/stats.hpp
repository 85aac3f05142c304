#pragma once
// Summary statistics the benchmarks share: one definition of the median that every timing table reports.

#include <algorithm>
#include <vector>

namespace zmoe {

/// The median of v as the benchmarks report it: the upper middle element of the sorted values (v[n / 2]), so it is
/// always one of the measured values; 0 for an empty v.
inline double median(std::vector<double> v) {
    if (v.empty()) return 0;
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    return *mid;
}

}  // namespace zmoe
