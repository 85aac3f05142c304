#include "workers/cuda/cuda_gemm.hpp"

#include <cstdint>

#include "base/check.hpp"
#include "kernels/api.hpp"

namespace zmoe::cuda {
namespace {

using kernels::bf16;

/// Whether the decode step runs launch_gemv_bf16 rather than cuBLASLt for m rows of n outputs (both supported).
/// Measured on H200 at Qwen3-30B-A3B shapes (bench/kernels/gemv_bench.cu: graphs of back-to-back launches; and
/// `zmoe bench step`; docs/benchmarks.md): the GEMV beats cuBLASLt on the router's 128 outputs (1.9-4.3 against
/// 4.8-5.0 us) and on the LM head's 151 669 (139-353 against 191-577 us) up to 8 rows, and at one row on O; at one
/// row QKV stays on it too (9.6 against 8.1 us back to back, but in the step it prefetches its weights while the
/// kernel before it ends). From two rows cuBLASLt is faster on the 2-5 K outputs of QKV and O (8 rows: 7.9 against
/// 20.6 us on QKV); a decode step of 8 sequences takes 9.8 ms with it against 10.7 ms.
bool gemv_preferred(int32_t m, int32_t n) { return m == 1 || n <= 1024 || n >= 65536; }

/// Whether m rows of n outputs take launch_skinny_gemm_bf16 (tensor cores, k split over a cluster) rather than
/// cuBLASLt, where gemv_preferred does not take them. Measured on H200 at Qwen3-30B-A3B shapes (gemv_bench, graphs
/// of back-to-back launches; docs/benchmarks.md): it beats cuBLASLt on O (2 048 outputs) from 2 to 16 rows (7.2-8.3
/// against 8.6-8.8 us) and on the router's 128 outputs from 9 to 32 rows (3.8-4.5 against 4.9-5.1 us), not on QKV's
/// 5 120 outputs beyond 4 rows, nor on anything beyond 32 rows (at 64 rows QKV + O take 26.6 against 17.2 us).
bool skinny_preferred(int32_t m, int32_t n) { return m >= 2 && m <= 16 && n <= 4096; }

/// The params of launch_gemv_bf16 or launch_skinny_gemm_bf16 (the same leading fields), the rest defaulted.
template <typename Params>
Params small_gemm(const void* x, const void* w, const void* bias, void* y, int32_t m, int32_t n, int32_t k,
                  bool y_fp32) {
    return {.x = static_cast<const bf16*>(x),
            .w = static_cast<const bf16*>(w),
            .bias = static_cast<const bf16*>(bias),
            .y = y,
            .m = m,
            .n = n,
            .k = k,
            .y_fp32 = y_fp32};
}

}  // namespace

void linear_bf16(const gemm_context& g, const void* x, const void* w, void* y, int32_t m, int32_t n, int32_t k,
                 bool y_fp32, const void* bias, cudaStream_t stream) {
    const bool aligned = (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16 == 0;
    if (aligned && kernels::gemv_bf16_supported(m, n, k) && gemv_preferred(m, n)) {
        kernels::launch_gemv_bf16(small_gemm<kernels::gemv_bf16_params>(x, w, bias, y, m, n, k, y_fp32), stream);
        return;
    }
    if (aligned && kernels::skinny_gemm_bf16_supported(m, n, k) && skinny_preferred(m, n)) {
        kernels::launch_skinny_gemm_bf16(small_gemm<kernels::skinny_gemm_bf16_params>(x, w, bias, y, m, n, k, y_fp32),
                                         stream);
        return;
    }
    kernels::launch_gemm_bf16({.handle = g.handle,
                               .workspace = g.workspace,
                               .workspace_bytes = g.workspace_bytes,
                               .x = static_cast<const bf16*>(x),
                               .w = static_cast<const bf16*>(w),
                               .y = y,
                               .m = m,
                               .n = n,
                               .k = k,
                               .y_fp32 = y_fp32},
                              stream);
    if (bias != nullptr && m > 0) {
        ZMOE_CHECK(!y_fp32, "a bias on an fp32 GEMM output");
        kernels::launch_add_bias(
            {.y = static_cast<bf16*>(y), .bias = static_cast<const bf16*>(bias), .num_tokens = m, .n = n}, stream);
    }
}

}  // namespace zmoe::cuda
