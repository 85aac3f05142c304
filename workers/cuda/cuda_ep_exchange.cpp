#include "workers/cuda/cuda_ep_exchange.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.hpp"
#include "kernels/cuda_check.hpp"
#include "workers/ep_capacity.hpp"

namespace zmoe::cuda {
namespace {

using kernels::bf16;

/// What a rank tells the others about its window, so that each can map it.
struct window_record {
    cudaIpcMemHandle_t handle{};
    uint64_t address = 0;  ///< in its own process (peer access between threads of one process)
    int32_t ok = 0;        ///< the handle could be made
    int32_t pid = 0;
    int32_t device = 0;
    char host[64] = {};
};

std::vector<int64_t> bytes_of(const std::vector<int64_t>& rows, int64_t per_row) {
    std::vector<int64_t> b(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) b[i] = rows[i] * per_row;
    return b;
}

}  // namespace

cuda_ep_exchange::cuda_ep_exchange(const ep_exchange_params& p) : p_(p) {
    ZMOE_CHECK(p_.comm != nullptr && p_.ws != nullptr, "expert-parallel exchange without a communicator");
    world_ = p_.comm->world_size();
    max_capacity_ = std::max(p_.max_fixed_tokens, 0) * p_.top_k;
    const size_t rows = size_t(world_) * max_capacity_, H = size_t(p_.hidden), i32 = sizeof(int32_t);
    const size_t max_tk = size_t(std::max(p_.max_fixed_tokens, 0)) * p_.top_k;
    const size_t row_bytes = size_t(dispatch_row_bytes());
    // The FP8 records: whole 16-byte vectors of codes for the peer-to-peer copy, and no larger than a BF16 row (the
    // exact path's workspace buffers hold BF16 rows).
    ZMOE_CHECK(!p_.fp8_dispatch || (p_.hidden % 16 == 0 && row_bytes <= H * sizeof(bf16)),
               "FP8 dispatch needs hidden a multiple of 16, not " << p_.hidden);
    if (max_capacity_ > 0 && p_.peer_to_peer && world_ <= kernels::kMaxEpRanks && p_.hidden % 8 == 0)
        p2p_ = map_peer_windows();
    for (lane_buffers& l : lanes_) {
        if (max_capacity_ > 0) {
            l.send_token = device_buffer(rows * i32);
            l.send_slot = device_buffer(rows * i32);
            l.src_row = device_buffer(max_tk * i32);
            l.send_counts = device_buffer(size_t(world_) * i32);
            l.y_recv = device_buffer(rows * H * sizeof(bf16));
            if (!p2p_) {  // peer to peer, the window holds them
                l.send_x = device_buffer(rows * row_bytes);
                l.recv_x = device_buffer(rows * row_bytes);
                l.recv_slot = device_buffer(rows * i32);
                l.y_back = device_buffer(rows * H * sizeof(bf16));
            }
        }
        for (cudaEvent_t* e : {&l.gathered, &l.dispatched, &l.computed, &l.combined})
            ZMOE_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
    overflow_ = device_buffer(sizeof(int32_t));
    ZMOE_CUDA_CHECK(cudaMemset(overflow_.as<void>(), 0, sizeof(int32_t)));
    ZMOE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&overflow_host_), sizeof(int32_t)));
    *overflow_host_ = 0;
}

cuda_ep_exchange::~cuda_ep_exchange() {
    for (lane_buffers& l : lanes_)
        for (cudaEvent_t e : {l.gathered, l.dispatched, l.computed, l.combined})
            if (e) cudaEventDestroy(e);
    if (overflow_host_) cudaFreeHost(overflow_host_);
    for (void* m : ipc_mapped_) cudaIpcCloseMemHandle(m);
}

