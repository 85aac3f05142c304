#include "workers/cuda/device_buffer.hpp"

#include <algorithm>
#include <string>

#include "base/error.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::cuda {

device_buffer::device_buffer(size_t bytes) {
    const size_t n = std::max<size_t>(bytes, 1);
    const cudaError_t e = cudaMalloc(&ptr_, n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky-free error so later calls do not report it
        throw error(errc::out_of_memory,
                    "cudaMalloc of " + std::to_string(n) + " bytes failed: " + cudaGetErrorString(e));
    }
    bytes_ = bytes;
}

device_buffer::~device_buffer() {
    if (ptr_) cudaFree(ptr_);
}

device_buffer& device_buffer::operator=(device_buffer&& o) noexcept {
    if (this != &o) {
        if (ptr_) cudaFree(ptr_);
        ptr_ = std::exchange(o.ptr_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

void device_buffer::ensure(size_t bytes) {
    if (ptr_ && bytes_ >= bytes) return;
    if (ptr_) ZMOE_CUDA_CHECK(cudaDeviceSynchronize());
    // Grow geometrically: batch sizes creep up over the first steps.
    *this = device_buffer(std::max(bytes, bytes_ + bytes_ / 2));
}

}  // namespace zmoe::cuda
