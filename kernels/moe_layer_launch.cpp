// The launch sequence of an MoE layer's routed experts, shared by the CUDA executor and
// bench/kernels/moe_layer_bench so that the bench times exactly what a step runs.

#include <algorithm>
#include <cstdint>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/moe_decode_fp8.hpp"
#include "kernels/moe_decode_one_launch.hpp"

namespace zmoe::kernels {
namespace {

/// Most tokens the FP8 experts take the few-token one launch for on the automatic path: measured against the grouped
/// path (H100, Qwen3-30B-A3B shapes, cold layers, ea0b81e) 1 / 2 / 4 tokens 30.4 / 49.4 / 81.3 us against 34.3 (the
/// router + two few-token launches) / 55.7 / 82.9; 8 / 16 tokens 149 / 313 against 131 / 185 (docs/kernels.md).
constexpr int32_t kFp8DecodePathMaxTokens = 4;

/// Most tokens the BF16 experts take the few-token one launch for on the automatic path (one token: moe_decode, level
/// with it at 38.1 against 38.6 us): 2 / 4 tokens 66.4 / 112.9 us against the grouped path's 76.8 / 121.0; 8 tokens
/// level (205.7 / 207.6), 16 slower (405 / 312; same run as above).
constexpr int32_t kBf16OneLaunchMaxTokens = 4;

/// The decode path runs launch_moe_decode_one_launch: with the router fused, FP8 always (its fp32 act, 4 bytes per
/// element, fits act_q's max_rows x inter bytes; else the router launch and launch_moe_decode_fp8), BF16 from two
/// tokens (one token: launch_moe_decode, measured faster; see docs/kernels.md).
bool one_launch(const moe_layer_params& p) {
    const moe_experts_params& e = p.experts;
    const bool fp8 = e.fp8 != nullptr;
    const int32_t act_rows = fp8 ? 4 * e.num_tokens * e.top_k : e.num_tokens * e.top_k;
    return p.fuse_router && (fp8 || e.num_tokens >= 2) && e.max_rows >= act_rows &&
           detail::moe_decode_one_launch_supported(e.num_tokens, e.top_k, p.num_experts, e.hidden, e.inter, fp8);
}

void mark(moe_stage_mark fn, void* context, moe_stage stage) {
    if (fn != nullptr) fn(context, stage);
}

int32_t resolve_align(int32_t row_align, int32_t num_tokens, int32_t top_k, int32_t permute_slots) {
    return row_align > 0 ? row_align : moe_row_align_for(num_tokens, top_k, permute_slots);
}

/// launch_moe_experts with p.fp8: the permutation plan, x quantized (into the permuted rows, or once per token when
/// the gate/up GEMM gathers them), the FP8 gate/up GEMM
/// (SiLU * up quantized in its epilogue), the FP8 down GEMM (BF16 out) and the combine.
void launch_moe_experts_fp8(const moe_experts_params& p, int32_t permute_slots, cudaStream_t stream) {
    const moe_fp8_experts& f = *p.fp8;
    const int32_t align = p.row_align > 0 ? p.row_align : 64;
    ZMOE_KERNEL_REQUIRE(align % 64 == 0, "moe_experts: FP8 experts need row_align a multiple of 64");
    const int32_t max_rows = moe_permuted_rows_bound(p.num_tokens, p.top_k, permute_slots, align);
    ZMOE_KERNEL_REQUIRE(max_rows <= p.max_rows, "moe_experts: the permuted-row scratch is too small for the batch");
    const int32_t ld = fp8_scale_ld(p.max_rows);
    mark(p.mark, p.mark_context, moe_stage::permute);
    launch_moe_permute({.topk_ids = p.slots,
                        .x = nullptr,  // plan only: the quantization below gathers
                        .expert_offsets = p.expert_offsets,
                        .dest_rows = p.dest_rows,
                        .row_token = p.row_token,
                        .x_permuted = nullptr,
                        .workspace = p.permute_workspace,
                        .num_tokens = p.num_tokens,
                        .top_k = p.top_k,
                        .num_experts = permute_slots,
                        .hidden = p.hidden,
                        .row_align = align,
                        .max_rows = max_rows},
                       stream);
    grouped_gemm_fp8_params gate_up{.a = f.x_q,
                                    .a_scales = f.x_scales,
                                    .a_scale_ld = ld,
                                    .b = f.w_gate_up,
                                    .b_scales = f.w_gate_up_scales,
                                    .expert_offsets = p.expert_offsets,
                                    .c_q = f.act_q,
                                    .c_scales = f.act_scales,
                                    .c_scale_ld = ld,
                                    .max_rows = max_rows,
                                    .n = p.inter,
                                    .k = p.hidden,
                                    .num_experts = p.num_slots,
                                    .row_align = align,
                                    .swiglu = true,
                                    .max_ctas = p.max_ctas,
                                    .tiles = p.fp8_tiles};
    // With fp8_gather and wide tiles the GEMM gathers x's quantized rows through row_token (x quantized once per
    // token); else it reads a permuted copy (each token's codes written to its top-k rows), the default: faster.
    // Records from the expert-parallel FP8 dispatch are unpacked into that permuted copy.
    const bool gather =
        f.x_records == nullptr && p.fp8_gather && fp8_gemm_tiles_gather(resolve_fp8_gemm_tiles(gate_up));
    if (gather) gate_up.a_rows = p.row_token;
    if (f.x_records != nullptr) {  // quantized by the sending rank (the expert-parallel FP8 dispatch)
        launch_ep_fp8_unpack({.records = f.x_records,
                              .dest_rows = p.dest_rows,
                              .q = f.x_q,
                              .scales = f.x_scales,
                              .num_tokens = p.num_tokens,
                              .top_k = p.top_k,
                              .cols = p.hidden,
                              .scale_ld = ld},
                             stream);
    } else {
        launch_fp8_quantize({.x = p.x,
                             .dest_rows = gather ? nullptr : p.dest_rows,
                             .q = f.x_q,
                             .scales = f.x_scales,
                             .num_tokens = p.num_tokens,
                             .top_k = gather ? 1 : p.top_k,
                             .cols = p.hidden,
                             .scale_ld = ld},
                            stream);
    }
    mark(p.mark, p.mark_context, moe_stage::gemm_gate_up);
    launch_grouped_gemm_fp8(gate_up, stream);
    mark(p.mark, p.mark_context, moe_stage::gemm_down);
    launch_grouped_gemm_fp8({.a = f.act_q,
                             .a_scales = f.act_scales,
                             .a_scale_ld = ld,
                             .b = f.w_down,
                             .b_scales = f.w_down_scales,
                             .expert_offsets = p.expert_offsets,
                             .c = p.y,
                             .max_rows = max_rows,
                             .n = p.hidden,
                             .k = p.inter,
                             .num_experts = p.num_slots,
                             .row_align = align,
                             .swiglu = false,
                             .max_ctas = p.max_ctas,
                             .tiles = p.fp8_tiles},
                            stream);
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
    if (p.fp8 != nullptr) return launch_moe_experts_fp8(p, P, stream);
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
    if (e.fp8 != nullptr) {
        // FP8: the few-token kernels (one launch with the router fused, else two after the router) at up to
        // kFp8DecodePathMaxTokens (automatic), or where asked and they fit.
        if (p.path == moe_path::grouped ||
            !(one_launch(p) || detail::moe_decode_fp8_supported(e.num_tokens, e.top_k, e.hidden, e.inter)))
            return false;
        return p.path == moe_path::decode || e.num_tokens <= kFp8DecodePathMaxTokens;
    }
    if (p.path == moe_path::automatic)
        return moe_use_decode_path(e.num_tokens, e.top_k, p.num_experts, e.hidden, e.inter) ||
               (e.num_tokens <= kBf16OneLaunchMaxTokens && one_launch(p));
    return p.path == moe_path::decode &&
           (one_launch(p) || moe_decode_supported(e.num_tokens, e.top_k, p.num_experts, e.hidden, e.inter));
}

bool moe_layer_takes_shared(const moe_layer_params& p, int32_t shared_inter) {
    const moe_experts_params& e = p.experts;
    moe_layer_params routed = p;
    routed.shared_inter = 0;
    return e.fp8 == nullptr && e.num_tokens == 1 && moe_layer_uses_decode_path(routed) && !one_launch(routed) &&
           moe_decode_shared_supported(e.top_k, p.num_experts, e.hidden, e.inter, shared_inter) &&
           int64_t(e.max_rows) * e.inter >= int64_t(e.top_k) * e.inter + shared_inter;
}

void launch_moe_layer(const moe_layer_params& p, cudaStream_t stream) {
    moe_experts_params e = p.experts;
    if (e.num_tokens == 0) {
        mark(e.mark, e.mark_context, moe_stage::end);
        return;
    }
    ZMOE_KERNEL_REQUIRE(p.shared_inter == 0 || moe_layer_takes_shared(p, p.shared_inter),
                        "moe_layer: shared experts only on the one-token BF16 decode path (moe_layer_takes_shared)");
    const bool decode = moe_layer_uses_decode_path(p);
    // The router fused: one launch (router, top-k, gate/up, down and the weighted sum).
    if (decode && one_launch(p)) {
        mark(e.mark, e.mark_context, moe_stage::moe_decode);
        detail::launch_moe_decode_one_launch({.router_w = p.router_w,
                                              .router_logits = p.router_logits,
                                              .replica_offsets = p.replica_offsets,
                                              .replica_slots = p.replica_slots,
                                              .num_valid = p.num_valid,
                                              .x = e.x,
                                              .fp8 = e.fp8,
                                              .w_gate_up = e.w_gate_up,
                                              .w_down = e.w_down,
                                              .topk_weights = p.topk_weights,
                                              .slot_ids = p.slot_ids,
                                              .expert_counts = p.expert_counts,
                                              .scratch = p.decode_scratch,
                                              // FP8: fp32 in act_q's [max_rows, inter] bytes; BF16: act
                                              .act = e.fp8 != nullptr ? static_cast<void*>(e.fp8->act_q) : e.act,
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
    const bool fp8_decode = decode && e.fp8 != nullptr;  // its kernels take the router's slots and weights
    // The router: its logits only for the (BF16) decode path that does not compute them itself; on the grouped path
    // and before the FP8 decode kernels with the softmax top-k and the replica choice fused in.
    if (!decode || !p.fuse_router || fp8_decode)
        launch_moe_router({.x = e.x,
                           .router_w = p.router_w,
                           .router_logits = p.router_logits,
                           .blas = p.blas,
                           .blas_workspace = p.blas_workspace,
                           .blas_workspace_bytes = p.blas_workspace_bytes,
                           .topk_ids = p.topk_ids,
                           .topk_weights = decode && !fp8_decode ? nullptr : p.topk_weights,
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
    if (fp8_decode) {
        mark(e.mark, e.mark_context, moe_stage::moe_decode);
        ZMOE_KERNEL_REQUIRE(e.max_rows >= 4 * e.num_tokens * e.top_k,
                            "moe_layer: the FP8 scratch is too small for the decode path's act");
        detail::launch_moe_decode_fp8({.x = e.x,
                                       .slot_ids = p.slot_ids,
                                       .topk_weights = p.topk_weights,
                                       .fp8 = *e.fp8,
                                       .act = reinterpret_cast<float*>(e.fp8->act_q),  // [max_rows, inter] bytes
                                       .out = e.out,
                                       .num_tokens = e.num_tokens,
                                       .top_k = e.top_k,
                                       .hidden = e.hidden,
                                       .inter = e.inter},
                                      stream);
        mark(e.mark, e.mark_context, moe_stage::end);
        return;
    }
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
                           .renormalize = p.renormalize,
                           .shared_gate_up = p.shared_gate_up,
                           .shared_down = p.shared_down,
                           .shared_inter = p.shared_inter},
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
