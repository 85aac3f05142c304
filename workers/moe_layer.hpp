#pragma once
// One MoE block on one expert-parallel rank: route this rank's tokens, dispatch each (token, expert) pair to a
// rank holding a replica of the expert, compute the experts this rank holds for every rank, send results back,
// and combine. Always joins the two all_to_all exchanges, with zero tokens too.
//
// Bitwise independence of the world size: an expert's output for a token depends only on the token's row and
// the expert's weights (fixed-order dot products), and the combine sums the top-k outputs in top-k order on the
// token's own rank. Which replica computed it, and what else was in the batch, does not matter.

#include <cstdint>
#include <vector>

#include "messages/expert_placement.hpp"
#include "model/model_config.hpp"
#include "workers/comm_stream.hpp"
#include "workers/expert_comm.hpp"
#include "workers/model_weights.hpp"
#include "workers/router.hpp"
#include "workers/thread_pool.hpp"

namespace zmoe {

/// Softmax over `logits` [num_experts] then top-k, renormalised iff norm_topk_prob (route() of a softmax_topk
/// router).
routing route_token(const float* logits, int64_t num_experts, int64_t top_k, bool norm_topk_prob);

/// out[t] = the MoE block applied to x[t] (post-attention-normed rows), for x: [num_tokens, hidden].
/// expert_counts[e] (size num_experts) is incremented for every token routed to logical expert e.
void moe_forward(thread_pool& pool, const model_config& config, const moe_weights& weights,
                 const expert_placement& placement, int64_t moe_layer, expert_comm& comm, const float* x,
                 int64_t num_tokens, float* out, uint32_t* expert_counts);

/// moe_forward as two micro-batches (dual-batch overlap): rows [0, split_row) are A, the rest B. A's dispatch is in
/// flight on `stream` while B routes, A's combine while B's experts run, B's combine while the shared expert runs.
/// Bitwise the same output as moe_forward (rows are independent, replicas picked by the same global token index).
/// Every rank of a dual-batch step calls it, each with its own split (an empty micro-batch still joins the
/// exchanges); rank/world are the stream's comm's.
void moe_forward_dual(thread_pool& pool, const model_config& config, const moe_weights& weights,
                      const expert_placement& placement, int64_t moe_layer, comm_stream& stream, int rank, int world,
                      const float* x, int64_t num_tokens, int64_t split_row, float* out, uint32_t* expert_counts);

/// Dense gated MLP: out = down(silu(gate x) * up x) for x: [num_tokens, H], out: [num_tokens, H].
void mlp_forward(thread_pool& pool, const mlp_weights& w, const float* x, int64_t num_tokens, float* out);

}  // namespace zmoe
