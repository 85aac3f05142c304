// The copy bandwidth of one GPU (the one a worker of rank `rank` uses), measured with CUDA events around
// device-to-device copies.

#include <cuda_runtime_api.h>

#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "workers/cuda/device_buffer.hpp"

namespace zmoe {

double measure_cuda_copy_bandwidth(int rank, size_t n) {
    int num_devices = 0;
    ZMOE_CUDA_CHECK(cudaGetDeviceCount(&num_devices));
    if (num_devices > 0) ZMOE_CUDA_CHECK(cudaSetDevice(rank % num_devices));
    cuda::device_buffer a(n), b(n);
    ZMOE_CUDA_CHECK(cudaMemset(a.as<void>(), 1, n));
    cudaEvent_t start = nullptr, stop = nullptr;
    ZMOE_CUDA_CHECK(cudaEventCreate(&start));
    ZMOE_CUDA_CHECK(cudaEventCreate(&stop));
    double best = 0;
    for (int i = 0; i < 6; ++i) {
        ZMOE_CUDA_CHECK(cudaEventRecord(start));
        ZMOE_CUDA_CHECK(cudaMemcpyAsync(b.as<void>(), a.as<void>(), n, cudaMemcpyDeviceToDevice));
        ZMOE_CUDA_CHECK(cudaEventRecord(stop));
        ZMOE_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        ZMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (i > 0) best = std::max(best, 2.0 * static_cast<double>(n) / (ms * 1e-3));  // read + write
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return best;
}

}  // namespace zmoe
