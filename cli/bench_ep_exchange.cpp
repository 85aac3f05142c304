#include "cli/bench_ep_exchange.hpp"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

#include "base/error.hpp"
#include "base/stats.hpp"
#include "kernels/cuda_check.hpp"
#include "workers/cuda/cuda_ep_exchange.hpp"

namespace zmoe {
namespace {

using cuda::cuda_ep_exchange;
using kernels::bf16;

/// Times `enqueue` on `stream`: the median of `n` runs, each between two events, in µs.
template <typename F>
double time_us(cudaStream_t stream, int n, F&& enqueue) {
    cudaEvent_t a = nullptr, b = nullptr;
    ZMOE_CUDA_CHECK(cudaEventCreate(&a));
    ZMOE_CUDA_CHECK(cudaEventCreate(&b));
    std::vector<double> us;
    for (int i = 0; i < n; ++i) {
        ZMOE_CUDA_CHECK(cudaEventRecord(a, stream));
        enqueue();
        ZMOE_CUDA_CHECK(cudaEventRecord(b, stream));
        ZMOE_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        ZMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        us.push_back(1e3 * ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return median(us);
}

ep_exchange_timing run_rank(const ep_exchange_timing_params& p, const std::string& id, int rank) {
    ZMOE_CUDA_CHECK(cudaSetDevice(rank));
    cudaStream_t stream = nullptr;
    ZMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cuda::nccl_comm comm(id, rank, p.world);
    const int32_t T = p.tokens, K = p.top_k, H = p.hidden, S = p.num_experts / p.world;
    // The exact path's buffers live in a workspace; only its expert-parallel part matters here.
    cuda::cuda_workspace ws(cuda::workspace_shape{.max_tokens = T,
                                                  .max_seqs = T,
                                                  .max_blocks_per_seq = 1,
                                                  .hidden = H,
                                                  .num_q_heads = 1,
                                                  .num_kv_heads = 1,
                                                  .head_dim = 16,
                                                  .vocab_size = 16,
                                                  .num_experts = p.num_experts,
                                                  .top_k = K,
                                                  .num_slots = S,
                                                  .moe_inter = 8,
                                                  .dense_inter = 0,
                                                  .num_moe_layers = 1,
                                                  .world_size = p.world});
    // Each token picks top_k distinct experts uniformly; expert e lives on rank e / S as slot e % S (the initial
    // placement), so its global slot is e.
    std::mt19937 rng(1234 + rank);
    std::vector<int32_t> slots(size_t(T) * K), experts(p.num_experts);
    for (int32_t t = 0; t < T; ++t) {
        for (int32_t e = 0; e < p.num_experts; ++e) experts[e] = e;
        std::shuffle(experts.begin(), experts.end(), rng);
        std::copy_n(experts.begin(), K, slots.begin() + int64_t(t) * K);
    }
    cuda::device_buffer slot_d(slots.size() * sizeof(int32_t)), x(size_t(T) * H * sizeof(bf16)),
        out(size_t(T) * H * sizeof(bf16)), weights(size_t(T) * K * sizeof(float));
    ZMOE_CUDA_CHECK(cudaMemcpy(slot_d.as<void>(), slots.data(), slots.size() * 4, cudaMemcpyHostToDevice));
    {
        // Finite BF16 values of mixed magnitudes (the FP8 dispatch quantizes real data; the copies do not care).
        std::vector<uint16_t> bits(size_t(T) * H);
        for (uint16_t& b : bits) b = static_cast<uint16_t>((rng() & 0x80ffu) | 0x3c00u);  // |v| in [2^-7, 2^-5)
        ZMOE_CUDA_CHECK(cudaMemcpy(x.as<void>(), bits.data(), x.bytes(), cudaMemcpyHostToDevice));
    }
    ZMOE_CUDA_CHECK(cudaMemset(weights.as<void>(), 0, weights.bytes()));

    ep_exchange_timing r{.rank = rank, .fp8_dispatch = p.fp8_dispatch};
    const cuda::ep_combine_params cp{
        .topk_weights = weights.as<float>(), .out = out.as<bf16>(), .num_tokens = T, .lane = 0};
    const int warm = 5;
    auto dispatch = [&](cuda_ep_exchange& ex, int32_t capacity) {
        ex.dispatch({.slot_ids = slot_d.as<int32_t>(),
                     .x = x.as<bf16>(),
                     .num_tokens = T,
                     .slots_per_rank = S,
                     .capacity = capacity,
                     .lane = 0},
                    stream, stream);
        (void)ex.received(0, stream);
    };
    auto combine = [&](cuda_ep_exchange& ex) {
        ex.combine(cp, stream, stream);
        ex.finish_combine(cp, stream);
    };
    // The fixed path of one transport: each half eagerly (events before, between and after each pair: a combine
    // follows its dispatch, and peer to peer a dispatch waits for the last combine), then both replayed as a graph.
    auto time_fixed = [&](cuda_ep_exchange& ex, double& dispatch_us, double& combine_us, double& graph_us) {
        const int32_t capacity = ex.capacity_for(T, p.capacity_factor);
        r.capacity = capacity;
        ex.begin_step(stream);
        for (int i = 0; i < warm; ++i) {
            dispatch(ex, capacity);
            combine(ex);
        }
        cudaEvent_t a = nullptr, b = nullptr, c = nullptr;
        for (cudaEvent_t* e : {&a, &b, &c}) ZMOE_CUDA_CHECK(cudaEventCreate(e));
        std::vector<double> d_us, c_us;
        for (int i = 0; i < p.iterations; ++i) {
            ZMOE_CUDA_CHECK(cudaEventRecord(a, stream));
            dispatch(ex, capacity);
            ZMOE_CUDA_CHECK(cudaEventRecord(b, stream));
            combine(ex);
            ZMOE_CUDA_CHECK(cudaEventRecord(c, stream));
            ZMOE_CUDA_CHECK(cudaEventSynchronize(c));
            float ab = 0, bc = 0;
            ZMOE_CUDA_CHECK(cudaEventElapsedTime(&ab, a, b));
            ZMOE_CUDA_CHECK(cudaEventElapsedTime(&bc, b, c));
            d_us.push_back(1e3 * ab);
            c_us.push_back(1e3 * bc);
        }
        for (cudaEvent_t e : {a, b, c}) cudaEventDestroy(e);
        dispatch_us = median(d_us);
        combine_us = median(c_us);
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        ZMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        dispatch(ex, capacity);
        combine(ex);
        ZMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        ZMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        for (int i = 0; i < warm; ++i) ZMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        graph_us = time_us(stream, p.iterations, [&] { ZMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    };
    const cuda::ep_exchange_params base{
        .comm = &comm, .ws = &ws, .hidden = H, .top_k = K, .max_fixed_tokens = T, .fp8_dispatch = p.fp8_dispatch};
    {
        cuda::ep_exchange_params q = base;
        q.peer_to_peer = true;
        cuda_ep_exchange ex(q);
        r.p2p_available = ex.peer_to_peer();
        if (r.p2p_available) time_fixed(ex, r.p2p_dispatch_us, r.p2p_combine_us, r.p2p_graph_us);
    }
    cuda::ep_exchange_params q = base;
    q.peer_to_peer = false;
    cuda_ep_exchange ex(q);
    time_fixed(ex, r.fixed_dispatch_us, r.fixed_combine_us, r.fixed_graph_us);
    // Exact path (host plan).
    for (int i = 0; i < warm; ++i) {
        dispatch(ex, 0);
        combine(ex);
    }
    r.exact_dispatch_us = time_us(stream, p.iterations, [&] { dispatch(ex, 0); });
    r.exact_combine_us = std::max(0.0, time_us(stream, p.iterations, [&] {
                                           dispatch(ex, 0);
                                           combine(ex);
                                       }) - r.exact_dispatch_us);
    int64_t remote_rows = 0;
    for (int32_t s : slots) remote_rows += s / S != rank ? 1 : 0;
    const int64_t row_bytes = ex.dispatch_row_bytes();
    r.exact_send_bytes = remote_rows * row_bytes;
    r.exact_combine_bytes = remote_rows * H * int64_t(sizeof(bf16));
    r.fixed_send_bytes = int64_t(p.world - 1) * r.capacity * row_bytes;
    // Floor: the copy engine moving this rank's remote rows to their ranks and the outputs back (an even share
    // per peer), with no plan, no kernel and no synchronisation.
    {
        const size_t per_peer_out = size_t(r.exact_send_bytes / std::max(1, p.world - 1));
        const size_t per_peer_back = size_t(r.exact_combine_bytes / std::max(1, p.world - 1));
        cuda::device_buffer here(std::max(per_peer_out, per_peer_back));
        std::vector<cuda::device_buffer> there;
        for (int peer = 0; peer < p.world; ++peer) {
            ZMOE_CUDA_CHECK(cudaSetDevice(peer));
            there.emplace_back(peer == rank ? 0 : std::max(per_peer_out, per_peer_back));
        }
        ZMOE_CUDA_CHECK(cudaSetDevice(rank));
        auto copies = [&] {
            for (int peer = 0; peer < p.world; ++peer)
                if (peer != rank) {
                    ZMOE_CUDA_CHECK(cudaMemcpyPeerAsync(there[size_t(peer)].as<void>(), peer, here.as<void>(), rank,
                                                        per_peer_out, stream));
                    ZMOE_CUDA_CHECK(cudaMemcpyPeerAsync(here.as<void>(), rank, there[size_t(peer)].as<void>(), peer,
                                                        per_peer_back, stream));
                }
        };
        for (int i = 0; i < warm; ++i) copies();
        r.peer_copy_floor_us = time_us(stream, p.iterations, copies);
        ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaStreamDestroy(stream);
    return r;
}

}  // namespace

std::vector<ep_exchange_timing> measure_ep_exchange(const ep_exchange_timing_params& p) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < p.world)
        throw error(errc::unsupported, "measure_ep_exchange: " + std::to_string(p.world) + " GPUs needed, " +
                                           std::to_string(n) + " visible");
    if (p.world < 2 || p.num_experts % p.world != 0)
        throw error(errc::invalid_argument, "measure_ep_exchange: world >= 2 dividing num_experts");
    const std::string id = cuda::nccl_unique_id_bytes();
    std::vector<ep_exchange_timing> out(p.world);
    std::vector<std::string> errors(p.world);
    std::vector<std::thread> threads;
    for (int r = 0; r < p.world; ++r)
        threads.emplace_back([&, r] {
            try {
                out[r] = run_rank(p, id, r);
            } catch (const std::exception& e) {
                errors[r] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < p.world; ++r)
        if (!errors[r].empty()) throw error(errc::internal, "rank " + std::to_string(r) + ": " + errors[r]);
    return out;
}

}  // namespace zmoe
