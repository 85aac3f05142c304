#pragma once
// Helpers for the kernel tests: device buffers, random BF16 data, and the error measures the tests assert on.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/reference/bf16.hpp"

namespace zmoe::kernels::test {

/// Owns one device allocation of n elements of T.
template <typename T>
class device_buffer {
  public:
    device_buffer() = default;
    explicit device_buffer(size_t n) : n_(n) {
        if (n_ > 0) ZMOE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n_ * sizeof(T)));
    }
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;
    device_buffer(device_buffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    ~device_buffer() {
        if (ptr_) cudaFree(ptr_);
    }
    T* get() const { return ptr_; }
    size_t size() const { return n_; }
    /// Fills every byte with `byte` (0xff makes BF16 and fp32 NaNs and int32 -1): unwritten outputs show.
    void poison(uint8_t byte = 0xff) {
        if (n_ > 0) ZMOE_CUDA_CHECK(cudaMemset(ptr_, byte, n_ * sizeof(T)));
    }

  private:
    T* ptr_ = nullptr;
    size_t n_ = 0;
};

template <typename T>
device_buffer<T> upload(const std::vector<T>& host) {
    device_buffer<T> d(host.size());
    if (!host.empty())
        ZMOE_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T>
std::vector<T> download(const device_buffer<T>& d) {
    ZMOE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(d.size());
    if (!host.empty())
        ZMOE_CUDA_CHECK(cudaMemcpy(host.data(), d.get(), host.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}

/// BF16 upload of float values (rounded to nearest even).
inline device_buffer<bf16> upload_bf16(const std::vector<float>& host) {
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); ++i) bits[i] = ref::float_to_bf16(host[i]);
    device_buffer<bf16> d(host.size());
    if (!bits.empty()) ZMOE_CUDA_CHECK(cudaMemcpy(d.get(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
    return d;
}

inline std::vector<float> download_bf16(const device_buffer<bf16>& d) {
    ZMOE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> bits(d.size());
    if (!bits.empty()) ZMOE_CUDA_CHECK(cudaMemcpy(bits.data(), d.get(), bits.size() * 2, cudaMemcpyDeviceToHost));
    return ref::to_float(bits);
}

/// Uniform values in [-scale, scale], already BF16-representable so that the reference sees what the GPU sees.
inline std::vector<float> random_bf16(size_t n, float scale, std::mt19937& rng) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = ref::round_bf16(dist(rng));
    return v;
}

/// Replica tables of num_experts experts: each has one slot plus a random share of `extra` more; expert e's slots are
/// slots[offsets[e] .. offsets[e + 1]), the slot numbers 0 .. offsets.back() - 1 shuffled over them.
struct replica_tables {
    std::vector<int32_t> offsets, slots;
};
inline replica_tables random_replicas(int32_t num_experts, int32_t extra, std::mt19937& rng) {
    std::vector<int32_t> replicas(num_experts, 1);
    for (int32_t i = 0; i < extra; ++i) ++replicas[rng() % num_experts];
    replica_tables t;
    t.offsets.assign(num_experts + 1, 0);
    for (int32_t e = 0; e < num_experts; ++e) t.offsets[e + 1] = t.offsets[e] + replicas[e];
    t.slots.resize(t.offsets.back());
    for (size_t i = 0; i < t.slots.size(); ++i) t.slots[i] = static_cast<int32_t>(i);
    std::shuffle(t.slots.begin(), t.slots.end(), rng);
    return t;
}

inline std::vector<float> random_f32(size_t n, float scale, std::mt19937& rng) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

/// max |got - ref| / max |ref| over the elements where mask (if given) is set; infinity on any NaN or size mismatch.
inline double rel_error(const std::vector<float>& got, const std::vector<float>& ref,
                        const std::vector<bool>* mask = nullptr) {
    if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (mask && !(*mask)[i]) continue;
        if (std::isnan(got[i]) || std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
        max_err = std::max(max_err, std::abs(double(got[i]) - ref[i]));
        max_ref = std::max(max_ref, std::abs(double(ref[i])));
    }
    return max_ref == 0 ? max_err : max_err / max_ref;
}

/// A test name from its parts ("t", 4, "_h", 64 -> "t4_h64").
template <typename... Parts>
std::string make_name(const Parts&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    return os.str();
}

/// Tolerance of the BF16 paths (storage in BF16, fp32 accumulation).
constexpr double kBf16Tolerance = 1e-2;

inline void sync_and_check() {
    ZMOE_CUDA_CHECK(cudaGetLastError());
    ZMOE_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace zmoe::kernels::test
