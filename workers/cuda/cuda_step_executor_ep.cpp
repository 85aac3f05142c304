// cuda_step_executor's expert-parallel parts: the per-step agreement on how the MoE layers exchange, and the MoE
// layer over cuda_ep_exchange, as one batch or as two micro-batches (dual-batch overlap).

#include <algorithm>

#include "base/check.hpp"
#include "kernels/api.hpp"
#include "workers/cuda/cuda_step_executor.hpp"

namespace zmoe::cuda {
namespace {

using kernels::bf16;

/// The fixed window's default headroom over the even share of a step's rows.
constexpr double kDefaultCapacityFactor = 1.25;

int32_t i32_of(int64_t v) { return static_cast<int32_t>(v); }

}  // namespace

cuda_step_executor::ep_agreement cuda_step_executor::ep_agree(const step_shape& s, bool decode, bool dual,
                                                              int32_t split) {
    const int32_t T = s.num_tokens, A = dual ? std::min(split, T) : T;
    const std::vector<int32_t> m = comm_->agree_max({decode ? 0 : 1, dual ? 1 : 0, s.num_seqs, T, A, T - A}, stream_);
    return {.all_decode = m[0] == 0,
            .dual = m[1] != 0,
            .max_seqs = m[2],
            .max_tokens = m[3],
            .max_lane_tokens = {m[4], m[5]}};
}

cuda_step_executor::ep_step_mode cuda_step_executor::ep_graph_mode(int32_t batch, bool dual) const {
    const double f = options_.ep_capacity_factor > 0 ? options_.ep_capacity_factor : kDefaultCapacityFactor;
    ep_step_mode m{.dual = dual};
    if (!dual) {
        m.capacity[0] = ep_->capacity_for(batch, f);
    } else {
        // A decode splits by sequences, A taking the first half (rounded up) of the padded batch.
        m.split = (batch + 1) / 2;
        m.capacity[0] = ep_->capacity_for(m.split, f);
        m.capacity[1] = ep_->capacity_for(batch - m.split, f);
    }
    return m;
}

cuda_step_executor::ep_step_mode cuda_step_executor::ep_eager_mode(const ep_agreement& a, int32_t split) const {
    const double f = options_.ep_capacity_factor > 0 ? options_.ep_capacity_factor : kDefaultCapacityFactor;
    ep_step_mode m{.dual = a.dual, .split = split};
    if (!a.dual) {
        m.capacity[0] = ep_->capacity_for(a.max_tokens, f);
    } else {
        m.capacity[0] = ep_->capacity_for(a.max_lane_tokens[0], f);
        m.capacity[1] = ep_->capacity_for(a.max_lane_tokens[1], f);
        if (m.capacity[0] == 0 || m.capacity[1] == 0) m.capacity[0] = m.capacity[1] = 0;  // both exact
    }
    return m;
}

void cuda_step_executor::ep_experts(const cuda_layer& w, int lane) {
    // This rank's experts over every row it received, each with weight 1 (the routing weights are applied on the
    // token's own rank); the fixed path's unused rows carry slot num_slots, grouped past every expert.
    const ep_received r = ep_->received(lane, stream_);
    if (r.rows == 0) return;
    run_experts(w, r.slots, r.x, r.rows, 1, ws_.combine_ones.as<float>(), r.y, r.num_slots);
}

void cuda_step_executor::moe_expert_parallel(const cuda_layer& w, int32_t T) {
    const ep_step_mode& m = ep_mode_;
    const int32_t H = i32_of(config_.hidden_size), K = i32_of(config_.num_experts_per_tok);
    const int32_t split = m.dual ? std::min(m.split, T) : T;
    const int32_t first[2] = {0, split}, count[2] = {split, T - split};
    auto dispatch = [&](int mb, int lane, cudaStream_t comm) {
        ep_->dispatch({.slot_ids = ws_.slot_ids.as<int32_t>() + int64_t(first[mb]) * K,
                       .x = ws_.xn.as<bf16>() + int64_t(first[mb]) * H,
                       .num_tokens = count[mb],
                       .slots_per_rank = w.num_slots,
                       .capacity = m.capacity[mb],
                       .lane = lane},
                      stream_, comm);
    };
    auto combine_params = [&](int mb, int lane) {
        return ep_combine_params{.topk_weights = ws_.topk_weights.as<float>() + int64_t(first[mb]) * K,
                                 .out = ws_.delta.as<bf16>() + int64_t(first[mb]) * H,
                                 .num_tokens = count[mb],
                                 .lane = lane};
    };
    if (m.dual && m.fixed()) {
        // Dual-batch overlap: B's dispatch is in flight while A's experts compute, A's combine while B's do.
        dispatch(0, 0, comm_stream_);
        dispatch(1, 1, comm_stream_);
        ep_experts(w, 0);
        ep_->combine(combine_params(0, 0), stream_, comm_stream_);
        ep_experts(w, 1);
        ep_->combine(combine_params(1, 1), stream_, comm_stream_);
        ep_->finish_combine(combine_params(0, 0), stream_);
        ep_->finish_combine(combine_params(1, 1), stream_);
        return;
    }
    // One batch, or two micro-batches one after the other (the exact path plans each on the host).
    for (int mb = 0; mb < (m.dual ? 2 : 1); ++mb) {
        const int lane = m.fixed() ? mb : 0;
        dispatch(mb, lane, stream_);
        ep_experts(w, lane);
        ep_->combine(combine_params(mb, lane), stream_, stream_);
        ep_->finish_combine(combine_params(mb, lane), stream_);
    }
}

}  // namespace zmoe::cuda
