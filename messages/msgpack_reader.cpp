#include "messages/msgpack_reader.hpp"

#include <bit>
#include <cstring>

#include "base/error.hpp"

namespace zmoe {

static_assert(std::endian::native == std::endian::little, "the packed *_le encodings assume a little-endian host");

namespace {
constexpr int kMaxSkipDepth = 32;

const char* type_name(uint8_t b) {
    if (b <= 0x7f || b >= 0xe0) return "integer";
    if (b <= 0x8f) return "map";
    if (b <= 0x9f) return "array";
    if (b <= 0xbf) return "str";
    switch (b) {
        case 0xc0:
            return "nil";
        case 0xc2:
        case 0xc3:
            return "bool";
        case 0xc4:
        case 0xc5:
        case 0xc6:
            return "bin";
        case 0xca:
        case 0xcb:
            return "float";
        case 0xd9:
        case 0xda:
        case 0xdb:
            return "str";
        case 0xdc:
        case 0xdd:
            return "array";
        case 0xde:
        case 0xdf:
            return "map";
        case 0xc1:
            return "invalid byte 0xc1";
        default:
            break;
    }
    if (b >= 0xcc && b <= 0xd3) return "integer";
    return "ext";
}
}  // namespace

void msgpack_reader::fail(const char* field, const std::string& message) const {
    throw error(errc::protocol, std::string(what_) + ": " + field + ": " + message);
}

uint8_t msgpack_reader::next_byte(const char* field) {
    if (pos_ >= data_.size()) fail(field, "truncated message");
    return static_cast<uint8_t>(data_[pos_++]);
}

const char* msgpack_reader::take(size_t n, const char* field) {
    if (n > data_.size() - pos_) fail(field, "truncated message (needs " + std::to_string(n) + " more bytes)");
    const char* p = data_.data() + pos_;
    pos_ += n;
    return p;
}

uint64_t msgpack_reader::read_be(size_t n, const char* field) {
    const auto* p = reinterpret_cast<const uint8_t*>(take(n, field));
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
    return v;
}

msgpack_type msgpack_reader::peek(const char* field) const {
    if (pos_ >= data_.size()) fail(field, "truncated message");
    uint8_t b = static_cast<uint8_t>(data_[pos_]);
    if (b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3)) return msgpack_type::integer;
    if (b <= 0x8f || b == 0xde || b == 0xdf) return msgpack_type::map;
    if (b <= 0x9f || b == 0xdc || b == 0xdd) return msgpack_type::array;
    if (b <= 0xbf || (b >= 0xd9 && b <= 0xdb)) return msgpack_type::str;
    switch (b) {
        case 0xc0:
            return msgpack_type::nil;
        case 0xc2:
        case 0xc3:
            return msgpack_type::boolean;
        case 0xc4:
        case 0xc5:
        case 0xc6:
            return msgpack_type::bin;
        case 0xca:
        case 0xcb:
            return msgpack_type::floating;
        case 0xc1:
            return msgpack_type::invalid;
        default:
            return msgpack_type::ext;
    }
}

uint32_t msgpack_reader::read_array_header(uint32_t max_len, const char* field) {
    uint8_t b = next_byte(field);
    uint64_t n;
    if (b >= 0x90 && b <= 0x9f) {
        n = b & 0x0f;
    } else if (b == 0xdc) {
        n = read_be(2, field);
    } else if (b == 0xdd) {
        n = read_be(4, field);
    } else {
        --pos_;
        fail(field, std::string("expected array, got ") + type_name(b));
    }
    if (n > max_len)
        fail(field, "array of " + std::to_string(n) + " elements exceeds the limit of " + std::to_string(max_len));
    if (n > remaining()) fail(field, "array of " + std::to_string(n) + " elements is longer than the message");
    return static_cast<uint32_t>(n);
}

void msgpack_reader::read_nil(const char* field) {
    if (!try_read_nil()) fail(field, std::string("expected nil, got ") + type_name(static_cast<uint8_t>(data_[pos_])));
}

bool msgpack_reader::try_read_nil() {
    if (pos_ < data_.size() && static_cast<uint8_t>(data_[pos_]) == 0xc0) {
        ++pos_;
        return true;
    }
    return false;
}

bool msgpack_reader::read_bool(const char* field) {
    uint8_t b = next_byte(field);
    if (b == 0xc2) return false;
    if (b == 0xc3) return true;
    --pos_;
    fail(field, std::string("expected bool, got ") + type_name(b));
}

