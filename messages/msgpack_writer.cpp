#include "messages/msgpack_writer.hpp"

#include <msgpack.hpp>

namespace zmoe {

namespace {
// msgpack::packer's stream concept: anything with write(const char*, size_t).
struct string_sink {
    std::string& s;
    void write(const char* p, size_t n) { s.append(p, n); }
};
using packer = msgpack::packer<string_sink>;
}  // namespace

#define ZMOE_PACK(call)         \
    do {                        \
        string_sink sink{buf_}; \
        packer pk(sink);        \
        pk.call;                \
    } while (0)

void msgpack_writer::array_header(uint32_t n) { ZMOE_PACK(pack_array(n)); }
void msgpack_writer::nil() { ZMOE_PACK(pack_nil()); }
void msgpack_writer::boolean(bool v) {
    if (v) {
        ZMOE_PACK(pack_true());
    } else {
        ZMOE_PACK(pack_false());
    }
}
void msgpack_writer::uint(uint64_t v) { ZMOE_PACK(pack_uint64(v)); }
void msgpack_writer::sint(int64_t v) { ZMOE_PACK(pack_int64(v)); }
void msgpack_writer::f32(float v) { ZMOE_PACK(pack_float(v)); }
void msgpack_writer::f64(double v) { ZMOE_PACK(pack_double(v)); }
void msgpack_writer::str(std::string_view v) {
    string_sink sink{buf_};
    packer pk(sink);
    pk.pack_str(static_cast<uint32_t>(v.size()));
    pk.pack_str_body(v.data(), static_cast<uint32_t>(v.size()));
}
void msgpack_writer::bin(std::string_view v) {
    string_sink sink{buf_};
    packer pk(sink);
    pk.pack_bin(static_cast<uint32_t>(v.size()));
    pk.pack_bin_body(v.data(), static_cast<uint32_t>(v.size()));
}

void msgpack_writer::int32_array(std::span<const int32_t> v) {
    string_sink sink{buf_};
    packer pk(sink);
    pk.pack_array(static_cast<uint32_t>(v.size()));
    for (int32_t x : v) pk.pack_int32(x);
}

void msgpack_writer::uint64_array(std::span<const uint64_t> v) {
    string_sink sink{buf_};
    packer pk(sink);
    pk.pack_array(static_cast<uint32_t>(v.size()));
    for (uint64_t x : v) pk.pack_uint64(x);
}

void msgpack_writer::string_array(const std::vector<std::string>& v) {
    array_header(static_cast<uint32_t>(v.size()));
    for (const auto& s : v) str(s);
}

void msgpack_writer::int32_le(std::span<const int32_t> v) {
    bin({reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t)});
}

void msgpack_writer::uint32_le(std::span<const uint32_t> v) {
    bin({reinterpret_cast<const char*>(v.data()), v.size() * sizeof(uint32_t)});
}

#undef ZMOE_PACK

}  // namespace zmoe
