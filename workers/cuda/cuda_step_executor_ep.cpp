// cuda_step_executor's expert-parallel parts: the per-step agreement on how the MoE layers exchange, the MoE layer
// over cuda_ep_exchange as one batch, and dual-batch overlap: every layer as two micro-batches interleaved on the
// compute stream, each one's dispatch and combine on the communication stream while the other computes.

#include <algorithm>
#include <span>

#include "base/check.hpp"
#include "kernels/api.hpp"
#include "workers/cuda/cuda_step_executor.hpp"
#include "workers/micro_batch.hpp"

namespace zmoe::cuda {
namespace {

using kernels::bf16;

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
    const double f = options_.ep_capacity_factor;  // <= 0: the default window (workers/ep_capacity.hpp)
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
    const double f = options_.ep_capacity_factor;  // <= 0: the default window (workers/ep_capacity.hpp)
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

void cuda_step_executor::ep_experts(const cuda_layer& w, int lane, int32_t max_ctas) {
    // This rank's experts over every row it received, each with weight 1 (the routing weights are applied on the
    // token's own rank); the fixed path's unused rows carry slot num_slots, grouped past every expert.
    const ep_received r = ep_->received(lane, stream_);
    if (r.rows == 0) return;
    if (r.x_fp8 == nullptr) {
        run_experts(w, r.slots, r.x, r.rows, 1, ws_.combine_ones.as<float>(), r.y, r.num_slots, max_ctas);
        return;
    }
    // An FP8 dispatch (ep_exchange_params::fp8_dispatch): the rows arrive quantized by their token's rank, and the
    // FP8 experts read the records as their A operand instead of quantizing BF16 rows (the same bits).
    kernels::moe_experts_params p = expert_params(w, nullptr, r.rows, 1, r.y);
    ZMOE_CHECK(p.fp8 != nullptr, "FP8 dispatch records for layer experts that are not FP8");
    kernels::moe_fp8_experts f = *p.fp8;
    f.x_records = r.x_fp8;
    p.fp8 = &f;
    p.slots = r.slots;
    p.topk_weights = ws_.combine_ones.as<float>();
    p.permute_slots = r.num_slots;
    p.max_ctas = max_ctas;
    kernels::launch_moe_experts(p, stream_);
}

void cuda_step_executor::ep_dispatch(const cuda_layer& w, int mb, int32_t first, int32_t count, cudaStream_t comm) {
    const int64_t H = config_.hidden_size, K = config_.num_experts_per_tok;
    ep_->dispatch({.slot_ids = ws_.slot_ids.as<int32_t>() + first * K,
                   .x = ws_.xn.as<bf16>() + first * H,
                   .num_tokens = count,
                   .slots_per_rank = w.num_slots,
                   .capacity = ep_mode_.capacity[mb],
                   .lane = ep_mode_.fixed() ? mb : 0},
                  stream_, comm);
}

ep_combine_params cuda_step_executor::ep_combine_of(int mb, int32_t first, int32_t count) const {
    const int64_t H = config_.hidden_size, K = config_.num_experts_per_tok;
    return {.topk_weights = ws_.topk_weights.as<float>() + first * K,
            .out = ws_.delta.as<bf16>() + first * H,
            .num_tokens = count,
            .lane = ep_mode_.fixed() ? mb : 0};
}

int32_t cuda_step_executor::ep_overlap_gemm_ctas() {
    // By default none: on 2 x H200 keeping 8 or 16 SMs free cost the expert GEMMs more than the exchange gained
    // (docs/benchmarks.md); the exchange's blocks then start as the GEMM's last wave retires.
    if (options_.ep_comm_sms <= 0) return 0;
    if (dbo_gemm_ctas_ == 0) {
        int sms = 0;
        check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
        dbo_gemm_ctas_ = std::max(1, sms - options_.ep_comm_sms);
    }
    return dbo_gemm_ctas_;
}

void cuda_step_executor::moe_expert_parallel(const cuda_layer& w, int32_t T) {
    const ep_step_mode& m = ep_mode_;
    const int32_t split = m.dual ? std::min(m.split, T) : T;
    const int32_t first[2] = {0, split}, count[2] = {split, T - split};
    if (m.dual && m.fixed()) {
        // Dual-batch overlap within the MoE layer only (MLA models; the others interleave whole layers in
        // forward_dual_batch): B's dispatch is in flight while A's experts compute, A's combine while B's do.
        const int32_t ctas = ep_overlap_gemm_ctas();
        ep_dispatch(w, 0, first[0], count[0], comm_stream_);
        ep_dispatch(w, 1, first[1], count[1], comm_stream_);
        ep_experts(w, 0, ctas);
        ep_->combine(ep_combine_of(0, first[0], count[0]), stream_, comm_stream_);
        ep_experts(w, 1, ctas);
        ep_->combine(ep_combine_of(1, first[1], count[1]), stream_, comm_stream_);
        ep_->finish_combine(ep_combine_of(0, first[0], count[0]), stream_);
        ep_->finish_combine(ep_combine_of(1, first[1], count[1]), stream_);
        return;
    }
    // One batch, or two micro-batches one after the other (the exact path plans each on the host).
    for (int mb = 0; mb < (m.dual ? 2 : 1); ++mb) {
        const int lane = m.fixed() ? mb : 0;
        ep_dispatch(w, mb, first[mb], count[mb], stream_);
        ep_experts(w, lane);
        ep_->combine(ep_combine_of(mb, first[mb], count[mb]), stream_, stream_);
        ep_->finish_combine(ep_combine_of(mb, first[mb], count[mb]), stream_);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Dual-batch overlap over whole layers

bool cuda_step_executor::dual_batch_layers() const { return comm_ && ep_mode_.dual && ep_mode_.fixed() && !mla_; }

void cuda_step_executor::stage_dual_batch(const step_shape& s, int32_t split, int32_t num_valid) {
    // [num_valid A, B | query_start A | query_start B | start_pos A | start_pos B | work items A, then B]
    const size_t S = size_t(ws_.shape.max_seqs), W = 2 * (size_t(ws_.max_work_items) + 1);
    const size_t o_qs[2] = {2, 2 + (S + 1)}, o_sp[2] = {2 + 2 * (S + 1), 2 + 2 * (S + 1) + S};
    const size_t o_items = 2 + 2 * (S + 1) + 2 * S;
    if (dbo_side_.bytes() == 0) {
        dbo_side_ = device_buffer((o_items + 2 * W) * sizeof(int32_t));
        dbo_side_host_ = pinned_buffer(dbo_side_.bytes());
    }
    int32_t* h = dbo_side_host_.as<int32_t>();
    const int32_t* d = dbo_side_.as<int32_t>();
    const int32_t T = s.num_tokens, N = s.num_seqs;
    split = std::clamp(split, 0, T);
    const auto m = micro_batch_sequences(std::span<const int32_t>(ws_.query_start.host, size_t(N) + 1),
                                         std::span<const int32_t>(ws_.start_pos.host, size_t(N)), split);
    h[0] = std::clamp(num_valid, 0, split);
    h[1] = std::clamp(num_valid - split, 0, T - split);
    for (int mb = 0; mb < 2; ++mb) {
        std::copy(m[mb].query_start.begin(), m[mb].query_start.end(), h + o_qs[mb]);
        std::copy(m[mb].start_pos.begin(), m[mb].start_pos.end(), h + o_sp[mb]);
    }
    size_t end = o_items;
    for (int mb = 0; mb < 2; ++mb) {
        const std::vector<int32_t> items =
            kernels::paged_attention_plan(m[mb].query_start, i32_of(config_.num_heads), i32_of(config_.num_kv_heads),
                                          kernels::paged_attention_rows_per_item(i32_of(config_.head_dim)));
        ZMOE_CHECK(end + items.size() <= o_items + 2 * W, "micro-batch attention work items beyond their buffer");
        std::copy(items.begin(), items.end(), h + end);
        dbo_views_[mb] = {
            .first = mb == 0 ? 0 : split,
            .num_tokens = mb == 0 ? split : T - split,
            .num_seqs = m[mb].num_seqs(),
            .num_work_items = i32_of(int64_t(items.size()) / 2),
            .one_token_each = s.one_token_each,
            .query_start = d + o_qs[mb],
            .start_pos = d + o_sp[mb],
            .block_tables = ws_.block_tables.device + size_t(m[mb].first_seq) * ws_.shape.max_blocks_per_seq,
            .work_items = d + end,
            .num_valid = d + mb};
        end += items.size();
    }
    check(cudaMemcpyAsync(dbo_side_.as<void>(), h, end * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
}

void cuda_step_executor::forward_dual_batch() {
    // One compute stream: while it runs one micro-batch's work, the other's dispatch or combine is in flight on the
    // communication stream (higher priority; the persistent expert GEMMs leave it SMs).
    const int64_t H = config_.hidden_size;
    const int32_t ctas = ep_overlap_gemm_ctas();
    const cuda_layer* last_moe = nullptr;  // the previous layer, when its combines are in flight
    auto finish = [&](int mb) {
        const batch_view& v = dbo_views_[mb];
        ep_->finish_combine(ep_combine_of(mb, v.first, v.num_tokens), stream_);
        if (v.num_tokens > 0 && last_moe->has_shared) add_shared(*last_moe, v);
    };
    for (int64_t l = 0; l < config_.num_layers; ++l) {
        const cuda_layer& w = weights_.layers[l];
        for (int mb = 0; mb < 2; ++mb) {
            const batch_view& v = dbo_views_[mb];
            if (last_moe != nullptr) finish(mb);
            if (v.num_tokens > 0) layer_attention(l, v);
            if (w.moe_index >= 0) {
                if (v.num_tokens > 0) route(w, v);
                ep_dispatch(w, mb, v.first, v.num_tokens, comm_stream_);    // a collective: with no rows too
                if (v.num_tokens > 0 && w.has_shared) shared_expert(w, v);  // while the rows travel
            } else if (v.num_tokens > 0) {
                dense_mlp(w.dense, w.fp8.dense, ws_.xn.as<bf16>() + v.first * H, v.num_tokens,
                          ws_.delta.as<bf16>() + v.first * H, writable_rows(v));
            }
        }
        last_moe = w.moe_index >= 0 ? &w : nullptr;
        if (last_moe == nullptr) continue;
        for (int mb = 0; mb < 2; ++mb) {
            const batch_view& v = dbo_views_[mb];
            ep_experts(w, mb, ctas);
            ep_->combine(ep_combine_of(mb, v.first, v.num_tokens), stream_, comm_stream_);
        }
    }
    if (last_moe != nullptr)
        for (int mb = 0; mb < 2; ++mb) finish(mb);
}

}  // namespace zmoe::cuda