// Reads any integer encoding into a sign flag and magnitude so both read_uint and read_int can range-check it.
uint64_t msgpack_reader::read_uint(const char* field, uint64_t max) {
    int64_t v = 0;
    uint8_t b = next_byte(field);
    uint64_t u;
    if (b <= 0x7f) {
        u = b;
    } else if (b >= 0xcc && b <= 0xcf) {
        u = read_be(size_t{1} << (b - 0xcc), field);
    } else if (b >= 0xe0) {
        v = static_cast<int8_t>(b);
        fail(field, "expected a non-negative integer, got " + std::to_string(v));
    } else if (b >= 0xd0 && b <= 0xd3) {
        size_t n = size_t{1} << (b - 0xd0);
        uint64_t raw = read_be(n, field);
        // Sign-extend from n bytes.
        int shift = static_cast<int>(64 - 8 * n);
        v = static_cast<int64_t>(raw << shift) >> shift;
        if (v < 0) fail(field, "expected a non-negative integer, got " + std::to_string(v));
        u = static_cast<uint64_t>(v);
    } else {
        --pos_;
        fail(field, std::string("expected integer, got ") + type_name(b));
    }
    if (u > max) fail(field, "integer " + std::to_string(u) + " exceeds the limit of " + std::to_string(max));
    return u;
}

