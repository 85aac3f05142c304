#pragma once
// The framing every zmoe message shares: one msgpack array [protocol_version, kind, field0, field1, ...].
// Fields are positional and only ever appended; a decoder reads the fields it knows and skips the rest, so an
// older peer understands a newer one. protocol_version changes only on an incompatible change, and a decoder
// rejects any version but its own.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "messages/msgpack_reader.hpp"
#include "messages/msgpack_writer.hpp"

namespace zmoe {

/// No frame larger than this is decoded (or should be sent): 64 MiB.
constexpr size_t kMaxFrameBytes = size_t{64} << 20;
/// Caps on decoded collections, so that the memory a decoder allocates stays a small multiple of the frame size.
constexpr uint32_t kMaxMessageFields = 1024;
constexpr uint32_t kMaxSeqTokens = uint32_t{1} << 22;  ///< token ids of one prompt / one step chunk
constexpr size_t kMaxStringBytes = size_t{32} << 20;   ///< one text field (a prompt)
constexpr size_t kMaxNameBytes = 4096;                 ///< ids, tags, names, endpoints, short messages

/// Writes the array header and the two leading fields of a message with num_fields fields after them.
inline void begin_message(msgpack_writer& w, uint32_t version, uint8_t kind, uint32_t num_fields) {
    w.array_header(2 + num_fields);
    w.uint(version);
    w.uint(kind);
}

/// An opened message: its kind and a cursor over its fields.
struct opened_message {
    uint8_t kind;
    field_cursor fields;
};

/// Checks the frame size, the array header and the version; returns the kind and the fields that follow it.
/// `what` names the protocol in error messages.
opened_message open_message(msgpack_reader& r, std::string_view bytes, uint32_t version, const char* what);

/// Skips appended fields and rejects bytes after the message's array.
void close_message(msgpack_reader& r, field_cursor& fields);

}  // namespace zmoe
