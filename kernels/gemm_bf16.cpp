// Dense BF16 GEMM through cuBLASLt. Row-major y[m, n] = x[m, k] . w[n, k]^T is, in cuBLAS's column-major terms,
// y^T[n, m] = w . x^T with w read transposed: A = w (k x n, ld k, op T), B = x (k x m, ld k), C = y^T (n x m, ld n).
// The algorithm chosen by the heuristic is cached per shape: asking costs microseconds, a decode step asks often.

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::kernels {
namespace {

struct gemm_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
};

using plan_key = std::tuple<cublasLtHandle_t, int32_t, int32_t, int32_t, bool, size_t>;

const gemm_plan& plan_for(const gemm_bf16_params& p) {
    static std::mutex mutex;
    static std::map<plan_key, gemm_plan> plans;  // never freed: a handful of shapes per model
    std::lock_guard lock(mutex);
    const plan_key key{p.handle, p.m, p.n, p.k, p.y_fp32, p.workspace_bytes};
    if (auto it = plans.find(key); it != plans.end()) return it->second;

    gemm_plan plan;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, p.k, p.n, p.k));
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, p.k, p.m, p.k));
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, p.y_fp32 ? CUDA_R_32F : CUDA_R_16BF, p.n, p.m, p.n));

    cublasLtMatmulPreference_t pref = nullptr;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &p.workspace_bytes, sizeof(p.workspace_bytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    ZMOE_CUBLAS_CHECK(
        cublasLtMatmulAlgoGetHeuristic(p.handle, plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    ZMOE_KERNEL_REQUIRE(found > 0, "gemm_bf16: cuBLASLt found no algorithm for this shape");
    plan.algo = result.algo;
    return plans.emplace(key, plan).first->second;
}

}  // namespace

void launch_gemm_bf16(const gemm_bf16_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.handle != nullptr, "gemm_bf16: no cuBLASLt handle");
    if (p.m == 0 || p.n == 0) return;
    const gemm_plan& plan = plan_for(p);
    const float alpha = 1.f, beta = 0.f;
    ZMOE_CUBLAS_CHECK(cublasLtMatmul(p.handle, plan.op, &alpha, p.w, plan.a, p.x, plan.b, &beta, p.y, plan.c, p.y,
                                     plan.c, &plan.algo, p.workspace, p.workspace_bytes, stream));
}

}  // namespace zmoe::kernels