int64_t msgpack_reader::read_int(const char* field, int64_t min, int64_t max) {
    uint8_t b = next_byte(field);
    int64_t v;
    if (b <= 0x7f) {
        v = b;
    } else if (b >= 0xe0) {
        v = static_cast<int8_t>(b);
    } else if (b >= 0xcc && b <= 0xcf) {
        uint64_t u = read_be(size_t{1} << (b - 0xcc), field);
        if (u > static_cast<uint64_t>(INT64_MAX)) fail(field, "integer " + std::to_string(u) + " out of range");
        v = static_cast<int64_t>(u);
    } else if (b >= 0xd0 && b <= 0xd3) {
        size_t n = size_t{1} << (b - 0xd0);
        uint64_t raw = read_be(n, field);
        int shift = static_cast<int>(64 - 8 * n);
        v = static_cast<int64_t>(raw << shift) >> shift;
    } else {
        --pos_;
        fail(field, std::string("expected integer, got ") + type_name(b));
    }
    if (v < min || v > max) {
        fail(field,
             "integer " + std::to_string(v) + " outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    return v;
}

double msgpack_reader::read_double(const char* field) {
    uint8_t b = static_cast<uint8_t>(pos_ < data_.size() ? data_[pos_] : 0);
    if (pos_ < data_.size() && b == 0xca) {
        ++pos_;
        auto bits = static_cast<uint32_t>(read_be(4, field));
        return static_cast<double>(std::bit_cast<float>(bits));
    }
    if (pos_ < data_.size() && b == 0xcb) {
        ++pos_;
        return std::bit_cast<double>(read_be(8, field));
    }
    if (peek(field) == msgpack_type::integer) return static_cast<double>(read_int(field));
    fail(field, std::string("expected number, got ") + type_name(b));
}

std::string_view msgpack_reader::read_str(const char* field, size_t max_len) {
    uint8_t b = next_byte(field);
    size_t n;
    if (b >= 0xa0 && b <= 0xbf) {
        n = b & 0x1f;
    } else if (b >= 0xd9 && b <= 0xdb) {
        n = read_be(size_t{1} << (b - 0xd9), field);
    } else {
        --pos_;
        fail(field, std::string("expected str, got ") + type_name(b));
    }
    if (n > max_len)
        fail(field, "string of " + std::to_string(n) + " bytes exceeds the limit of " + std::to_string(max_len));
    return {take(n, field), n};
}

std::string_view msgpack_reader::read_bin(const char* field, size_t max_len) {
    uint8_t b = next_byte(field);
    size_t n;
    if (b >= 0xc4 && b <= 0xc6) {
        n = read_be(size_t{1} << (b - 0xc4), field);
    } else {
        --pos_;
        fail(field, std::string("expected bin, got ") + type_name(b));
    }
    if (n > max_len)
        fail(field, "bin of " + std::to_string(n) + " bytes exceeds the limit of " + std::to_string(max_len));
    return {take(n, field), n};
}

void msgpack_reader::skip(const char* field) { skip_depth(field, 0); }

void msgpack_reader::skip_depth(const char* field, int depth) {
    if (depth > kMaxSkipDepth) fail(field, "values nested deeper than " + std::to_string(kMaxSkipDepth));
    uint8_t b = next_byte(field);
    uint64_t num_children = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return;
    if (b <= 0x8f) {
        num_children = 2 * uint64_t{b & 0x0fu};
    } else if (b <= 0x9f) {
        num_children = b & 0x0f;
    } else if (b <= 0xbf) {
        take(b & 0x1f, field);
        return;
    } else {
        switch (b) {
            case 0xc1:
                --pos_;
                fail(field, "invalid byte 0xc1");
            case 0xc4:
            case 0xc5:
            case 0xc6:
                take(read_be(size_t{1} << (b - 0xc4), field), field);
                return;
            case 0xc7:
            case 0xc8:
            case 0xc9:
                take(read_be(size_t{1} << (b - 0xc7), field) + 1, field);
                return;
            case 0xca:
                take(4, field);
                return;
            case 0xcb:
                take(8, field);
                return;
            case 0xcc:
            case 0xcd:
            case 0xce:
            case 0xcf:
                take(size_t{1} << (b - 0xcc), field);
                return;
            case 0xd0:
            case 0xd1:
            case 0xd2:
            case 0xd3:
                take(size_t{1} << (b - 0xd0), field);
                return;
            case 0xd4:
            case 0xd5:
            case 0xd6:
            case 0xd7:
            case 0xd8:
                take((size_t{1} << (b - 0xd4)) + 1, field);
                return;
            case 0xd9:
            case 0xda:
            case 0xdb:
                take(read_be(size_t{1} << (b - 0xd9), field), field);
                return;
            case 0xdc:
                num_children = read_be(2, field);
                break;
            case 0xdd:
                num_children = read_be(4, field);
                break;
            case 0xde:
                num_children = 2 * read_be(2, field);
                break;
            case 0xdf:
                num_children = 2 * read_be(4, field);
                break;
            default:
                fail(field, "unreachable msgpack byte");
        }
    }
    if (num_children > remaining()) fail(field, "container longer than the message");
    for (uint64_t i = 0; i < num_children; ++i) skip_depth(field, depth + 1);
}

std::vector<int32_t> field_cursor::read_int32_array(const char* f, uint32_t max_len) {
    msgpack_reader& r = next(f);
    uint32_t n = r.read_array_header(max_len, f);
    std::vector<int32_t> out(n);
    for (uint32_t i = 0; i < n; ++i) out[i] = r.read_int32(f);
    return out;
}

std::vector<uint64_t> field_cursor::read_uint64_array(const char* f, uint32_t max_len) {
    msgpack_reader& r = next(f);
    uint32_t n = r.read_array_header(max_len, f);
    std::vector<uint64_t> out(n);
    for (uint32_t i = 0; i < n; ++i) out[i] = r.read_uint(f);
    return out;
}

std::vector<std::string> field_cursor::read_string_array(const char* f, uint32_t max_len, size_t max_str_len) {
    msgpack_reader& r = next(f);
    uint32_t n = r.read_array_header(max_len, f);
    std::vector<std::string> out;
    out.reserve(n);
    for (uint32_t i = 0; i < n; ++i) out.emplace_back(r.read_str(f, max_str_len));
    return out;
}

std::vector<int32_t> field_cursor::read_int32_le(const char* f, uint32_t max_len) {
    msgpack_reader& r = next(f);
    std::string_view b = r.read_bin(f, size_t{max_len} * 4);
    if (b.size() % 4 != 0)
        r.fail(f, "packed int32 bin of " + std::to_string(b.size()) + " bytes (not a multiple of 4)");
    std::vector<int32_t> out(b.size() / 4);
    if (!b.empty()) std::memcpy(out.data(), b.data(), b.size());
    return out;
}

std::vector<uint32_t> field_cursor::read_uint32_le(const char* f, uint32_t max_len) {
    msgpack_reader& r = next(f);
    std::string_view b = r.read_bin(f, size_t{max_len} * 4);
    if (b.size() % 4 != 0)
        r.fail(f, "packed uint32 bin of " + std::to_string(b.size()) + " bytes (not a multiple of 4)");
    std::vector<uint32_t> out(b.size() / 4);
    if (!b.empty()) std::memcpy(out.data(), b.data(), b.size());
    return out;
}

field_cursor field_cursor::read_record(const char* f, uint32_t min_fields, uint32_t max_fields) {
    msgpack_reader& r = next(f);
    uint32_t n = r.read_array_header(max_fields, f);
    if (n < min_fields) {
        r.fail(f, "record has " + std::to_string(n) + " fields, expected at least " + std::to_string(min_fields));
    }
    return field_cursor(r, n);
}

}  // namespace zmoe
