#pragma once
// Appends msgpack values to a byte string. Every encoder in messages/ writes through this class; the bytes it
// produces are plain msgpack (any msgpack library reads them), with integers in their shortest form.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zmoe {

class msgpack_writer {
  public:
    explicit msgpack_writer(size_t reserve_bytes = 64) { buf_.reserve(reserve_bytes); }

    void array_header(uint32_t n);
    void nil();
    void boolean(bool v);
    void uint(uint64_t v);
    void sint(int64_t v);
    void f32(float v);
    void f64(double v);
    void str(std::string_view v);
    void bin(std::string_view v);
    /// A msgpack array of integers.
    void int32_array(std::span<const int32_t> v);
    void uint64_array(std::span<const uint64_t> v);
    void string_array(const std::vector<std::string>& v);
    /// A bin of packed little-endian values: the hot-path encoding of token ids, block tables and expert counts.
    void int32_le(std::span<const int32_t> v);
    void uint32_le(std::span<const uint32_t> v);

    const std::string& bytes() const { return buf_; }
    std::string take() { return std::move(buf_); }

  private:
    std::string buf_;
};

}  // namespace zmoe
