#pragma once
// The weights of one CUDA worker rank in device memory, BF16: every attention, norm, dense and router weight, and
// the experts of this rank's placement slots stacked as the grouped GEMM reads them. Uploaded from the mapped
// checkpoint through model_weights (which knows every architecture's tensor names and both expert layouts);
// F16/F32 tensors are converted to BF16 on the host on the way.
// Block-scaled FP8 (docs/fp8.md): the linears model_weights holds as e4m3 (an FP8 checkpoint's, or quantized at
// load) are uploaded as codes + fp32 block scales into the cuda_layer::fp8 fields instead of the BF16 ones (which
// stay empty), zero-padded to the FP8 GEMMs' multiples of 16 (zero codes change neither a product nor a block's
// amax, so the padding is exact); embeddings, norms, routers, lm_head stay BF16, MLA's kv_b BF16 from its fp32
// dequantization.

#include <cstdint>
#include <vector>

#include "workers/cuda/device_buffer.hpp"
#include "workers/model_weights.hpp"

namespace zmoe::cuda {

/// A gated MLP on the device: gate_up [2 * inter, hidden] (gate rows, then up rows), down [hidden, inter].
struct cuda_mlp {
    device_buffer gate_up;
    device_buffer down;
    int64_t inter = 0;
};

/// Multi-head latent attention (DeepSeek) on the device; shapes as mla_weights (r = kv_lora_rank).
struct cuda_mla {
    device_buffer q_a;       // [q_lora_rank, H]; empty without q LoRA
    device_buffer q_a_norm;  // [q_lora_rank]
    device_buffer q_b;       // [heads * (dn + dr), q_lora_rank], or q_proj [heads * (dn + dr), H] without q LoRA
    device_buffer kv_a;      // [r + dr, H]
    // Without q LoRA and in BF16: q_proj's rows then kv_a's, [heads * (dn + dr) + r + dr, H], so that a decode token
    // takes both projections (same input) in one GEMV; q_b and kv_a are empty then.
    device_buffer q_kv_a;
    device_buffer kv_a_norm;  // [r]
    device_buffer kv_b;       // [heads * (dn + dv), r]
};

/// A block-scaled FP8 weight [n, k] (e4m3 codes + one fp32 scale per 128 x 128 block, w ~ code * scale), its codes
/// zero-padded to [n_pad, k_pad] (multiples of 16, what launch_grouped_gemm_fp8 takes); the scales keep the
/// checkpoint's grid [ceil(n / 128), ceil(k / 128)] (padding never adds a block).
struct cuda_fp8_matrix {
    device_buffer codes;   // [n_pad, k_pad] uint8
    device_buffer scales;  // [ceil(n / 128), ceil(k / 128)] fp32
    int32_t n = 0, k = 0, n_pad = 0, k_pad = 0;
    bool empty() const { return codes.empty(); }
};

/// A gated MLP in FP8 as the fused gate/up GEMM reads it (one group of launch_grouped_gemm_fp8 with swiglu):
/// gate_up codes [2 * inter_pad, hidden] (gate rows, zero rows, up rows, zero rows), its scales [2, ceil(inter /
/// 128), ceil(hidden / 128)] (gate's grid, then up's); down [hidden, inter_pad] with its own scales.
struct cuda_fp8_mlp {
    cuda_fp8_matrix gate_up;  // n = inter, n_pad = inter_pad; codes hold 2 * n_pad rows, scales 2 grids
    cuda_fp8_matrix down;     // n = hidden, k = inter, k_pad = inter_pad
    bool empty() const { return down.empty(); }
};

/// The FP8 linears of one layer (all empty for a BF16 model; a linear the checkpoint leaves in BF16 stays in the
/// BF16 fields of cuda_layer).
struct cuda_layer_fp8 {
    /// q, k, v: one stacked matrix [q | k | v] when q's and k's rows are multiples of 128 (the blocks do not straddle
    /// the parts), else three matrices whose outputs land side by side in the qkv row.
    std::vector<cuda_fp8_matrix> qkv;
    cuda_fp8_matrix o;
    cuda_fp8_matrix q_a, q_b, kv_a;  // MLA (q_b is q_proj without q LoRA)
    cuda_fp8_mlp dense, shared;
    // Routed experts (moe_fp8_experts): gate_up [num_slots, 2 * inter_pad, hidden] + scales [num_slots, 2,
    // ceil(inter / 128), ceil(hidden / 128)]; down [num_slots, hidden, inter_pad] + scales [num_slots,
    // ceil(hidden / 128), ceil(inter / 128)].
    device_buffer experts_gate_up, experts_gate_up_scales, experts_down, experts_down_scales;
    int32_t inter_pad = 0;  // the routed experts' FFN width as the FP8 kernels see it (a multiple of 16)
};

struct cuda_layer {
    device_buffer input_norm;  // [H]
    device_buffer post_norm;   // [H]
    device_buffer qkv;         // [(heads + 2 * kv_heads) * head_dim, H]: q | k | v rows
    device_buffer qkv_bias;    // [(heads + 2 * kv_heads) * head_dim] or empty
    device_buffer o;           // [H, heads * head_dim]
    device_buffer o_bias;      // [H] or empty
    device_buffer q_norm;      // [head_dim] (per head) or [heads * head_dim] (whole), or empty
    device_buffer k_norm;      // [head_dim] or [kv_heads * head_dim], or empty
    cuda_mla mla;              // DeepSeek only (qkv empty then; o is [H, heads * v_head_dim])
    int64_t moe_index = -1;    // index among MoE layers, -1 for a dense layer
    cuda_mlp dense;            // dense layers only
    // MoE layers only:
    device_buffer router;           // [E, H]
    device_buffer router_bias;      // deepseek_v3: e_score_correction_bias [E], fp32; else empty
    device_buffer experts_gate_up;  // [num_slots, 2 * I, H]
    device_buffer experts_down;     // [num_slots, H, I]
    int32_t num_slots = 0;
    bool has_shared = false;
    cuda_mlp shared;
    device_buffer shared_gate;  // [1, H]; empty: ungated (DeepSeek)
    cuda_layer_fp8 fp8;         // the FP8 linears (their BF16 fields above are empty then)
    bool fp8_experts() const { return !fp8.experts_down.empty(); }
};

/// One part of a slot's expert weights (EPLB moves copy every part of a slot): the part's buffer start and the
/// bytes of one slot in it.
struct expert_part {
    std::byte* base = nullptr;
    size_t slot_bytes = 0;
};

struct cuda_weights {
    device_buffer embed;    // [V, H]
    device_buffer lm_head;  // [V, H]; empty when tied to embed
    device_buffer final_norm;
    std::vector<cuda_layer> layers;
    int64_t bytes = 0;  ///< device bytes the weights take
    bool fp8 = false;   ///< some linears are block-scaled FP8 (cuda_layer::fp8)