bool cuda_ep_exchange::map_peer_windows() {
    layout_ = kernels::ep_p2p_layout(world_, max_capacity_, p_.hidden, p_.fp8_dispatch);
    window_ = device_buffer(2 * layout_.bytes);
    p2p_state_ = device_buffer(2 * 4 * sizeof(uint32_t));
    // Zeroed flags and counters before any peer can see the window (the all-gather below orders it).
    ZMOE_CUDA_CHECK(cudaMemset(window_.as<void>(), 0, window_.bytes()));
    ZMOE_CUDA_CHECK(cudaMemset(p2p_state_.as<void>(), 0, p2p_state_.bytes()));
    ZMOE_CUDA_CHECK(cudaDeviceSynchronize());
    window_record mine;
    mine.ok = cudaIpcGetMemHandle(&mine.handle, window_.as<void>()) == cudaSuccess ? 1 : 0;
    (void)cudaGetLastError();
    mine.address = reinterpret_cast<uint64_t>(window_.as<void>());
    mine.pid = static_cast<int32_t>(getpid());
    ZMOE_CUDA_CHECK(cudaGetDevice(&mine.device));
    gethostname(mine.host, sizeof mine.host - 1);
    const std::vector<std::string> all =
        p_.comm->all_gather(std::string(reinterpret_cast<const char*>(&mine), sizeof mine), nullptr);
    peer_windows_.assign(size_t(world_), nullptr);
    int32_t failed = 0;
    for (int r = 0; r < world_ && !failed; ++r) {
        window_record w;
        std::memcpy(&w, all[size_t(r)].data(), sizeof w);
        if (r == p_.comm->rank()) {
            peer_windows_[size_t(r)] = window_.as<char>();
        } else if (!w.ok || std::strncmp(w.host, mine.host, sizeof w.host) != 0) {
            failed = 1;  // another host: NCCL
        } else if (w.pid == mine.pid) {
            // Another thread of this process drives that GPU: peer access to its own address.
            int can = 0;
            ZMOE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, mine.device, w.device));
            const cudaError_t e = can ? cudaDeviceEnablePeerAccess(w.device, 0) : cudaErrorPeerAccessUnsupported;
            (void)cudaGetLastError();
            if (e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled)
                peer_windows_[size_t(r)] = reinterpret_cast<char*>(w.address);
            else
                failed = 1;
        } else {
            void* mapped = nullptr;
            if (cudaIpcOpenMemHandle(&mapped, w.handle, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess) {
                ipc_mapped_.push_back(mapped);
                peer_windows_[size_t(r)] = static_cast<char*>(mapped);
            } else {
                (void)cudaGetLastError();
                failed = 1;
            }
        }
    }
    if (p_.comm->agree_max({failed}, nullptr)[0] == 0) return true;
    for (void* m : ipc_mapped_) cudaIpcCloseMemHandle(m);
    ipc_mapped_.clear();
    peer_windows_.clear();
    window_ = device_buffer();
    return false;
}

kernels::ep_p2p_params cuda_ep_exchange::p2p_params(int lane, int32_t capacity, int32_t slots_per_rank,
                                                    bool combine) const {
    kernels::ep_p2p_params k{.layout = layout_,
                             .rank = p_.comm->rank(),
                             .num_ranks = world_,
                             .capacity = capacity,
                             .slots_per_rank = slots_per_rank,
                             .hidden = p_.hidden,
                             .blocks = p_.p2p_blocks,
                             .epoch = p2p_state_.as<uint32_t>() + 4 * lane,
                             .done = p2p_state_.as<uint32_t>() + 4 * lane + (combine ? 2 : 1),
                             .fp8 = p_.fp8_dispatch};
    for (int r = 0; r < world_; ++r) k.windows[r] = peer_windows_[size_t(r)] + lane * layout_.bytes;
    return k;
}

int32_t cuda_ep_exchange::capacity_for(int32_t max_tokens, double factor) const {
    if (max_tokens > p_.max_fixed_tokens) return 0;
    return ep_window_capacity(max_tokens, p_.top_k, world_, factor, max_capacity_);
}

void cuda_ep_exchange::begin_step(cudaStream_t stream) {
    ZMOE_CUDA_CHECK(cudaMemsetAsync(overflow_.as<void>(), 0, sizeof(int32_t), stream));
}

