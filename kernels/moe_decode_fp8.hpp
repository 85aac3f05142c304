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

}  // namespace zmoe::kernels::detail
