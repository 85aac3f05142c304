#include "workers/cuda/nccl_comm.hpp"

#include <cstring>

#include "base/check.hpp"
#include "base/error.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::cuda {
namespace {

constexpr size_t kMaxAgree = 64;

void nccl_check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) throw error(errc::peer_dead, std::string("NCCL ") + what + ": " + ncclGetErrorString(r));
}

}  // namespace

std::string nccl_unique_id_bytes() {
    ncclUniqueId id;
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

nccl_comm::nccl_comm(const std::string& unique_id, int rank, int world_size)
    : rank_(rank),
      world_size_(world_size),
      counts_(sizeof(int64_t) * 2 * static_cast<size_t>(world_size)),
      agree_(sizeof(int32_t) * kMaxAgree) {
    ncclUniqueId id;
    if (unique_id.size() != sizeof id)
        throw error(errc::invalid_argument, "NCCL unique id of " + std::to_string(unique_id.size()) +
                                                " bytes, expected " + std::to_string(sizeof id));
    std::memcpy(&id, unique_id.data(), sizeof id);
    nccl_check(ncclCommInitRank(&comm_, world_size, id, rank), "ncclCommInitRank");
}

nccl_comm::~nccl_comm() {
    if (comm_) ncclCommDestroy(comm_);
}

std::vector<int64_t> nccl_comm::exchange_counts(const std::vector<int64_t>& send, cudaStream_t stream) {
    const size_t w = static_cast<size_t>(world_size_);
    int64_t* d = counts_.as<int64_t>();
    ZMOE_CUDA_CHECK(cudaMemcpyAsync(d, send.data(), sizeof(int64_t) * w, cudaMemcpyHostToDevice, stream));
    nccl_check(ncclGroupStart(), "group start");
    for (int p = 0; p < world_size_; ++p) {
        nccl_check(ncclSend(d + p, 1, ncclInt64, p, comm_, stream), "send counts");
        nccl_check(ncclRecv(d + w + p, 1, ncclInt64, p, comm_, stream), "recv counts");
    }
    nccl_check(ncclGroupEnd(), "group end");
    std::vector<int64_t> recv(w);
    ZMOE_CUDA_CHECK(cudaMemcpyAsync(recv.data(), d + w, sizeof(int64_t) * w, cudaMemcpyDeviceToHost, stream));
    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    return recv;
}

void nccl_comm::all_reduce_max(int32_t* data, size_t count, cudaStream_t stream) {
    nccl_check(ncclAllReduce(data, data, count, ncclInt32, ncclMax, comm_, stream), "all-reduce max");
}

std::vector<int32_t> nccl_comm::agree_max(const std::vector<int32_t>& values, cudaStream_t stream) {
    ZMOE_CHECK(values.size() <= kMaxAgree, "agree_max of " << values.size() << " values");
    int32_t* d = agree_.as<int32_t>();
    std::vector<int32_t> out(values.size());
    ZMOE_CUDA_CHECK(cudaMemcpyAsync(d, values.data(), values.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    all_reduce_max(d, values.size(), stream);
    ZMOE_CUDA_CHECK(cudaMemcpyAsync(out.data(), d, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    return out;
}

std::vector<std::string> nccl_comm::all_gather(const std::string& mine, cudaStream_t stream) {
    const size_t n = mine.size(), w = static_cast<size_t>(world_size_);
    device_buffer d(n * (w + 1));
    char* send = d.as<char>() + n * w;
    ZMOE_CUDA_CHECK(cudaMemcpyAsync(send, mine.data(), n, cudaMemcpyHostToDevice, stream));
    nccl_check(ncclAllGather(send, d.as<char>(), n, ncclChar, comm_, stream), "all-gather");
    std::string all(n * w, '\0');
    ZMOE_CUDA_CHECK(cudaMemcpyAsync(all.data(), d.as<char>(), n * w, cudaMemcpyDeviceToHost, stream));
    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<std::string> out;
    for (size_t r = 0; r < w; ++r) out.push_back(all.substr(r * n, n));
    return out;
}

void nccl_comm::all_to_all(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                           const std::vector<int64_t>& recv_bytes, cudaStream_t stream) {
    const auto* s = static_cast<const char*>(send);
    auto* r = static_cast<char*>(recv);
    nccl_check(ncclGroupStart(), "group start");
    for (int p = 0; p < world_size_; ++p) {
        // Both ends know a chunk's size, so empty chunks are skipped on both.
        if (send_bytes[p] > 0) nccl_check(ncclSend(s, send_bytes[p], ncclChar, p, comm_, stream), "send");
        if (recv_bytes[p] > 0) nccl_check(ncclRecv(r, recv_bytes[p], ncclChar, p, comm_, stream), "recv");
        s += send_bytes[p];
        r += recv_bytes[p];
    }
    nccl_check(ncclGroupEnd(), "group end");
}

void nccl_comm::exchange(const std::vector<transfer>& transfers, cudaStream_t stream) {
    nccl_check(ncclGroupStart(), "group start");
    for (const transfer& t : transfers) {
        if (t.bytes == 0) continue;
        if (t.send)
            nccl_check(ncclSend(t.data, t.bytes, ncclChar, t.peer, comm_, stream), "send");
        else
            nccl_check(ncclRecv(t.data, t.bytes, ncclChar, t.peer, comm_, stream), "recv");
    }
    nccl_check(ncclGroupEnd(), "group end");
}

}  // namespace zmoe::cuda
