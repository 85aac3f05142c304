#pragma once
// Decode-step kernel variants written for long-context decode (issue 29, branch ctx32k, 2026-11-28) and not yet
// measured on a GPU: each is off unless named in ZMOE_DECODE_TUNING, so by default the measured kernels run, and one
// binary can time each variant against them in one call (docs/kernels.md, "Decode step variants not yet measured").
//
//   ZMOE_DECODE_TUNING=name[,name...] | all | (empty or unset: none)
//     gemv_wave       gemv_bf16: blocks of four warps, the fewest rows per warp whose launch fits one wave, each
//                     warp's first chunks loaded into registers before the programmatic wait
//     skinny_smem     skinny_gemm: the first stages' weight rows copied into shared memory before the wait
//     combine_early   decode attention combine: the next kernel may launch before the combine waits for the chunks
//     moe_down_stage  moe_decode, one token: the second group of down rows staged in shared memory before the barrier
//     norm_early      rms_norm, rope_qk_norm_kv: the next kernel may launch before they wait
//     qkv_skinny      the executor's dense projections (workers/cuda/cuda_gemm.cpp): 2-4 rows of up to 8 192 outputs
//                     (QKV at batch 2-4) on skinny_gemm, programmatically dependent, instead of cuBLASLt
// An unknown name is refused (the process stops with the list of names), never ignored.

#include <string>
#include <string_view>

namespace zmoe::kernels {

struct decode_tuning {
    bool gemv_wave = false;
    bool skinny_smem = false;
    bool combine_early = false;
    bool moe_down_stage = false;
    bool norm_early = false;
    bool qkv_skinny = false;
    bool operator==(const decode_tuning&) const = default;
};

/// Parses a ZMOE_DECODE_TUNING value into *out; false (and *error names the bad entry) on an unknown name.
bool parse_decode_tuning(std::string_view value, decode_tuning* out, std::string* error);

/// The switches the launchers read: ZMOE_DECODE_TUNING at the first call (an invalid value stops the process), or
/// what set_decode_tuning last set.
decode_tuning current_decode_tuning();

/// Replaces the switches (tests and benches time both sides of a variant in one process).
void set_decode_tuning(const decode_tuning& t);

}  // namespace zmoe::kernels
