#include "workers/expert_placement.hpp"

#include <string>

#include "base/error.hpp"

namespace zmoe {

expert_placement::expert_placement(int64_t num_experts, std::vector<std::vector<std::vector<int32_t>>> slots)
    : num_experts_(num_experts), slots_(std::move(slots)) {
    replicas_.resize(slots_.size());
    for (size_t l = 0; l < slots_.size(); ++l) {
        if (!slots_[l].empty() && slots_[l].size() != slots_[0].size())
            throw error(errc::invalid_argument, "expert placement: layer " + std::to_string(l) + " has " +
                                                    std::to_string(slots_[l].size()) + " ranks, layer 0 has " +
                                                    std::to_string(slots_[0].size()));
        replicas_[l].resize(static_cast<size_t>(num_experts));
        for (size_t r = 0; r < slots_[l].size(); ++r) {
            for (size_t s = 0; s < slots_[l][r].size(); ++s) {
                const int32_t e = slots_[l][r][s];
                if (e < 0 || e >= num_experts)
                    throw error(errc::invalid_argument, "expert placement: layer " + std::to_string(l) + " rank " +
                                                            std::to_string(r) + " slot " + std::to_string(s) +
                                                            " names expert " + std::to_string(e));
                replicas_[l][e].push_back({static_cast<int32_t>(r), static_cast<int32_t>(s)});
            }
        }
        for (int64_t e = 0; e < num_experts; ++e)
            if (replicas_[l][e].empty())
                throw error(errc::invalid_argument, "expert placement: layer " + std::to_string(l) +
                                                        " has no replica of expert " + std::to_string(e));
    }
}

expert_placement expert_placement::make_default(int64_t num_moe_layers, int64_t num_experts, int world_size) {
    if (world_size <= 0) throw error(errc::invalid_argument, "expert placement: world size must be positive");
    std::vector<std::vector<int32_t>> per_rank(static_cast<size_t>(world_size));
    for (int r = 0; r < world_size; ++r)
        for (int64_t e = r * num_experts / world_size; e < (r + 1) * num_experts / world_size; ++e)
            per_rank[r].push_back(static_cast<int32_t>(e));
    return expert_placement(
        num_experts, std::vector<std::vector<std::vector<int32_t>>>(static_cast<size_t>(num_moe_layers), per_rank));
}

}  // namespace zmoe
