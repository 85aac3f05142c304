#pragma once
// The memory floor of a step: the bytes a forward pass must read at least (the weights and the KV cache), which
// over a device's copy bandwidth give the shortest time the step can take. One definition for the offline step
// benchmark (`zmoe bench step`) and the engine core's served-step accounting (`zmoe bench serve` prints it).

#include <cstdint>
#include <span>
#include <string>

#include "model/model_config.hpp"

namespace zmoe {

struct step_floor_model {
    /// Weights every step reads whatever the routing: attention, norms, routers, dense and shared MLPs, the final
    /// norm and the LM head (the embedding reads one row per token: left out). BF16, except with
    /// c.quantization.fp8() the linears the format quantizes (docs/fp8.md; MLA's kv_b included, as stored): one byte
    /// per weight plus an fp32 scale per 128 x 128 block.
    int64_t dense_bytes = 0;
    /// Gate, up and down weights of one routed expert (BF16, or FP8 as above).
    int64_t expert_bytes = 0;
    /// BF16 KV cache bytes of one position over all layers (K and V; MLA: the one latent + rope-key row).
    int64_t kv_bytes_per_position = 0;

    static step_floor_model of(const model_config& c);
    /// of(c) with `--quantization` applied (model_config::apply_quantization_flag: "fp8" counts the FP8 bytes).
    static step_floor_model of(const model_config& c, const std::string& quantization_flag);

    /// Bytes of a step that touches `experts_touched` (layer, expert) pairs and whose attention reads
    /// `kv_positions` cached positions (summed over its sequences).
    double bytes(int64_t experts_touched, int64_t kv_positions) const {
        return static_cast<double>(dense_bytes) +
               static_cast<double>(experts_touched) * static_cast<double>(expert_bytes) +
               static_cast<double>(kv_positions) * static_cast<double>(kv_bytes_per_position);
    }
};

/// (layer, expert) pairs with at least one token in `counts` ([num_moe_layers * num_experts], a step result's
/// expert_counts, or their sum over ranks).
int64_t experts_touched(std::span<const uint32_t> counts);

}  // namespace zmoe