    const device_buffer& head() const { return lm_head.empty() ? embed : lm_head; }

    /// Uploads `w` (host views) to the current device. Throws zmoe::error(out_of_memory) when it does not fit.
    static cuda_weights upload(const model_weights& w);
    /// `--load-format dummy`: `rank`'s weights of `placement` generated on the current device from the config alone,
    /// spread like a trained model's: matrices ~ N(0, 0.02^2) (transformers' initializer_range), norms 1, biases 0.
    /// Every tensor has its own deterministic stream (a logical expert's weights do not depend on its slot or rank).
    /// With c.quantization.fp8() the linears model_weights would quantize are generated in BF16 as above and
    /// quantized on the device (launch_fp8_weight_quantize: quantize_fp8_blocks' bits for the same BF16 values).
    static cuda_weights dummy(const model_config& c, const expert_placement& placement, int rank);
};

/// Bytes of one expert's weights on the device (gate_up then down: BF16, or FP8 codes (FFN width padded to 16) and
/// their fp32 scales when c.quantization.fp8()).
int64_t expert_bytes(const model_config& c);

/// The parts of a MoE layer's expert slots (BF16: gate_up, down; FP8: gate_up codes, their scales, down codes,
/// their scales), for the EPLB mover.
std::vector<expert_part> expert_parts(const cuda_layer& l, const model_config& c);

/// The FFN width the FP8 kernels see for an MLP of width `inter`: rounded up to a multiple of 16.
inline int32_t fp8_padded(int64_t n) { return static_cast<int32_t>((n + 15) / 16 * 16); }

/// `--dummy-router-skew` on the device: the same hot experts as the CPU backend's dummy weights
/// (workers/dummy_weights.hpp: embedding column 0, zero row 0 of every residual writer, router column 0), applied
/// to weights cuda_weights::dummy generated. 0 leaves them as they are. Throws zmoe::error(invalid_argument) for a
/// negative or non-finite skew.
void apply_dummy_router_skew(cuda_weights& w, const model_config& c, double skew);

}  // namespace zmoe::cuda
