#pragma once
// Error checks for kernels/, which depends on nothing else of zmoe (not even base/). Every CUDA and cuBLAS call
// goes through one of these; a failure is a bug or a dead device, so it reports file:line and aborts, like
// ZMOE_CHECK does for the rest of zmoe.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace zmoe::kernels::detail {
[[noreturn]] inline void cuda_failed(const char* file, int line, const char* expr, const char* what) {
    std::fprintf(stderr, "zmoe: CUDA failure at %s:%d: %s: %s\n", file, line, expr, what);
    std::fflush(stderr);
    std::abort();
}
}  // namespace zmoe::kernels::detail

#define ZMOE_CUDA_CHECK(expr)                                                                                    \
    do {                                                                                                         \
        cudaError_t zmoe_cuda_err_ = (expr);                                                                     \
        if (zmoe_cuda_err_ != cudaSuccess) [[unlikely]]                                                          \
            ::zmoe::kernels::detail::cuda_failed(__FILE__, __LINE__, #expr, cudaGetErrorString(zmoe_cuda_err_)); \
    } while (0)

#define ZMOE_CUBLAS_CHECK(expr)                                                                                        \
    do {                                                                                                               \
        cublasStatus_t zmoe_cublas_st_ = (expr);                                                                       \
        if (zmoe_cublas_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                                     \
            ::zmoe::kernels::detail::cuda_failed(__FILE__, __LINE__, #expr, cublasLtGetStatusString(zmoe_cublas_st_)); \
    } while (0)

/// Checks the launch that just happened (bad configuration, too much shared memory).
#define ZMOE_CUDA_CHECK_LAUNCH() ZMOE_CUDA_CHECK(cudaGetLastError())

/// Launcher precondition: a caller bug (unsupported size, null pointer), reported with file:line.
#define ZMOE_KERNEL_REQUIRE(cond, what)                                            \
    do {                                                                           \
        if (!(cond)) [[unlikely]]                                                  \
            ::zmoe::kernels::detail::cuda_failed(__FILE__, __LINE__, #cond, what); \
    } while (0)
