#pragma once
// Timing of the CUDA expert-parallel MoE exchange alone (cuda_ep_exchange), for `zmoe bench ep`: every rank a
// thread with its own GPU and NCCL communicator, random top-k routing over experts spread evenly over the ranks.
// Declared for every build; defined only with ZMOE_CUDA=ON (callers guard with ZMOE_WITH_CUDA).

#include <cstdint>
#include <vector>

namespace zmoe {

struct ep_exchange_timing_params {
    int world = 2;         ///< ranks = GPUs 0..world-1
    int32_t tokens = 128;  ///< per rank
    int32_t hidden = 2048;
    int32_t top_k = 8;
    int32_t num_experts = 128;   ///< num_experts / world slots per rank
    double capacity_factor = 0;  ///< as executor_options::ep_capacity_factor (0: the executor's default window)
    int iterations = 50;         ///< timed, after a few untimed
    bool fp8_dispatch = false;   ///< dispatch FP8 records (ep_exchange_params::fp8_dispatch) instead of BF16 rows
};

/// One rank's medians, in µs: the fixed path's dispatch + combine replayed as a CUDA graph (what a decode graph
/// holds), and each half eagerly (events around the enqueued work); the exact path's dispatch and combine
/// (host plan, events around). Bytes: what one rank sends per dispatch on each path.
/// The fixed path is timed over both transports: peer to peer (the default on one host; p2p_available false when
/// the GPUs could not map each other's memory, its times then 0) and NCCL send/recv. Floor: a copy-engine copy of
/// the same remote bytes to the peer GPU (exact_send_bytes) and back (exact_combine_bytes), as one rank's dispatch +
/// combine must move. With fp8_dispatch the dispatch sends FP8 records (about half the bytes), the combine BF16.
struct ep_exchange_timing {
    int rank = 0;
    bool fp8_dispatch = false;
    int32_t capacity = 0;  ///< fixed window rows per destination rank
    bool p2p_available = false;
    double p2p_graph_us = 0, p2p_dispatch_us = 0, p2p_combine_us = 0;
    double fixed_graph_us = 0, fixed_dispatch_us = 0, fixed_combine_us = 0;  ///< NCCL send/recv
    double exact_dispatch_us = 0, exact_combine_us = 0;
    double peer_copy_floor_us = 0;
    int64_t fixed_send_bytes = 0, exact_send_bytes = 0;  ///< of the dispatch
    int64_t exact_combine_bytes = 0;                     ///< the remote rows' BF16 expert outputs sent back
};

/// Runs the exchange on `p.world` GPUs; throws zmoe::error(unsupported) when fewer are visible.
std::vector<ep_exchange_timing> measure_ep_exchange(const ep_exchange_timing_params& p);

}  // namespace zmoe
