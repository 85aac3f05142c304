#include "workers/expert_comm.hpp"

#include "base/check.hpp"

namespace zmoe {

std::vector<std::vector<float>> local_expert_comm::all_to_all(std::vector<std::vector<float>> send) {
    ZMOE_CHECK(send.size() == 1, "all_to_all: " << send.size() << " buffers for a world of 1");
    return send;
}

}  // namespace zmoe
