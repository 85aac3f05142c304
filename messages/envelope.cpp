#include "messages/envelope.hpp"

#include <string>

#include "base/error.hpp"

namespace zmoe {

opened_message open_message(msgpack_reader& r, std::string_view bytes, uint32_t version, const char* what) {
    if (bytes.size() > kMaxFrameBytes) {
        throw error(errc::protocol, std::string(what) + ": frame of " + std::to_string(bytes.size()) +
                                        " bytes exceeds the limit of " + std::to_string(kMaxFrameBytes));
    }
    uint32_t n = r.read_array_header(kMaxMessageFields, "message");
    if (n < 2) r.fail("message", "array of " + std::to_string(n) + " elements (needs version and kind)");
    uint64_t v = r.read_uint("protocol_version");
    if (v != version) {
        r.fail("protocol_version", "version " + std::to_string(v) + ", this build speaks " + std::to_string(version));
    }
    auto kind = static_cast<uint8_t>(r.read_uint("kind", 255));
    return {kind, field_cursor(r, n - 2)};
}

void close_message(msgpack_reader& r, field_cursor& fields) {
    fields.finish();
    if (!r.at_end()) r.fail("message", std::to_string(r.remaining()) + " trailing bytes after the message");
}

}  // namespace zmoe
