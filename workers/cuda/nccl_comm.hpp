#pragma once
// The expert-parallel collective of CUDA workers: one NCCL communicator over the world's GPUs, used as
// variable-sized all-to-alls built from grouped ncclSend/ncclRecv (the MoE dispatch and combine, EPLB weight
// moves). Every call is a collective: all ranks make the same calls in the same order, with empty chunks too.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "workers/cuda/device_buffer.hpp"

namespace zmoe::cuda {

/// ncclGetUniqueId as raw bytes (needs no GPU).
std::string nccl_unique_id_bytes();

class nccl_comm {
  public:
    /// Joins the communicator `unique_id` (nccl_unique_id_bytes() of rank 0) as `rank` of `world_size`, on the
    /// current CUDA device; blocks until every rank has joined. Throws zmoe::error(invalid_argument) for an id of
    /// the wrong size, (peer_dead) when NCCL fails.
    nccl_comm(const std::string& unique_id, int rank, int world_size);
    ~nccl_comm();
    nccl_comm(const nccl_comm&) = delete;
    nccl_comm& operator=(const nccl_comm&) = delete;

    int rank() const { return rank_; }
    int world_size() const { return world_size_; }

    /// recv[src] = what `src` passed as send[rank()]. Synchronises `stream` (the counts size later buffers).
    std::vector<int64_t> exchange_counts(const std::vector<int64_t>& send, cudaStream_t stream);

    /// data[i] = the largest data[i] over the ranks, in place on the device; enqueued on `stream` (capturable).
    void all_reduce_max(int32_t* data, size_t count, cudaStream_t stream);

    /// The element-wise largest of every rank's `values` (same length everywhere). Synchronises `stream`.
    std::vector<int32_t> agree_max(const std::vector<int32_t>& values, cudaStream_t stream);

    /// Every rank's `mine` (the same size on every rank), in rank order. Synchronises `stream`.
    std::vector<std::string> all_gather(const std::string& mine, cudaStream_t stream);

    /// Variable all-to-all of bytes: chunk `dst` of `send` (send_bytes[dst] bytes, chunks back to back in rank
    /// order) lands as chunk rank() of `recv` on rank dst (recv_bytes[src], back to back). Enqueued on `stream`.
    void all_to_all(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                    const std::vector<int64_t>& recv_bytes, cudaStream_t stream);

    /// A batch of point-to-point transfers in one NCCL group: for matching, both ends must list their transfers
    /// with the same peer in the same order.
    struct transfer {
        int peer = 0;
        void* data = nullptr;
        size_t bytes = 0;
        bool send = true;
    };
    void exchange(const std::vector<transfer>& transfers, cudaStream_t stream);

  private:
    ncclComm_t comm_ = nullptr;
    int rank_ = 0;
    int world_size_ = 1;
    device_buffer counts_;  // [2 * world_size] int64: what we send | what we receive
    device_buffer agree_;   // [kMaxAgree] int32: agree_max's values
};

}  // namespace zmoe::cuda
