// Block-scaled FP8 GEMM through cuBLASLt. As in gemm_bf16.cpp, row-major c[m, n] = a[m, k] . w[n, k]^T is, in
// cuBLAS's column-major terms, c^T[n, m] = w . a^T with w read transposed: A = w (k x n, ld k, op T), B = a (k x m,
// ld k), D = c^T (n x m, ld n). The weights' scales are A's 128 x 128 block scales in the checkpoint layout
// [ceil(n / 128)][ceil(k / 128)] (cuBLASLt's when the K blocks are a multiple of 4: its leading dimension is their
// count rounded up to 4); the activations' are B's per-column 128-vector scales [ceil(k / 128)][m] (what
// launch_fp8_quantize writes with scale_ld == m, m a multiple of 4 for the same reason). The descriptors and the
// heuristic's algorithm are kept per shape; the scale pointers live in the matmul descriptor, so every launch sets them
// before cublasLtMatmul, under the lock.

#include "kernels/gemm_fp8_blas.hpp"

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda_check.hpp"

namespace zmoe::kernels {
namespace {

struct blas_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool found = false;  // the heuristic's answer: an algorithm exists for the shape
};

using plan_key = std::tuple<cublasLtHandle_t, int32_t, int32_t, int32_t, size_t>;

std::mutex& plans_mutex() {
    static std::mutex mutex;
    return mutex;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool well_formed(const gemm_fp8_blas_params& p) {
    return p.handle != nullptr && p.m > 0 && p.n > 0 && p.k > 0 && p.m % 4 == 0 && p.n % 16 == 0 && p.k % 16 == 0 &&
           (p.k + 127) / 128 % 4 == 0 && p.a != nullptr && p.a_scales != nullptr && p.w != nullptr &&
           p.w_scales != nullptr && p.c != nullptr && aligned16(p.a) && aligned16(p.w) && aligned16(p.c) &&
           aligned16(p.a_scales) && aligned16(p.w_scales) && (p.workspace_bytes == 0 || p.workspace != nullptr);
}

void set_scale_pointers(cublasLtMatmulDesc_t op, const gemm_fp8_blas_params& p) {
    ZMOE_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p.w_scales, sizeof(p.w_scales)));
    ZMOE_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p.a_scales, sizeof(p.a_scales)));
}

/// The shape's plan, made on the first call (descriptors, the heuristic's first algorithm). Called with the lock held.
const blas_plan& plan_for(const gemm_fp8_blas_params& p) {
    static std::map<plan_key, blas_plan> plans;  // never freed: a handful of shapes per model
    const plan_key key{p.handle, p.m, p.n, p.k, p.workspace_bytes};
    if (auto it = plans.find(key); it != plans.end()) return it->second;

    blas_plan plan;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    const cublasLtMatmulMatrixScale_t mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                      mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    ZMOE_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof(mode_a)));
    ZMOE_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof(mode_b)));
    set_scale_pointers(plan.op, p);
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_8F_E4M3, p.k, p.n, p.k));
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_8F_E4M3, p.k, p.m, p.k));
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_16BF, p.n, p.m, p.n));

    cublasLtMatmulPreference_t pref = nullptr;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &p.workspace_bytes, sizeof(p.workspace_bytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    // A refusal (CUBLAS_STATUS_NOT_SUPPORTED, e.g. at one row) is an answer, not an error: the plan says no.
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(p.handle, plan.op, plan.a, plan.b, plan.d, plan.d, pref, 1, &result, &found);
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) ZMOE_CUBLAS_CHECK(st);
    plan.found = st == CUBLAS_STATUS_SUCCESS && found > 0;
    plan.algo = result.algo;
    return plans.emplace(key, plan).first->second;
}

}  // namespace

bool gemm_fp8_blas_supported(const gemm_fp8_blas_params& p) {
    if (!well_formed(p)) return false;
    std::lock_guard lock(plans_mutex());
    return plan_for(p).found;
}

void launch_gemm_fp8_blas(const gemm_fp8_blas_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(well_formed(p), "gemm_fp8_blas: malformed parameters (gemm_fp8_blas_params' comments)");
    std::lock_guard lock(plans_mutex());
    const blas_plan& plan = plan_for(p);
    ZMOE_KERNEL_REQUIRE(plan.found, "gemm_fp8_blas: cuBLASLt has no block-scaled FP8 algorithm for this shape");
    set_scale_pointers(plan.op, p);
    const float alpha = 1.f, beta = 0.f;
    ZMOE_CUBLAS_CHECK(cublasLtMatmul(p.handle, plan.op, &alpha, p.w, plan.a, p.a, plan.b, &beta, p.c, plan.d, p.c,
                                     plan.d, &plan.algo, p.workspace, p.workspace_bytes, stream));
}

}  // namespace zmoe::kernels
