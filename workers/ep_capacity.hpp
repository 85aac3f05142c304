#pragma once
// The fixed expert-parallel exchange's window: how many rows each rank may send each destination rank in one MoE
// layer (workers/cuda/cuda_ep_exchange.hpp). A routing that needs more overflows the window, and every rank redoes
// the step on the exact path: correct, but that step costs about twice. So the default window must leave room for
// the spread of a random routing, not only its mean, at every batch size a decode graph replays.

#include <cstdint>

namespace zmoe {

/// The window's default headroom over the even share at large batches.
inline constexpr double kEpCapacityFactor = 1.25;
/// Standard deviations of slack the default window keeps over the even share. A destination's rows are a sum of
/// per-token counts whose variance is below their mean, so sigma <= sqrt(mean); one window in about 10^9 overflows at
/// 6 sigma for a uniform routing, where 1.25 x the share overflowed in ~20% of the decode steps of 64 sequences per
/// rank on 4 GPUs and 48 layers (docs/benchmarks.md).
inline constexpr double kEpCapacitySigmas = 6.0;

/// Rows per destination rank for a lane of at most `max_tokens` tokens on any rank, each with `top_k` choices, over
/// `world` ranks: with `factor` > 0 exactly factor x the even share (max_tokens x top_k / world); with `factor` <= 0
/// (the default) the larger of 1.25 x the share and share + 6 sqrt(share). Rounded up to 8, at most
/// max_tokens x top_k (then no routing can overflow) and at most `max_capacity` (what the buffers hold).
int32_t ep_window_capacity(int32_t max_tokens, int32_t top_k, int32_t world, double factor, int32_t max_capacity);

}  // namespace zmoe