void cuda_ep_exchange::end_step(cudaStream_t stream) {
    p_.comm->all_reduce_max(overflow_.as<int32_t>(), 1, stream);
    ZMOE_CUDA_CHECK(
        cudaMemcpyAsync(overflow_host_, overflow_.as<void>(), sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
}

bool cuda_ep_exchange::overflowed() const { return *overflow_host_ != 0; }

void cuda_ep_exchange::transfer(const void* send, void* recv, int64_t chunk_bytes, cudaStream_t stream) {
    const std::vector<int64_t> bytes(world_, chunk_bytes);
    p_.comm->all_to_all(send, bytes, recv, bytes, stream);
}

void cuda_ep_exchange::dispatch(const ep_dispatch_params& p, cudaStream_t compute, cudaStream_t comm) {
    ZMOE_CHECK(p.lane == 0 || p.lane == 1, "lane " << p.lane);
    lane_buffers& l = lanes_[p.lane];
    l.capacity = p.capacity;
    l.slots_per_rank = p.slots_per_rank;
    l.two_streams = comm != compute;
    if (p.capacity == 0) {
        ZMOE_CHECK(p.lane == 0, "the exact path has one lane");
        dispatch_exact(p, compute);
        return;
    }
    ZMOE_CHECK(p.capacity <= max_capacity_, "capacity " << p.capacity << " over " << max_capacity_);
    ZMOE_CHECK(p.num_tokens <= p_.max_fixed_tokens, p.num_tokens << " tokens on the fixed path");
    const int32_t C = p.capacity;
    kernels::launch_ep_dispatch_plan({.slot_ids = p.slot_ids,
                                      .send_token = l.send_token.as<int32_t>(),
                                      .send_slot = l.send_slot.as<int32_t>(),
                                      .src_row = l.src_row.as<int32_t>(),
                                      .send_counts = l.send_counts.as<int32_t>(),
                                      .overflow = overflow_.as<int32_t>(),
                                      .num_tokens = p.num_tokens,
                                      .top_k = p_.top_k,
                                      .num_ranks = world_,
                                      .slots_per_rank = p.slots_per_rank,
                                      .capacity = C},
                                     compute);
    if (p2p_) {
        // The plan's rows go straight from x into the receivers' windows.
        if (comm != compute) {
            ZMOE_CUDA_CHECK(cudaEventRecord(l.gathered, compute));
            ZMOE_CUDA_CHECK(cudaStreamWaitEvent(comm, l.gathered, 0));
        }
        const kernels::ep_p2p_params k = p2p_params(p.lane, C, p.slots_per_rank, false);
        kernels::launch_ep_p2p_dispatch(k, p.x, l.send_token.as<int32_t>(), l.send_slot.as<int32_t>(), comm);
        kernels::launch_ep_p2p_wait(k, false, comm);
        if (comm != compute) ZMOE_CUDA_CHECK(cudaEventRecord(l.dispatched, comm));
        return;
    }
    gather_rows(p.x, l.send_token.as<int32_t>(), l.send_x.as<void>(), world_ * C, l.send_slot.as<int32_t>(),
                p.slots_per_rank, compute);
    if (comm != compute) {
        ZMOE_CUDA_CHECK(cudaEventRecord(l.gathered, compute));
        ZMOE_CUDA_CHECK(cudaStreamWaitEvent(comm, l.gathered, 0));
    }
    // The rows and their slots, fixed sizes, in one NCCL group.
    const size_t x_bytes = size_t(C) * size_t(dispatch_row_bytes()), slot_bytes = size_t(C) * sizeof(int32_t);
    std::vector<nccl_comm::transfer> t;
    for (int peer = 0; peer < world_; ++peer) {
        // Per peer, both ends list: rows, then slots (sends and receives match in that order).
        t.push_back({.peer = peer, .data = l.send_x.as<char>() + peer * x_bytes, .bytes = x_bytes, .send = true});
        t.push_back({.peer = peer, .data = l.recv_x.as<char>() + peer * x_bytes, .bytes = x_bytes, .send = false});
        t.push_back(
            {.peer = peer, .data = l.send_slot.as<char>() + peer * slot_bytes, .bytes = slot_bytes, .send = true});
        t.push_back(
            {.peer = peer, .data = l.recv_slot.as<char>() + peer * slot_bytes, .bytes = slot_bytes, .send = false});
    }
    p_.comm->exchange(t, comm);
    if (comm != compute) ZMOE_CUDA_CHECK(cudaEventRecord(l.dispatched, comm));
}

ep_received cuda_ep_exchange::received(int lane, cudaStream_t compute) {
    lane_buffers& l = lanes_[lane];
    cuda_workspace& ws = *p_.ws;
    const bool fp8 = p_.fp8_dispatch;
    if (l.capacity == 0) {
        int64_t R = 0;
        for (int64_t n : recv_rows_) R += n;
        return {.x = fp8 ? nullptr : ws.recv_x.as<bf16>(),
                .x_fp8 = fp8 ? ws.recv_x.as<uint8_t>() : nullptr,
                .slots = ws.recv_slot.as<int32_t>(),
                .rows = static_cast<int32_t>(R),
                .num_slots = l.slots_per_rank,
                .y = ws.y_recv.as<bf16>()};
    }
    if (l.two_streams) ZMOE_CUDA_CHECK(cudaStreamWaitEvent(compute, l.dispatched, 0));
    const char* rows = p2p_ ? own_window(lane) + layout_.recv_x : l.recv_x.as<char>();
    const char* w = p2p_ ? own_window(lane) : nullptr;
    return {.x = fp8 ? nullptr : reinterpret_cast<const bf16*>(rows),
            .x_fp8 = fp8 ? reinterpret_cast<const uint8_t*>(rows) : nullptr,
            .slots = p2p_ ? reinterpret_cast<const int32_t*>(w + layout_.recv_slot) : l.recv_slot.as<int32_t>(),
            .rows = world_ * l.capacity,
            .num_slots = l.slots_per_rank + 1,
            .y = l.y_recv.as<bf16>()};
}

void cuda_ep_exchange::combine(const ep_combine_params& p, cudaStream_t compute, cudaStream_t comm) {
    lane_buffers& l = lanes_[p.lane];
    const int64_t row_bytes = int64_t(p_.hidden) * sizeof(bf16);
    if (l.capacity == 0) {
        cuda_workspace& ws = *p_.ws;
        p_.comm->all_to_all(ws.y_recv.as<void>(), bytes_of(recv_rows_, row_bytes), ws.y_back.as<void>(),
                            bytes_of(send_rows_, row_bytes), compute);
        return;
    }
    if (comm != compute) {
        ZMOE_CUDA_CHECK(cudaEventRecord(l.computed, compute));
        ZMOE_CUDA_CHECK(cudaStreamWaitEvent(comm, l.computed, 0));
    }
    if (p2p_) {
        const kernels::ep_p2p_params k = p2p_params(p.lane, l.capacity, l.slots_per_rank, true);
        kernels::launch_ep_p2p_combine(k, l.y_recv.as<bf16>(), comm);
        kernels::launch_ep_p2p_wait(k, true, comm);
    } else {
        transfer(l.y_recv.as<void>(), l.y_back.as<void>(), int64_t(l.capacity) * row_bytes, comm);
    }
    if (comm != compute) ZMOE_CUDA_CHECK(cudaEventRecord(l.combined, comm));
}

void cuda_ep_exchange::finish_combine(const ep_combine_params& p, cudaStream_t compute) {
    lane_buffers& l = lanes_[p.lane];
    const bool exact = l.capacity == 0;
    if (!exact && l.two_streams) ZMOE_CUDA_CHECK(cudaStreamWaitEvent(compute, l.combined, 0));
    if (p.num_tokens == 0) return;
    const int64_t TK = int64_t(p.num_tokens) * p_.top_k;
    const bf16* y = exact  ? p_.ws->y_back.as<bf16>()
                    : p2p_ ? reinterpret_cast<const bf16*>(own_window(p.lane) + layout_.y_back)
                           : l.y_back.as<bf16>();
    kernels::launch_moe_combine({.y = y,
                                 .dest_rows = exact ? p_.ws->moe_plan.as<int32_t>() + 2 * TK : l.src_row.as<int32_t>(),
                                 .topk_weights = p.topk_weights,
                                 .out = p.out,
                                 .num_tokens = p.num_tokens,
                                 .top_k = p_.top_k,
                                 .hidden = p_.hidden},
                                compute);
}

void cuda_ep_exchange::gather_rows(const bf16* x, const int32_t* rows, void* out, int32_t num_rows,
                                   const int32_t* slots, int32_t skip_slot, cudaStream_t stream) const {
    if (p_.fp8_dispatch) {
        kernels::launch_ep_fp8_pack({.x = x,
                                     .rows = rows,
                                     .slots = slots,
                                     .records = static_cast<uint8_t*>(out),
                                     .num_records = num_rows,
                                     .hidden = p_.hidden,
                                     .skip_slot = skip_slot},
                                    stream);
        return;
    }
    kernels::launch_gather_rows(
        {.in = x, .rows = rows, .out = static_cast<bf16*>(out), .num_rows = num_rows, .hidden = p_.hidden}, stream);
}

void cuda_ep_exchange::dispatch_exact(const ep_dispatch_params& p, cudaStream_t stream) {
    // Plan on the host from the slots launch_moe_route chose. plan = [token of each sent row | its slot on the
    // destination rank | for each (token, k) the sent row holding it]; rows are grouped by destination rank, in
    // (token, k) order.
    cuda_workspace& ws = *p_.ws;
    const int32_t K = p_.top_k, S = p.slots_per_rank;
    const int64_t TK = int64_t(p.num_tokens) * K;
    send_rows_.assign(world_, 0);
    std::vector<int32_t> plan(3 * TK);
    if (TK > 0) {
        std::vector<int32_t> slot_h(TK);
        ZMOE_CUDA_CHECK(
            cudaMemcpyAsync(slot_h.data(), p.slot_ids, TK * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
        ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
        for (int64_t i = 0; i < TK; ++i) {
            ZMOE_CHECK(slot_h[i] >= 0 && slot_h[i] < S * world_, "routed to slot " << slot_h[i]);
            ++send_rows_[slot_h[i] / S];
        }
        std::vector<int64_t> next(world_, 0);
        for (int r = 1; r < world_; ++r) next[r] = next[r - 1] + send_rows_[r - 1];
        for (int64_t i = 0; i < TK; ++i) {
            const int64_t pos = next[slot_h[i] / S]++;
            plan[pos] = static_cast<int32_t>(i / K);
            plan[TK + pos] = slot_h[i] % S;
            plan[2 * TK + i] = static_cast<int32_t>(pos);
        }
    }
    int32_t* plan_d = ws.moe_plan.as<int32_t>();
    if (TK > 0)
        ZMOE_CUDA_CHECK(
            cudaMemcpyAsync(plan_d, plan.data(), plan.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    void* send_x = ws.send_x.as<void>();
    gather_rows(p.x, plan_d, send_x, static_cast<int32_t>(TK), nullptr, 0, stream);

    // Every rank takes part, with zero rows too.
    recv_rows_ = p_.comm->exchange_counts(send_rows_, stream);
    int64_t R = 0;
    for (int64_t n : recv_rows_) R += n;
    ZMOE_CHECK(R <= ws.max_recv_rows, "received " << R << " rows, the workspace holds " << ws.max_recv_rows);
    const int64_t row_bytes = dispatch_row_bytes();
    p_.comm->all_to_all(send_x, bytes_of(send_rows_, row_bytes), ws.recv_x.as<void>(), bytes_of(recv_rows_, row_bytes),
                        stream);
    p_.comm->all_to_all(plan_d + TK, bytes_of(send_rows_, sizeof(int32_t)), ws.recv_slot.as<int32_t>(),
                        bytes_of(recv_rows_, sizeof(int32_t)), stream);
}

}  // namespace zmoe::cuda
