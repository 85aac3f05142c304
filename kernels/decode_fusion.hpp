#pragma once
// Whether the CUDA worker takes the DeepSeek decode-step fusions (CMake option ZMOE_DECODE_FUSION).

namespace zmoe::kernels {

#ifndef ZMOE_DECODE_FUSION
#define ZMOE_DECODE_FUSION 0
#endif
/// The DeepSeek decode-step fusions (CMake option ZMOE_DECODE_FUSION, OFF by default until measured on a GPU): at
/// 1..kMlaAbsorbGemvMaxTokens sequences the latent RoPE in the absorb kernel (launch_mla_rope_q_absorb_gemv) and the
/// split combine in the v_up kernel (launch_mla_decode_v_up_gemv); at one token q_proj and kv_a in one GEMV over
/// stacked weights and the routed experts' output added by the shared experts' down GEMV; the MLA decode kernel's
/// first tile loaded before the programmatic wait but for the newest row. The launchers are built and tested either
/// way; this decides only what the CUDA worker and launch_mla_decode take.
constexpr bool kDecodeFusion = ZMOE_DECODE_FUSION != 0;

}  // namespace zmoe::kernels
