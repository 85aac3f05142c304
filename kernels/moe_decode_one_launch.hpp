#pragma once
// The routed experts of a few tokens with their router in ONE launch (kernels/moe_decode_one_launch.cu), BF16 or
// block-scaled FP8 weights, behind launch_moe_layer's decode path.

#include <cuda_runtime_api.h>

#include "kernels/api.hpp"

namespace zmoe::kernels::detail {

/// Most tokens launch_moe_decode_one_launch takes.
constexpr int32_t kMoeDecodeOneLaunchMaxTokens = 16;

/// True when launch_moe_decode_one_launch takes this shape (fp8: block-scaled FP8 weights, else BF16):
/// 1..kMoeDecodeOneLaunchMaxTokens tokens, top_k in [1, 16], top_k <= num_experts <= 512, hidden and inter multiples
/// of 16, and x, one token's act and the staged down rows within the kernel's shared memory.
bool moe_decode_one_launch_supported(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t hidden,
                                     int32_t inter, bool fp8);

struct moe_decode_one_launch_params {
    const bf16* router_w = nullptr;            // [num_experts, hidden] or nullptr: router_logits are given
    float* router_logits = nullptr;            // [num_tokens, num_experts] fp32: out with router_w, else in
    const int32_t* replica_offsets = nullptr;  // [num_experts + 1], as moe_route_params
    const int32_t* replica_slots = nullptr;    // as moe_route_params
    const int32_t* num_valid = nullptr;        // [1] or nullptr (all valid): tokens from *num_valid on are padding
    const bf16* x = nullptr;                   // [num_tokens, hidden]: the normalised hidden states
    const moe_fp8_experts* fp8 = nullptr;      // FP8 weights (their scratch pointers unused), or nullptr: BF16 below
    const bf16* w_gate_up = nullptr;           // BF16: [num_slots, 2 * inter, hidden]: gate rows, then up rows
    const bf16* w_down = nullptr;              // BF16: [num_slots, hidden, inter]
    float* topk_weights = nullptr;             // [num_tokens, top_k] out
    int32_t* slot_ids = nullptr;               // [num_tokens, top_k] out: the slot serving each choice
    int32_t* expert_counts = nullptr;          // [num_experts] or nullptr: += the valid tokens' choices
    int32_t* scratch = nullptr;                // moe_decode_scratch_ints(num_tokens, top_k) ints, zero between launches
    void* act = nullptr;                       // [num_tokens * top_k, inter] scratch: fp32 with fp8, else bf16
    bf16* out = nullptr;                       // [num_tokens, hidden]
    int32_t num_tokens = 0;
    int32_t top_k = 0;
    int32_t num_experts = 0;
    int32_t hidden = 0;
    int32_t inter = 0;
    bool renormalize = false;
};

/// The routed experts of a few tokens with the router, in ONE launch whose phases meet at grid barriers (every block
/// resident; launch_moe_decode's rules: never two at once on different streams): the router GEMV (launch_gemv_bf16's
/// sums), the softmax top-k with the replica choice (launch_router_topk's), then the experts: with fp8,
/// launch_moe_decode_fp8's arithmetic (the same quantizations and fp32 sums in the same order, so for the same logits
/// out, act, slot_ids and topk_weights are bit for bit those of the router followed by its two launches); in BF16,
/// launch_moe_decode's (act = bf16(silu(gate) * up), y = bf16 per choice, out = bf16 of the weighted sum in top-k
/// order).
void launch_moe_decode_one_launch(const moe_decode_one_launch_params& p, cudaStream_t stream);

}  // namespace zmoe::kernels::detail
