#pragma once
// One MoE block on one expert-parallel rank: route this rank's tokens, dispatch each (token, expert) pair to a
// rank holding a replica of the expert, compute the experts this rank holds for every rank, send results back,
// and combine. Always joins the two all_to_all exchanges, with zero tokens too.
//
// Bitwise independence of the world size: an expert's output for a token depends only on the token's row and
// the expert's weights (fixed-order dot products), and the combine sums the top-k outputs in top-k order on the
// token's own rank. Which replica computed it, and what else was in the batch, does not matter.
//
// The dispatch's rows (ep_dispatch_format): fp32 as computed, or for a block-scaled FP8 model FP8 records, each row
// quantized on the token's rank per 128-channel group (quantize_fp8_activation_row) and sent as e4m3 codes plus one
// fp32 scale per group, about a quarter of the fp32 bytes (half of what BF16 rows cost on CUDA). The expert's rank
// feeds them to the gate/up projections as is (linear_rows_fp8): the same values its W8A8 linear_rows would have
// quantized from the fp32 row, so the layer's output is bit for bit the same either way. The combine sends fp32.

#include <cstdint>
#include <vector>

#include "messages/expert_placement.hpp"
#include "model/model_config.hpp"
#include "workers/comm_stream.hpp"
#include "workers/cpu_kernels.hpp"
#include "workers/expert_comm.hpp"
#include "workers/model_weights.hpp"
#include "workers/router.hpp"
#include "workers/thread_pool.hpp"

namespace zmoe {

/// How a MoE layer's dispatch carries its rows. Every rank of a world must use the same: ep_dispatch_format_of.
enum class ep_dispatch_format : uint8_t {
    f32,  ///< record = [slot, hidden fp32 values]
    /// record = [slot, fp8_blocks(hidden) fp32 scales, hidden e4m3 codes packed 4 to a 32-bit word (the last word
    /// zero-padded)]: the row quantized per 128-channel group on the token's rank. An expert whose gate or up
    /// projection is not FP8 (exempted by modules_to_not_convert) computes from the dequantized row (code x scale).
    fp8,
};

/// The rule: fp8 for a block-scaled FP8 model (config.quantization.fp8()), f32 otherwise.
ep_dispatch_format ep_dispatch_format_of(const model_config& config);

/// 32-bit words of one dispatch record of a `hidden`-wide row.
int64_t ep_dispatch_record_words(ep_dispatch_format format, int64_t hidden);

/// Softmax over `logits` [num_experts] then top-k, renormalised iff norm_topk_prob (route() of a softmax_topk
/// router).
routing route_token(const float* logits, int64_t num_experts, int64_t top_k, bool norm_topk_prob);

/// out[t] = the MoE block applied to x[t] (post-attention-normed rows), for x: [num_tokens, hidden].
/// expert_counts[e] (size num_experts) is incremented for every token routed to logical expert e. `format`: the
/// dispatch's records (every rank the same). `round`: BF16 rounding of each expert's output, the combine and the
/// shared expert's output, as the CUDA executor stores them (activation_rounding).
void moe_forward(thread_pool& pool, const model_config& config, const moe_weights& weights,
                 const expert_placement& placement, int64_t moe_layer, expert_comm& comm, const float* x,
                 int64_t num_tokens, float* out, uint32_t* expert_counts, ep_dispatch_format format,
                 activation_rounding round = {});

/// moe_forward as two micro-batches (dual-batch overlap): rows [0, split_row) are A, the rest B. A's dispatch is in
/// flight on `stream` while B routes, A's combine while B's experts run, B's combine while the shared expert runs.
/// Bitwise the same output as moe_forward (rows are independent, replicas picked by the same global token index).
/// Every rank of a dual-batch step calls it, each with its own split (an empty micro-batch still joins the
/// exchanges); rank/world are the stream's comm's.
void moe_forward_dual(thread_pool& pool, const model_config& config, const moe_weights& weights,
                      const expert_placement& placement, int64_t moe_layer, comm_stream& stream, int rank, int world,
                      const float* x, int64_t num_tokens, int64_t split_row, float* out, uint32_t* expert_counts,
                      ep_dispatch_format format, activation_rounding round = {});

/// Dense gated MLP: out = down(silu(gate x) * up x) for x: [num_tokens, H], out: [num_tokens, H] (rounded by
/// `round`; gate, up and SiLU * up stay fp32, as in the CUDA path's fused epilogue).
void mlp_forward(thread_pool& pool, const mlp_weights& w, const float* x, int64_t num_tokens, float* out,
                 activation_rounding round = {});

}  // namespace zmoe
