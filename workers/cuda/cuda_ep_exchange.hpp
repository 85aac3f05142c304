#pragma once
// The expert-parallel exchange of a CUDA worker: the MoE dispatch (each (token, k) choice's row to the rank that
// holds its slot) and combine (the expert outputs back to the token's own rank, summed with the routing weights),
// over the world's NCCL communicator. Between the two, the caller runs this rank's experts over the received rows.
//
// Two ways to exchange, chosen per call by ep_dispatch_params::capacity:
// - exact (capacity 0): the plan is made on the host from the slot ids (one device→host copy per layer, then a
//   count exchange), and exactly the rows due travel. Not capturable; never drops a row.
// - fixed (capacity C > 0): the plan is made on the device (launch_ep_dispatch_plan) into a window of C rows per
//   destination rank, and every rank sends and receives world × C rows whatever the routing: no host round trip,
//   so a CUDA graph can hold it. Unused rows carry the slot slots_per_rank, an empty "expert" the receiver permutes
//   past its last group and never computes. A choice beyond a window is not sent and sets the step's overflow flag
//   (all-reduced over the ranks in end_step): the caller must then redo the step on the exact path.
//
// The fixed path moves its rows one of two ways, chosen when the exchange is built:
// - peer to peer (every rank on one host, each able to map every other's memory: CUDA IPC between processes, peer
//   access between threads): each rank owns a window (launch_ep_p2p_dispatch's layout) mapped into every other
//   rank; the sender's kernel writes the rows and their slots straight into the receiver's window and raises a flag
//   there, the receiver's wait kernel spins on its flags; the combine writes the expert outputs back the same way.
//   No NCCL call per layer; counters on the device, so a graph replays it.
// - NCCL send/recv of the whole windows (ranks on different hosts, or peers that cannot be mapped).
//
// Dual-batch overlap: two lanes (micro-batches) with their own fixed buffers; plan and gather run on the compute
// stream, the NCCL transfers on the communication stream, ordered by events, so that one lane's transfers overlap
// the other lane's expert computation. With one stream for both, the events are skipped.
//
// FP8 dispatch (an FP8 model: its experts read e4m3 rows): every path sends each row as an FP8 record (kernels/api.hpp,
// "The FP8 dispatch": e4m3 codes and one fp32 scale per 128-channel group, about half a BF16 row), quantized on the
// sending rank exactly as the receiving rank's FP8 experts would quantize it (launch_fp8_quantize), so what they
// compute is bit for bit what a BF16 dispatch quantized after the exchange gives. Peer to peer the dispatch kernel
// quantizes straight into the receiver's window; NCCL and the exact path pack the records first
// (launch_ep_fp8_pack). The receiver hands them to launch_moe_experts as moe_fp8_experts::x_records. The combine
// stays BF16 (the expert outputs are summed in fp32 on the token's rank).
//
// Every dispatch/combine/end_step is a collective: all ranks make the same calls in the same order with the same
// capacities, with zero tokens too, and all build the exchange with the same fp8_dispatch.

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/api.hpp"
#include "workers/cuda/cuda_workspace.hpp"
#include "workers/cuda/device_buffer.hpp"
#include "workers/cuda/nccl_comm.hpp"

namespace zmoe::cuda {

/// What an exchange is built over; the pointers must outlive it.
struct ep_exchange_params {
    nccl_comm* comm = nullptr;     ///< the world's communicator (world_size > 1)
    cuda_workspace* ws = nullptr;  ///< the exact path's buffers (send_x, recv_x, recv_slot, y_recv, y_back, moe_plan)
    int32_t hidden = 0;
    int32_t top_k = 0;
    int32_t max_fixed_tokens = 0;  ///< most tokens of one lane on the fixed path (sizes its buffers; 0: none)
    /// Try the peer-to-peer windows for the fixed path (a collective: every rank maps every other's window, and
    /// all take NCCL when one cannot); false: NCCL send/recv.
    bool peer_to_peer = true;
    int32_t p2p_blocks = 0;  ///< grid of the peer-to-peer copy kernels (bounds their SM share); 0: their default
    /// Dispatch FP8 records instead of BF16 rows (the same on every rank; hidden a multiple of 16).
    bool fp8_dispatch = false;
};

/// One MoE layer's dispatch input.
struct ep_dispatch_params {
    const int32_t* slot_ids = nullptr;  // [num_tokens, top_k]: global slot (rank * slots_per_rank + local slot)
    const kernels::bf16* x = nullptr;   // [num_tokens, hidden]: the normalised hidden states
    int32_t num_tokens = 0;             ///< this rank's tokens in this lane (0: still joins the exchange)
    int32_t slots_per_rank = 0;         ///< slots of this layer on every rank
    int32_t capacity = 0;               ///< rows per destination rank (fixed path); 0: the exact path
    int lane = 0;                       ///< 0 or 1 (dual-batch overlap's micro-batch); the exact path has lane 0 only
};

/// The rows this rank received in one dispatch, for its experts.
struct ep_received {
    const kernels::bf16* x = nullptr;  // [rows, hidden]; nullptr with an FP8 dispatch
    /// With an FP8 dispatch: [rows, ep_fp8_record_bytes(hidden)] records (moe_fp8_experts::x_records); else nullptr.
    const uint8_t* x_fp8 = nullptr;
    const int32_t* slots = nullptr;  // [rows]: local slots in [0, num_slots)
    int32_t rows = 0;                ///< exact: the rows due; fixed: world × capacity
    int32_t num_slots = 0;           ///< exact: slots_per_rank; fixed: slots_per_rank + 1 (the last one is unused rows)
    kernels::bf16* y = nullptr;      // [rows, hidden]: where the caller writes the expert output of each row
};

/// One MoE layer's combine input.
struct ep_combine_params {
    const float* topk_weights = nullptr;  // [num_tokens, top_k]
    kernels::bf16* out = nullptr;         // [num_tokens, hidden]
    int32_t num_tokens = 0;               ///< as given to the matching dispatch
    int lane = 0;
};

class cuda_ep_exchange {
  public:
    explicit cuda_ep_exchange(const ep_exchange_params& p);
    ~cuda_ep_exchange();
    cuda_ep_exchange(const cuda_ep_exchange&) = delete;
    cuda_ep_exchange& operator=(const cuda_ep_exchange&) = delete;

