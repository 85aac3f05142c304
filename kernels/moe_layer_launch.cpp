// The launch sequence of an MoE layer's routed experts, shared by the CUDA executor and
// bench/kernels/moe_layer_bench so that the bench times exactly what a step runs.

#include <algorithm>
#include <cstdint>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::kernels {
namespace {

void mark(moe_stage_mark fn, void* context, moe_stage stage) {
    if (fn != nullptr) fn(context, stage);
}

int32_t resolve_align(int32_t row_align, int32_t num_tokens, int32_t top_k, int32_t permute_slots) {
    return row_align > 0 ? row_align : moe_row_align_for(num_tokens, top_k, permute_slots);
}

}  // namespace

int32_t moe_experts_rows(int32_t num_tokens, int32_t top_k, int32_t permute_slots, int32_t row_align) {
    return moe_permuted_rows_bound(num_tokens, top_k, permute_slots,
                                   resolve_align(row_align, num_tokens, top_k, permute_slots));
}

void launch_moe_experts(const moe_experts_params& p, cudaStream_t stream) {
    const int32_t P = p.permute_slots > 0 ? p.permute_slots : p.num_slots;
    ZMOE_KERNEL_REQUIRE(P >= p.num_slots, "moe_experts: permute_slots < num_slots");
    if (p.num_tokens == 0) {
        mark(p.mark, p.mark_context, moe_stage::end);
        return;
    }
    const int32_t align = resolve_align(p.row_align, p.num_tokens, p.top_k, P);
    const int32_t max_rows = moe_permuted_rows_bound(p.num_tokens, p.top_k, P, align);
    ZMOE_KERNEL_REQUIRE(max_rows <= p.max_rows, "moe_experts: the permuted-row scratch is too small for the batch");
    const bool gather = p.x_permuted != nullptr;
    mark(p.mark, p.mark_context, moe_stage::permute);
    launch_moe_permute({.topk_ids = p.slots,
                        .x = gather ? p.x : nullptr,  // nullptr: plan only
                        .expert_offsets = p.expert_offsets,
                        .dest_rows = p.dest_rows,
                        .row_token = p.row_token,
                        .x_permuted = p.x_permuted,
                        .workspace = p.permute_workspace,
                        .num_tokens = p.num_tokens,
                        .top_k = p.top_k,
                        .num_experts = P,
                        .hidden = p.hidden,
                        .row_align = align,
                        .max_rows = max_rows},
                       stream);
    // gate|up with SiLU * up reads x through row_token (or the gathered copy), then down.
    mark(p.mark, p.mark_context, moe_stage::gemm_gate_up);
    grouped_gemm_params gemm{.a = gather ? p.x_permuted : p.x,
                             .a_rows = gather ? nullptr : p.row_token,
                             .b = p.w_gate_up,
                             .expert_offsets = p.expert_offsets,
                             .c = p.act,
                             .max_rows = max_rows,
                             .n = p.inter,
                             .k = p.hidden,
                             .num_experts = p.num_slots,
                             .row_align = align,
                             .swiglu = true,
                             .impl = p.impl,
                             .max_ctas = p.max_ctas};
    launch_grouped_gemm(gemm, stream);
    mark(p.mark, p.mark_context, moe_stage::gemm_down);
    gemm.a = p.act;
    gemm.a_rows = nullptr;
    gemm.b = p.w_down;
    gemm.c = p.y;
    gemm.n = p.hidden;
    gemm.k = p.inter;
    gemm.swiglu = false;
    launch_grouped_gemm(gemm, stream);
    mark(p.mark, p.mark_context, moe_stage::combine);
    launch_moe_combine({.y = p.y,
                        .dest_rows = p.dest_rows,
                        .topk_weights = p.topk_weights,
                        .out = p.out,
                        .num_tokens = p.num_tokens,
                        .top_k = p.top_k,
                        .hidden = p.hidden},
                       stream);
    mark(p.mark, p.mark_context, moe_stage::end);
}

bool moe_layer_uses_decode_path(const moe_layer_params& p) {
    const moe_experts_params& e = p.experts;
    if (p.path == moe_path::automatic)
        return moe_use_decode_path(e.num_tokens, e.top_k, p.num_experts, e.hidden, e.inter);
    return p.path == moe_path::decode && moe_decode_supported(e.num_tokens, e.top_k, p.num_experts, e.hidden, e.inter);
}

void launch_moe_layer(const moe_layer_params& p, cudaStream_t stream) {
    moe_experts_params e = p.experts;
    if (e.num_tokens == 0) {
        mark(e.mark, e.mark_context, moe_stage::end);
        return;
    }
    const bool decode = moe_layer_uses_decode_path(p);
    // The router: its logits only for the decode path that does not compute them itself; on the grouped path with the
    // softmax top-k and the replica choice fused in.
    if (!decode || !p.fuse_router)
        launch_moe_router({.x = e.x,
                           .router_w = p.router_w,
                           .router_logits = p.router_logits,
                           .blas = p.blas,
                           .blas_workspace = p.blas_workspace,
                           .blas_workspace_bytes = p.blas_workspace_bytes,
                           .topk_ids = p.topk_ids,
                           .topk_weights = decode ? nullptr : p.topk_weights,
                           .replica_offsets = p.replica_offsets,
                           .replica_slots = p.replica_slots,
                           .num_valid = p.num_valid,
                           .slot_ids = p.slot_ids,
                           .load_counts = p.expert_counts,
                           .num_tokens = e.num_tokens,
                           .num_experts = p.num_experts,
                           .hidden = e.hidden,
                           .top_k = e.top_k,
                           .renormalize = p.renormalize,
                           .mark = e.mark,
                           .mark_context = e.mark_context},
                          stream);
    if (decode) {
        // The router GEMV (unless computed above), routing, gate|up, down and the weighted sum in one launch.
        mark(e.mark, e.mark_context, moe_stage::moe_decode);
        launch_moe_decode({.router_w = p.fuse_router ? p.router_w : nullptr,
                           .router_logits = p.router_logits,
                           .replica_offsets = p.replica_offsets,
                           .replica_slots = p.replica_slots,
                           .num_valid = p.num_valid,
                           .x = e.x,
                           .w_gate_up = e.w_gate_up,
                           .w_down = e.w_down,
                           .topk_weights = p.topk_weights,
                           .slot_ids = p.slot_ids,
                           .scratch = p.decode_scratch,
                           .act = e.act,
                           .expert_counts = p.expert_counts,
                           .out = e.out,
                           .num_tokens = e.num_tokens,
                           .top_k = e.top_k,
                           .num_experts = p.num_experts,
                           .hidden = e.hidden,
                           .inter = e.inter,
                           .renormalize = p.renormalize},
                          stream);
        mark(e.mark, e.mark_context, moe_stage::end);
        return;
    }
    // The experts over the chosen slots.
    e.slots = p.slot_ids;
    e.topk_weights = p.topk_weights;
    launch_moe_experts(e, stream);
}

}  // namespace zmoe::kernels
