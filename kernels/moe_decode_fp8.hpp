#pragma once
// The few-token FP8 routed experts (kernels/moe_decode_fp8.cu) behind launch_moe_layer with moe_experts_params::fp8.

#include <cuda_runtime_api.h>

#include "kernels/api.hpp"

namespace zmoe::kernels::detail {

/// Tokens (and tokens x top_k choices) the FP8 decode path takes at most.
constexpr int32_t kMoeDecodeFp8MaxTokens = 4;
constexpr int32_t kMoeDecodeFp8MaxPairs = 32;

/// True when launch_moe_decode_fp8 takes this shape: 1..kMoeDecodeFp8MaxTokens tokens, at most
/// kMoeDecodeFp8MaxPairs choices, hidden and inter multiples of 16 up to 16 384.
bool moe_decode_fp8_supported(int32_t num_tokens, int32_t top_k, int32_t hidden, int32_t inter);

struct moe_decode_fp8_params {
    const bf16* x = nullptr;              // [num_tokens, hidden]
    const int32_t* slot_ids = nullptr;    // [num_tokens, top_k]: the slot serving each choice (the router's)
    const float* topk_weights = nullptr;  // [num_tokens, top_k]
    moe_fp8_experts fp8;                  // the weights (the scratch pointers unused)
    float* act = nullptr;                 // [num_tokens * top_k, inter] fp32 scratch
    bf16* out = nullptr;                  // [num_tokens, hidden]
    int32_t num_tokens = 0;
    int32_t top_k = 0;
    int32_t hidden = 0;
    int32_t inter = 0;
    /// The gate/up kernel stages its weight rows in shared memory with bulk copies issued before it quantizes x
    /// (hidden <= 4096); false (default: 27.7 against 29.5 us on H100): 16-byte loads into registers after (the
    /// arithmetic is the same).
    bool bulk_weights = false;
};

/// The FP8 experts for a few tokens in two launches, the format's arithmetic as launch_moe_experts with fp8 (the
/// same quantizations; fp32 sums in another order): (1) every block quantizes x per token and 128-channel group
/// into shared memory, then one warp per (choice, FFN column) dots the gate and up e4m3 rows with the block scales:
/// act = silu(gate) * up in fp32; (2) every block quantizes act per choice and 128-channel group into shared memory,
/// then one warp per (token, hidden row) dots the down rows of the token's choices: y = bf16(...) per choice, out =
/// bf16(sum_j weight_j * y_j) in top-k order (launch_moe_combine's sum). Each weight row is read once per token.
void launch_moe_decode_fp8(const moe_decode_fp8_params& p, cudaStream_t stream);

/// Most tokens launch_moe_decode_fp8_one takes.
constexpr int32_t kMoeDecodeFp8OneMaxTokens = 16;

/// True when launch_moe_decode_fp8_one takes this shape: 1..kMoeDecodeFp8OneMaxTokens tokens, top_k in [1, 16],
/// top_k <= num_experts <= 512, hidden and inter multiples of 16, and x's codes, one token's act codes and the staged
/// down rows within the kernel's shared memory.
bool moe_decode_fp8_one_supported(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t hidden,
                                  int32_t inter);

struct moe_decode_fp8_one_params {
    const bf16* router_w = nullptr;            // [num_experts, hidden] or nullptr: router_logits are given
    float* router_logits = nullptr;            // [num_tokens, num_experts] fp32: out with router_w, else in
    const int32_t* replica_offsets = nullptr;  // [num_experts + 1], as moe_route_params
    const int32_t* replica_slots = nullptr;    // as moe_route_params
    const int32_t* num_valid = nullptr;        // [1] or nullptr (all valid): tokens from *num_valid on are padding
    const bf16* x = nullptr;                   // [num_tokens, hidden]: the normalised hidden states
    moe_fp8_experts fp8;                       // the weights (the scratch pointers unused)
    float* topk_weights = nullptr;             // [num_tokens, top_k] out
    int32_t* slot_ids = nullptr;               // [num_tokens, top_k] out: the slot serving each choice
    int32_t* expert_counts = nullptr;          // [num_experts] or nullptr: += the valid tokens' choices
    int32_t* scratch = nullptr;                // moe_decode_scratch_ints(num_tokens, top_k) ints, zero between launches
    float* act = nullptr;                      // [num_tokens * top_k, inter] fp32 scratch
    bf16* out = nullptr;                       // [num_tokens, hidden]
    int32_t num_tokens = 0;
    int32_t top_k = 0;
    int32_t num_experts = 0;
    int32_t hidden = 0;
    int32_t inter = 0;
    bool renormalize = false;
};

/// The FP8 routed experts of a few tokens with the router, in ONE launch whose phases meet at grid barriers (every
/// block resident; launch_moe_decode's rules: never two at once on different streams): the router GEMV
/// (launch_gemv_bf16's sums), the softmax top-k with the replica choice (launch_router_topk's), then
/// launch_moe_decode_fp8's arithmetic: the same quantizations and the same fp32 sums in the same order, so for the
/// same logits, out, act, slot_ids and topk_weights are bit for bit those of the router followed by the two launches.
void launch_moe_decode_fp8_one(const moe_decode_fp8_one_params& p, cudaStream_t stream);

}  // namespace zmoe::kernels::detail
