#pragma once
// SiLU in fp32 with the same bits on the host and the device: an exp built only from correctly rounded fp32
// operations (products, fmaf, rint, exact power-of-two scalings), so a CPU test can reproduce a kernel's fp32
// activations exactly and check their FP8 quantization bit for bit (launch_silu_mul_fp8). Accuracy: about 1 ulp
// (a degree-7 Taylor polynomial on |r| <= ln 2 / 2, truncation below 2^-27 relative), plenty for an activation
// quantized to e4m3 (3 mantissa bits) right after. No multiply-add is left to the compiler to contract: every fused
// step is an explicit fmaf, so contraction settings cannot change the bits.

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ZMOE_SILU_F32_FN __host__ __device__ __forceinline__
#else
#define ZMOE_SILU_F32_FN inline
#endif

namespace zmoe::kernels {

/// 2^e as a float for e in [-126, 127] (a normal number: exact).
ZMOE_SILU_F32_FN float pow2_f32(int32_t e) {
    const uint32_t bits = uint32_t(e + 127) << 23;
#if defined(__CUDA_ARCH__)
    return __uint_as_float(bits);
#else
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
#endif
}

/// e^x in fp32, the same bits everywhere: +inf above ln(FLT_MAX), 0 below -104 (under half the smallest subnormal),
/// NaN for NaN.
ZMOE_SILU_F32_FN float exp_f32(float x) {
    if (x != x) return x;
    if (x > 88.72283935546875f) return INFINITY;
    if (x < -104.f) return 0.f;
    // x = n ln2 + r, |r| <= ln2 / 2 (plus rounding): ln2 in two parts, the high one with trailing zero bits so that
    // n * kLn2Hi is exact for |n| < 2^9.
    constexpr float kLog2e = 1.44269502162933349609375f;
    constexpr float kLn2Hi = 0.693145751953125f;
    constexpr float kLn2Lo = 1.428606765330187045e-06f;
    const float n = rintf(x * kLog2e);
    float r = fmaf(-n, kLn2Hi, x);
    r = fmaf(-n, kLn2Lo, r);
    float p = 1.f / 5040.f;
    p = fmaf(p, r, 1.f / 720.f);
    p = fmaf(p, r, 1.f / 120.f);
    p = fmaf(p, r, 1.f / 24.f);
    p = fmaf(p, r, 1.f / 6.f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.f);
    p = fmaf(p, r, 1.f);
    // p * 2^n in two exact power-of-two steps (n in [-151, 128]: each half a normal exponent); the second product
    // rounds once if the result is subnormal.
    const int32_t ni = int32_t(n), n1 = ni / 2, n2 = ni - n1;
    return (p * pow2_f32(n1)) * pow2_f32(n2);
}

/// silu(g) = g / (1 + e^-g) in fp32 (correctly rounded add and division on top of exp_f32).
ZMOE_SILU_F32_FN float silu_f32(float g) { return g / (1.f + exp_f32(-g)); }

}  // namespace zmoe::kernels

#undef ZMOE_SILU_F32_FN
