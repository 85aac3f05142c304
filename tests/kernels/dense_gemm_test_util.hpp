#pragma once
// Shared by the tests of the dense BF16 launchers for decode steps (launch_gemv_bf16, launch_skinny_gemm_bf16):
// running one on host data, and the fp32 reference it is checked against.

#include <vector>

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {

/// Runs launch(p) for y = x . w^T (+ bias) on device copies (BF16) of x [m, k], w [n, k] and, when with_bias, bias
/// [n]. p gives the shape (m, n, k, y_fp32) and any launcher-specific fields; its x, w, bias and y are filled here.
/// Both output buffers are poisoned first; returns y [m, n] (fp32, or BF16 widened to fp32).
template <typename Params>
std::vector<float> run_dense_bf16(Params p, bool with_bias, const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& bias, void (*launch)(const Params&, cudaStream_t)) {
    auto d_x = upload_bf16(x);
    auto d_w = upload_bf16(w);
    auto d_b = upload_bf16(bias);
    device_buffer<bf16> d_y16(size_t(p.m) * p.n);
    device_buffer<float> d_y32(size_t(p.m) * p.n);
    d_y16.poison();
    d_y32.poison();
    p.x = d_x.get();
    p.w = d_w.get();
    p.bias = with_bias ? d_b.get() : nullptr;
    p.y = p.y_fp32 ? static_cast<void*>(d_y32.get()) : static_cast<void*>(d_y16.get());
    launch(p, nullptr);
    sync_and_check();
    return p.y_fp32 ? download(d_y32) : download_bf16(d_y16);
}

/// ref::gemm of x [m, k] and w [n, k], plus bias [n] on every row when with_bias.
inline std::vector<float> dense_reference(const std::vector<float>& x, const std::vector<float>& w,
                                          const std::vector<float>& bias, bool with_bias, int32_t m, int32_t n,
                                          int32_t k) {
    std::vector<float> y(size_t(m) * n);
    ref::gemm(x.data(), w.data(), y.data(), m, n, k);
    if (with_bias)
        for (int32_t i = 0; i < m; ++i)
            for (int32_t j = 0; j < n; ++j) y[size_t(i) * n + j] += bias[j];
    return y;
}

}  // namespace zmoe::kernels::test
