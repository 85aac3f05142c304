#pragma once
// Owned device memory for the CUDA worker: one cudaMalloc'd allocation, freed on destruction, moved never copied.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace zmoe::cuda {

class device_buffer {
  public:
    device_buffer() = default;
    /// Allocates `bytes` (at least one byte, so that a pointer exists even for empty tensors).
    explicit device_buffer(size_t bytes);
    ~device_buffer();
    device_buffer(device_buffer&& o) noexcept
        : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    device_buffer& operator=(device_buffer&& o) noexcept;
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;

    template <typename T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }
    size_t bytes() const { return bytes_; }
    bool empty() const { return ptr_ == nullptr; }

    /// Makes the buffer hold at least `bytes`, reallocating (contents lost) when it is smaller. Synchronises the
    /// device before freeing the old allocation: work already queued may still read it.
    void ensure(size_t bytes);

  private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace zmoe::cuda
