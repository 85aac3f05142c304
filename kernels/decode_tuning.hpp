#pragma once
// Decode-step kernel variants written for long-context decode (issue 29) and measured on an H100 (2026-11-28,
// docs/kernels.md, "Decode step variants"): the three that won are the defaults, each where it won, and
// ZMOE_DECODE_TUNING stays as an A/B switch so one binary times them against the older kernels in one call.
//
//   ZMOE_DECODE_TUNING unset or empty          the defaults: all three variants below
//   ZMOE_DECODE_TUNING=name[,name...] | all    exactly those variants (all: every one, today the defaults)
//   ZMOE_DECODE_TUNING=none                    none of them: the kernels measured before (eight-warp GEMV blocks,
//                                              L2 prefetches, the combine and the norms triggering after their wait)
//     gemv_wave       gemv_bf16, one row of x only (2-4 rows keep the eight-warp blocks): blocks of four warps, the
//                     fewest rows per warp whose launch fits one wave, each warp's first chunks loaded into
//                     registers before the programmatic wait
//     combine_early   decode attention combine, one sequence only: the next kernel may launch before the combine
//                     waits for the chunks
//     norm_early      rms_norm, rope_qk_norm_kv: the next kernel may launch before they wait
// A variant named still applies only where its condition holds (one row, one sequence). An unknown name, an empty
// entry, or `none` beside other names is refused (the process stops with the list of names), never ignored.

#include <string>
#include <string_view>

namespace zmoe::kernels {

/// Which variants are on; value-initialised, none (the older kernels).
struct decode_tuning {
    bool gemv_wave = false;
    bool combine_early = false;
    bool norm_early = false;
    bool operator==(const decode_tuning&) const = default;
};

/// What runs with ZMOE_DECODE_TUNING unset: every variant, each under its condition.
inline constexpr decode_tuning kDefaultDecodeTuning{.gemv_wave = true, .combine_early = true, .norm_early = true};

/// Parses a ZMOE_DECODE_TUNING value into *out ("" gives kDefaultDecodeTuning, "none" decode_tuning{}); false (*out
/// untouched, *error names the bad entry and the known names) on an unknown or empty name or `none` among others.
bool parse_decode_tuning(std::string_view value, decode_tuning* out, std::string* error);

/// The switches the launchers read: ZMOE_DECODE_TUNING at the first call (unset: kDefaultDecodeTuning; an invalid
/// value stops the process), or what set_decode_tuning last set.
decode_tuning current_decode_tuning();

/// Replaces the switches (tests and benches time both sides of a variant in one process).
void set_decode_tuning(const decode_tuning& t);

}  // namespace zmoe::kernels
