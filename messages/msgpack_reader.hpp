#pragma once
// A bounds-checked pull parser for msgpack, used by every decoder in messages/. It reads values straight out of
// the received bytes (no intermediate object tree), so the step codecs stay cheap, and it validates every length
// against the bytes that remain, so a hostile frame can never make a decoder read out of bounds or allocate more
// than a small multiple of the frame's own size. Every failure throws zmoe::error(errc::protocol, ...) naming the
// protocol, the field and what was wrong.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zmoe {

/// The msgpack type family of the next value.
enum class msgpack_type : uint8_t { nil, boolean, integer, floating, str, bin, array, map, ext, invalid };

class msgpack_reader {
  public:
    /// `what` names the protocol in error messages (e.g. "client protocol"); it must outlive the reader.
    msgpack_reader(std::string_view bytes, const char* what) : data_(bytes), what_(what) {}

    bool at_end() const { return pos_ == data_.size(); }
    size_t remaining() const { return data_.size() - pos_; }
    /// Type of the next value; throws when no bytes remain.
    msgpack_type peek(const char* field) const;

    /// Array header; throws when the count exceeds max_len or the bytes that remain (each element takes >= 1 byte).
    uint32_t read_array_header(uint32_t max_len, const char* field);
    void read_nil(const char* field);
    /// Consumes a nil and returns true, or returns false leaving the reader where it was.
    bool try_read_nil();
    bool read_bool(const char* field);
    /// Any msgpack integer that fits in [0, max].
    uint64_t read_uint(const char* field, uint64_t max = UINT64_MAX);
    /// Any msgpack integer that fits in [min, max].
    int64_t read_int(const char* field, int64_t min = INT64_MIN, int64_t max = INT64_MAX);
    int32_t read_int32(const char* field) { return static_cast<int32_t>(read_int(field, INT32_MIN, INT32_MAX)); }
    uint32_t read_uint32(const char* field) { return static_cast<uint32_t>(read_uint(field, UINT32_MAX)); }
    /// float32, float64 or an integer.
    double read_double(const char* field);
    float read_float(const char* field) { return static_cast<float>(read_double(field)); }
    /// A str of at most max_len bytes; the view points into the input bytes.
    std::string_view read_str(const char* field, size_t max_len);
    /// A bin of at most max_len bytes; the view points into the input bytes.
    std::string_view read_bin(const char* field, size_t max_len);
    /// Skips one value of any type (nesting depth capped, so hostile input cannot exhaust the stack).
    void skip(const char* field);

    /// Throws zmoe::error(errc::protocol) with "<what>: <field>: <message>".
    [[noreturn]] void fail(const char* field, const std::string& message) const;

  private:
    uint8_t next_byte(const char* field);
    const char* take(size_t n, const char* field);
    uint64_t read_be(size_t n, const char* field);
    void skip_depth(const char* field, int depth);

    std::string_view data_;
    size_t pos_ = 0;
    const char* what_;
};

/// The positional fields of one msgpack array (a message or a nested record). Reading a field that the array does
/// not have throws "missing field"; finish() skips fields appended by a newer peer, so decoders stay compatible
/// with append-only schema changes.
class field_cursor {
  public:
    field_cursor(msgpack_reader& r, uint32_t num_fields) : r_(r), left_(num_fields) {}

    uint32_t left() const { return left_; }
    /// Consumes one field slot and returns the reader positioned on it.
    msgpack_reader& next(const char* field) {
        if (left_ == 0) r_.fail(field, "missing field");
        --left_;
        return r_;
    }
    bool read_bool(const char* f) { return next(f).read_bool(f); }
    uint64_t read_uint(const char* f, uint64_t max = UINT64_MAX) { return next(f).read_uint(f, max); }
    uint32_t read_uint32(const char* f) { return next(f).read_uint32(f); }
    int32_t read_int32(const char* f) { return next(f).read_int32(f); }
    int64_t read_int(const char* f) { return next(f).read_int(f); }
    double read_double(const char* f) { return next(f).read_double(f); }
    float read_float(const char* f) { return next(f).read_float(f); }
    std::string read_string(const char* f, size_t max_len) { return std::string(next(f).read_str(f, max_len)); }
    std::string read_bin_string(const char* f, size_t max_len) { return std::string(next(f).read_bin(f, max_len)); }
    /// A msgpack array of integers in int32 range.
    std::vector<int32_t> read_int32_array(const char* f, uint32_t max_len);
    /// A msgpack array of unsigned integers.
    std::vector<uint64_t> read_uint64_array(const char* f, uint32_t max_len);
    /// A msgpack array of strings.
    std::vector<std::string> read_string_array(const char* f, uint32_t max_len, size_t max_str_len);
    /// A bin holding packed little-endian int32 values (the hot-path encoding of token ids and block tables).
    std::vector<int32_t> read_int32_le(const char* f, uint32_t max_len);
    std::vector<uint32_t> read_uint32_le(const char* f, uint32_t max_len);
    /// Opens a nested record (an array) as a cursor over its fields; min_fields is checked up front.
    field_cursor read_record(const char* f, uint32_t min_fields, uint32_t max_fields = 1024);
    /// Skips the fields not read (appended by a newer peer).
    void finish() {
        while (left_ > 0) {
            --left_;
            r_.skip("appended field");
        }
    }

  private:
    msgpack_reader& r_;
    uint32_t left_;
};

}  // namespace zmoe
