// launch_gemm_bf16 (cuBLASLt) against ref::gemm, BF16 and fp32 outputs.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct gemm_case {
    int32_t m, n, k;
    bool y_fp32;
};

class GemmBf16 : public ::testing::TestWithParam<gemm_case> {};

TEST_P(GemmBf16, MatchesReference) {
    const auto c = GetParam();
    std::mt19937 rng(c.m + c.n + c.k);
    const auto x = random_bf16(size_t(c.m) * c.k, 1.f, rng);
    const auto w = random_bf16(size_t(c.n) * c.k, 1.f / std::sqrt(float(c.k)), rng);
    auto d_x = upload_bf16(x);
    auto d_w = upload_bf16(w);
    device_buffer<uint8_t> d_ws(32u << 20);
    device_buffer<bf16> d_y16(size_t(c.m) * c.n);
    device_buffer<float> d_y32(size_t(c.m) * c.n);
    d_y16.poison();
    d_y32.poison();
    cublasLtHandle_t handle;
    ZMOE_CUBLAS_CHECK(cublasLtCreate(&handle));
    gemm_bf16_params p;
    p.handle = handle;
    p.workspace = d_ws.get();
    p.workspace_bytes = d_ws.size();
    p.x = d_x.get();
    p.w = d_w.get();
    p.y = c.y_fp32 ? static_cast<void*>(d_y32.get()) : static_cast<void*>(d_y16.get());
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.y_fp32 = c.y_fp32;
    launch_gemm_bf16(p, nullptr);
    launch_gemm_bf16(p, nullptr);  // the second call takes the cached plan
    sync_and_check();
    ZMOE_CUBLAS_CHECK(cublasLtDestroy(handle));

    std::vector<float> want(size_t(c.m) * c.n);
    ref::gemm(x.data(), w.data(), want.data(), c.m, c.n, c.k);
    const auto got = c.y_fp32 ? download(d_y32) : download_bf16(d_y16);
    EXPECT_LT(rel_error(got, want), c.y_fp32 ? 1e-3 : kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmBf16,
                         ::testing::Values(gemm_case{1, 2048, 2048, false}, gemm_case{77, 512, 2048, true},
                                           gemm_case{4096, 128, 256, false}, gemm_case{3, 128, 64, true},
                                           gemm_case{300, 4608, 512, false}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("m", c.m, "_n", c.n, "_k", c.k, (c.y_fp32 ? "_f32" : "_bf16"));
                         });

}  // namespace
}  // namespace zmoe::kernels::test