    /// The fixed path's rows per destination rank for a lane of at most `max_tokens` tokens on any rank:
    /// ep_window_capacity (workers/ep_capacity.hpp; `factor` <= 0: the default rule, the even share with room for
    /// a random routing's spread), at most what the buffers hold; 0 (exact path) when the lane does not fit them.
    int32_t capacity_for(int32_t max_tokens, double factor) const;

    /// Clears the step's overflow flag (enqueued on `stream`, capturable). Before the first fixed dispatch of a step.
    void begin_step(cudaStream_t stream);
    /// All-reduces the overflow flag over the ranks and copies it to the host (capturable); after the last combine.
    void end_step(cudaStream_t stream);
    /// After `stream` of end_step has synchronised: whether some rank's fixed window overflowed this step.
    bool overflowed() const;

    /// Plans and gathers the rows on `compute`, then sends/receives them on `comm` (`comm` may equal `compute`).
    /// The exact path synchronises `compute` (host plan) and runs everything on it.
    void dispatch(const ep_dispatch_params& p, cudaStream_t compute, cudaStream_t comm);
    /// Makes `compute` wait for lane's dispatch; the rows it received.
    ep_received received(int lane, cudaStream_t compute);
    /// Sends the lane's expert outputs (ep_received::y, written on `compute`) back to their ranks on `comm`;
    /// `compute` does not wait for them.
    void combine(const ep_combine_params& p, cudaStream_t compute, cudaStream_t comm);
    /// Makes `compute` wait for the lane's combine, then writes out[t] = bf16(sum_k topk_weights[t, k] * y[t, k])
    /// on it (top-k order, fp32), y[t, k] the expert output of the row (t, k) was sent as.
    void finish_combine(const ep_combine_params& p, cudaStream_t compute);

    /// Whether the fixed path writes peer to peer (else NCCL send/recv).
    bool peer_to_peer() const { return p2p_; }
    /// Whether the dispatch sends FP8 records (ep_exchange_params::fp8_dispatch).
    bool fp8_dispatch() const { return p_.fp8_dispatch; }
    /// Bytes of one dispatched row (kernels::ep_dispatch_row_bytes).
    int64_t dispatch_row_bytes() const { return kernels::ep_dispatch_row_bytes(p_.hidden, p_.fp8_dispatch); }

  private:
    struct lane_buffers {
        device_buffer send_token, send_slot, src_row, send_counts;  // the plan
        // [world * max capacity (, dispatch row bytes | hidden bf16)]: send_x and recv_x hold dispatched rows
        device_buffer send_x, recv_x, recv_slot, y_recv, y_back;
        cudaEvent_t gathered = nullptr, dispatched = nullptr, computed = nullptr, combined = nullptr;
        int32_t capacity = 0;  ///< of the lane's last dispatch (0: exact)
        int32_t slots_per_rank = 0;
        bool two_streams = false;  ///< the last dispatch's transfers ran on a communication stream of their own
    };
    void dispatch_exact(const ep_dispatch_params& p, cudaStream_t stream);
    /// out[i] = the dispatched form of x[rows[i]] (a BF16 copy, or an FP8 record); with slots, the FP8 records whose
    /// slot is skip_slot or more (unused rows) are not written.
    void gather_rows(const kernels::bf16* x, const int32_t* rows, void* out, int32_t num_rows, const int32_t* slots,
                     int32_t skip_slot, cudaStream_t stream) const;
    /// Maps every rank's window into this one (a collective); false, with nothing mapped, when some rank could not.
    bool map_peer_windows();
    kernels::ep_p2p_params p2p_params(int lane, int32_t capacity, int32_t slots_per_rank, bool combine) const;
    char* own_window(int lane) const { return peer_windows_[size_t(p_.comm->rank())] + lane * layout_.bytes; }
    void transfer(const void* send, void* recv, int64_t chunk_bytes, cudaStream_t stream);

    ep_exchange_params p_;
    int world_ = 1;
    int32_t max_capacity_ = 0;  ///< rows per destination rank the fixed buffers hold
    std::array<lane_buffers, 2> lanes_;
    device_buffer overflow_;            // [1] int32: this step's overflow flag
    int32_t* overflow_host_ = nullptr;  // pinned mirror
    // Peer to peer: both lanes' windows in one allocation, every rank's as this GPU addresses it, the IPC mappings
    // to close, and per lane [epoch, dispatch block counter, combine block counter].
    bool p2p_ = false;
    kernels::ep_p2p_window_layout layout_{};
    device_buffer window_, p2p_state_;
    std::vector<char*> peer_windows_;
    std::vector<void*> ipc_mapped_;
    // The exact path's last dispatch: rows sent to / received from each rank.
    std::vector<int64_t> send_rows_, recv_rows_;
};

}  // namespace zmoe::cuda
