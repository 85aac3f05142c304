#pragma once
// The expert-parallel exchange of a CUDA worker: the MoE dispatch (each (token, k) choice's row to the rank that
// holds its slot) and combine (the expert outputs back to the token's own rank, summed with the routing weights),
// over the world's NCCL communicator. Between the two, the caller runs this rank's experts over the received rows.
//
// Every call is a collective: all ranks make the same calls in the same order, with zero tokens too.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/api.hpp"
#include "workers/cuda/cuda_workspace.hpp"
#include "workers/cuda/nccl_comm.hpp"

namespace zmoe::cuda {

/// What an exchange is built over; both references must outlive it.
struct ep_exchange_params {
    nccl_comm* comm = nullptr;     ///< the world's communicator (world_size > 1)
    cuda_workspace* ws = nullptr;  ///< send_x, recv_x, recv_slot, y_recv, y_back, moe_plan (world_size > 1)
    int32_t hidden = 0;
    int32_t top_k = 0;
};

/// One MoE layer's dispatch input.
struct ep_dispatch_params {
    const int32_t* slot_ids = nullptr;  // [num_tokens, top_k]: global slot (rank * slots_per_rank + local slot)
    const kernels::bf16* x = nullptr;   // [num_tokens, hidden]: the normalised hidden states
    int32_t num_tokens = 0;             ///< this rank's tokens (0: still joins the exchange)
    int32_t slots_per_rank = 0;         ///< slots of this layer on every rank
};

/// One MoE layer's combine input.
struct ep_combine_params {
    const kernels::bf16* y_recv = nullptr;  // [received rows, hidden]: this rank's expert output per received row
    const float* topk_weights = nullptr;    // [num_tokens, top_k]
    kernels::bf16* out = nullptr;           // [num_tokens, hidden]
    int32_t num_tokens = 0;                 ///< as given to the matching dispatch
};

class cuda_ep_exchange {
  public:
    explicit cuda_ep_exchange(const ep_exchange_params& p);

    /// Sends every (token, k) row of p.x to the rank of its slot, with its local slot. Returns the number of rows
    /// received, R: ws.recv_x[0, R) holds them (grouped by source rank, each source's rows in (token, k) order) and
    /// ws.recv_slot[0, R) their local slots in [0, slots_per_rank). Plans on the host: one device→host copy of the
    /// slot ids and one count exchange, each synchronising `stream`.
    int64_t dispatch(const ep_dispatch_params& p, cudaStream_t stream);

    /// Sends p.y_recv's rows back to their source ranks and writes out[t] = bf16(sum_k topk_weights[t, k] *
    /// y[t, k]) in top-k order (fp32), y[t, k] the expert output of the row (t, k) was sent as. Follows the
    /// dispatch of the same layer.
    void combine(const ep_combine_params& p, cudaStream_t stream);

  private:
    ep_exchange_params p_;
    // The last dispatch: rows sent to / received from each rank.
    std::vector<int64_t> send_rows_, recv_rows_;
};

}  // namespace zmoe::cuda
